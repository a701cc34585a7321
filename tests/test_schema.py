"""The OpenAPI document: served without a key, lists every endpoint, and describes the real responses."""

from __future__ import annotations

import re
import uuid

import pytest
import requests
from jsonschema import Draft202012Validator

from .client import Api
from .test_authorization_matrix import api_routes

# Routes that serve the API's description itself rather than being part of it.
SELF_DESCRIPTION = {"", "api/schema/", "api/docs/"}  # "" leads to the docs

# Endpoints that need a key, so a 401 is one of their real responses: (path, method).
KEYED_OPERATIONS = [
    ("/api/terminals", "get"),
    ("/api/terminals", "post"),
    ("/api/terminals/{id}", "get"),
    ("/api/terminals/{id}", "delete"),
    ("/api/terminals/{id}/input", "post"),
    ("/api/terminals/{id}/output", "get"),
    ("/api/terminals/{id}/stats", "get"),
    ("/api/audit", "get"),
]


@pytest.fixture(scope="module")
def document(embedded_server) -> dict:  # embedded only: one document, served by the same web code in both deployments
    response = requests.get(f"{embedded_server.url}/api/schema/", params={"format": "json"}, timeout=30)
    assert response.status_code == 200, response.text
    return response.json()


def json_schema(node):
    """The OpenAPI 3.0 schema as JSON Schema 2020-12: `nullable: true` becomes "or null"."""
    if isinstance(node, list):
        return [json_schema(item) for item in node]
    if not isinstance(node, dict):
        return node
    converted = {key: json_schema(value) for key, value in node.items() if key != "nullable"}
    if node.get("nullable") is True:
        return {"anyOf": [{"type": "null"}, converted]}
    return converted


def response_validator(document: dict, path: str, method: str, status: int) -> Draft202012Validator:
    """A validator for the JSON body the document promises for this operation and status."""
    responses = document["paths"][path][method]["responses"]
    assert str(status) in responses, f"{method.upper()} {path} does not document a {status} response"
    schema = responses[str(status)]["content"]["application/json"]["schema"]
    # The operation's schema with the document's components beside it, so "#/components/..." resolves.
    root = {**json_schema(schema), "components": json_schema(document["components"])}
    return Draft202012Validator(root, format_checker=Draft202012Validator.FORMAT_CHECKER)


def problems(validator: Draft202012Validator, body) -> list[str]:
    """Each way the body breaks the schema, as "path/in/body: what is wrong"."""
    found = validator.iter_errors(body)
    return [f"{'/'.join(map(str, error.absolute_path)) or '<body>'}: {error.message}" for error in found]


@pytest.fixture(scope="module")
def real_responses(server, keys) -> dict[str, tuple[str, str, int, object]]:
    """One real response of each operation, by name: (documented path, method, status, JSON body), from each
    deployment: a split worker's answers must match the document as the embedded server's do."""
    api = Api(server.url, keys["alice"])
    anonymous = Api(server.url, None)
    seen: dict[str, tuple[str, str, int, object]] = {}

    def record(name, path, method, response):
        seen[name] = (path, method, response.status_code, response.json())
        return response

    created = record("create", "/api/terminals", "post", api.post("/api/terminals", json={"shell": "/bin/bash"}))
    terminal = created.json()["data"]["terminalId"]
    api.created.append(terminal)
    api.run(terminal, "echo schema")
    base = f"/api/terminals/{terminal}"
    record("input", "/api/terminals/{id}/input", "post", api.post(f"{base}/input", json={"input": "echo more"}))
    record("output", "/api/terminals/{id}/output", "get", api.get(f"{base}/output"))
    record("output-tail", "/api/terminals/{id}/output", "get", api.get(f"{base}/output", params={"mode": "tail"}))
    record("stats", "/api/terminals/{id}/stats", "get", api.get(f"{base}/stats"))
    record("list", "/api/terminals", "get", api.get("/api/terminals"))
    record("detail", "/api/terminals/{id}", "get", api.get(base))
    record("audit", "/api/audit", "get", api.get("/api/audit", params={"terminal": terminal}))
    record("health", "/api/health", "get", anonymous.get("/api/health"))
    record("delete", "/api/terminals/{id}", "delete", api.delete(base))
    record("detail-ended", "/api/terminals/{id}", "get", api.get(base))
    record("stats-ended", "/api/terminals/{id}/stats", "get", api.get(f"{base}/stats"))
    record("error-404", "/api/terminals/{id}", "get", api.get(f"/api/terminals/{uuid.uuid4()}"))
    record("error-400", "/api/terminals", "post", api.post("/api/terminals", json={"cols": 0}))
    record("error-401", "/api/terminals/{id}/output", "get", anonymous.get(f"{base}/output"))
    record("error-409", "/api/terminals/{id}/input", "post", api.post(f"{base}/input", json={"input": "ls"}))
    yield seen
    api.cleanup()


# The document itself


def test_schema_is_served_as_openapi_3_json_without_a_key(embedded_server):
    """/api/schema/ answers without a key, as JSON with ?format=json or an Accept header."""
    for options in ({"params": {"format": "json"}}, {"headers": {"Accept": "application/vnd.oai.openapi+json"}},
                    {"headers": {"Accept": "application/json"}}):
        response = requests.get(f"{embedded_server.url}/api/schema/", timeout=30, **options)
        assert response.status_code == 200, response.text
        assert "json" in response.headers["Content-Type"]
        document = response.json()
        assert document["openapi"].startswith("3.")
        assert document["info"]["title"]


def documented_operations(document: dict) -> set[tuple[str, str]]:
    """Every (path, method) the document describes: ("/api/terminals/{id}", "GET")."""
    verbs = {"get", "post", "put", "patch", "delete"}
    return {(path, method.upper()) for path, operations in document["paths"].items() for method in operations
            if method in verbs}


def served_operations() -> set[tuple[str, str]]:
    """Every (path, method) the URL configuration serves under /api, named as the document names them."""
    return {
        ("/" + path.replace("{pk}", "{id}"), method)
        for path, method in api_routes()
        if path not in SELF_DESCRIPTION
    }


def test_schema_lists_every_path(document):
    """The document describes exactly the operations the URL configuration serves: none missing, none extra."""
    documented, served = documented_operations(document), served_operations()
    assert sorted(served - documented) == [], "served but not in the schema"
    assert sorted(documented - served) == [], "in the schema but not served"


def test_schema_path_parameters_match_the_path(document):
    """Each operation declares exactly the path parameters its path has."""
    wrong = []
    for path, operations in document["paths"].items():
        in_path = set(re.findall(r"{(\w+)}", path))
        for method, operation in operations.items():
            declared = {parameter["name"] for parameter in operation.get("parameters", []) if parameter["in"] == "path"}
            if declared != in_path:
                wrong.append(f"{method.upper()} {path} declares {sorted(declared)}")
    assert wrong == []


def test_schema_every_keyed_operation_documents_401(document):
    """Every endpoint that needs a key documents its 401 error envelope."""
    missing = [
        f"{method.upper()} {path}"
        for path, method in KEYED_OPERATIONS
        if "401" not in document["paths"][path][method]["responses"]
    ]
    assert missing == []


def test_schema_health_needs_no_key(document):
    """The document lets /api/health be called without a key."""
    assert {} in document["paths"]["/api/health"]["get"]["security"]


def test_docs_page_is_html(embedded_server):
    """/api/docs/ serves an HTML page without a key, pointing at the schema."""
    response = requests.get(f"{embedded_server.url}/api/docs/", timeout=30)
    assert response.status_code == 200, response.text
    assert response.headers["Content-Type"].startswith("text/html")
    assert "<html" in response.text.lower()
    assert "/api/schema/" in response.text


# Real responses against the document

RESPONSES = [
    "create", "input", "output", "output-tail", "stats", "list", "detail", "audit", "health", "delete",
    "detail-ended", "stats-ended", "error-404", "error-400", "error-401", "error-409",
]


@pytest.mark.parametrize("name", RESPONSES)
def test_schema_describes_real_response(document, real_responses, name):
    """The real response's JSON body validates against the schema its operation documents for that status."""
    path, method, status, body = real_responses[name]
    assert status < 500, body
    assert problems(response_validator(document, path, method, status), body) == []


def strict(node):
    """The schema with every object closed to properties it does not name."""
    if isinstance(node, list):
        return [strict(item) for item in node]
    if not isinstance(node, dict):
        return node
    closed = {key: strict(value) for key, value in node.items()}
    if "properties" in node and "additionalProperties" not in node:
        closed["additionalProperties"] = False
    return closed


@pytest.mark.parametrize("name", ["create", "input", "output", "stats", "detail", "delete", "health", "error-404"])
def test_schema_documents_every_field_of_real_response(document, real_responses, name):
    """Every field a real response carries is named in the documented schema."""
    path, method, status, body = real_responses[name]
    schema = document["paths"][path][method]["responses"][str(status)]["content"]["application/json"]["schema"]
    root = {**json_schema(strict(schema)), "components": json_schema(strict(document["components"]))}
    assert problems(Draft202012Validator(root), body) == []


def test_schema_generates_valid_without_warnings():
    """drf-spectacular builds the schema with no warning and it validates as OpenAPI 3."""
    import subprocess
    import sys

    from .servers import ROOT, service_env

    result = subprocess.run(
        [sys.executable, "manage.py", "spectacular", "--validate", "--fail-on-warn", "--file", "/dev/null"],
        cwd=ROOT, env=service_env(), capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stderr


def test_schema_every_operation_has_its_own_summary_and_description(document):
    operations = [(path, method, operation) for path, methods in document["paths"].items()
                  for method, operation in methods.items()]
    summaries = [operation.get("summary") for _, _, operation in operations]
    descriptions = [operation.get("description") for _, _, operation in operations]
    assert all(summaries) and len(set(summaries)) == len(operations), summaries
    assert all(descriptions) and len(set(descriptions)) == len(operations)


def test_schema_documents_delete_parameters_and_the_event_stream(document):
    delete = document["paths"]["/api/terminals/{id}"]["delete"]
    assert {"signal", "force", "gracefulTimeoutMs"} <= {parameter["name"] for parameter in delete["parameters"]}
    output = document["paths"]["/api/terminals/{id}/output"]["get"]["responses"]["200"]["content"]
    assert {"application/json", "text/event-stream"} <= set(output)
