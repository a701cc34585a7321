"""Schemathesis against the served OpenAPI document: no generated request gets a 5xx, every answer is as documented.

Every operation of /api/schema/ is called with requests generated from the document, valid ones and invalid ones,
on the real embedded server, with an API key of its own (so its creates meet neither the per-key throttle nor the
per-user limit of the keys other tests share). Each response must have a documented status code and content type
and a body that validates against the documented schema. Path ids are drawn from real terminals in every state
(a live shell, a program on pipes, an exited one, a deleted one, another user's, an unknown id, a generated string),
so the requests reach the views and not only the 404 path. The runs are derandomized: the same requests every time.
"""

from __future__ import annotations

import os
import re
import tempfile
import uuid

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from .client import Api
from .conftest import make_key

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
FUZZ_SETTINGS = settings(
    max_examples=15, derandomize=True, database=None, deadline=None, suppress_health_check=list(HealthCheck)
)

# Waits are cut short so that a generated timeout (up to MAX_WAIT_MS, ten minutes) cannot stall the run: the two
# wait endpoints, running a command (it waits for the command, 10 s by default) and DELETE (it waits for the
# shell, which ignores SIGTERM, for KILL_GRACE_MS before SIGKILL).
MAX_FUZZ_WAIT_MS = 300
WAIT_FIELDS = ("timeoutMs", "gracefulTimeoutMs")

# A generated command terminal runs one of these: a generated program name with generated arguments could
# otherwise run any program on the machine (rm, mv, ...). The missing ones exercise the validation.
SAFE_COMMANDS = ("true", "echo", "cat", "/bin/echo", "no-such-program-fuzz", "./no-such-program", "/no/such/program")

# Where a generated {id} points; the shell three times out of nine, as it answers the most operations.
SLOTS = ("shell", "shell", "shell", "pipes", "exited", "deleted", "others", "unknown", "generated")
LIVE_SLOTS = ("shell", "pipes")


@pytest.fixture(scope="module")
def fuzz_key(django_db_setup, django_db_blocker) -> str:
    with django_db_blocker.unblock():
        return make_key(name="fuzz")[1]


def load_schema(server, mode: str):
    config = schemathesis.Config.from_dict({"generation": {"mode": mode}})
    return schemathesis.openapi.from_url(f"{server.url}/api/schema/?format=json", config=config)


# Embedded only: the fuzzing takes minutes, and the validation it searches is the web code both deployments share.
@pytest.fixture(scope="module")
def api_schema(embedded_server):
    """The served document, generating valid and invalid requests."""
    return load_schema(embedded_server, "all")


@pytest.fixture(scope="module")
def valid_schema(embedded_server):
    """The served document, generating valid requests only (the reads then reach the buffer, not the validation)."""
    return load_schema(embedded_server, "positive")


class Targets:
    """Real terminals for the path ids, one per state; the live ones are remade when a request ends them."""

    def __init__(self, api: Api, other: Api, folder: str) -> None:
        self.api, self.other, self.folder = api, other, folder
        self.ids = {
            "shell": self._shell(),
            "pipes": self._pipes(),
            "exited": self._exited(),
            "deleted": self._deleted(),
            "others": other.create(shell="bash", cwd=folder)["terminalId"],
            "unknown": str(uuid.uuid4()),
            # Only read, never fuzzed with the other operations (a DELETE would free them).
            "reader": self._exited(),
            "reader-pipes": self._exited(pty=False),
        }
        self._commands: dict[str, str] = {}

    def _shell(self) -> str:
        return self.api.create(shell="bash", cwd=self.folder)["terminalId"]

    def _pipes(self) -> str:
        return self.api.create(command="cat", pty=False, cwd=self.folder)["terminalId"]

    def _exited(self, pty: bool = True) -> str:
        # Lines, a line without its newline, bytes that are not UTF-8, colours: the output reads have work to do.
        script = r"seq 1 300; printf '\033[31mred\033[0m\r\nhalf\377\303'; seq 1 50 >&2"
        terminal = self.api.create(command="sh", args=["-c", script], pty=pty, cwd=self.folder)["terminalId"]
        self.api.wait_status(terminal, "exited")
        return terminal

    def _deleted(self) -> str:
        terminal = self._shell()
        assert self.api.delete(f"/api/terminals/{terminal}", params={"force": "true"}).status_code == 200
        return terminal

    @property
    def command_id(self) -> str:
        """A command that ran in the current shell, made when first needed."""
        shell = self.ids["shell"]
        if shell not in self._commands:
            body = {"command": "seq 1 20", "timeoutMs": 10_000}
            response = self.api.post(f"/api/terminals/{shell}/commands", json=body)
            if response.status_code == 409:
                # A generated command still holds the shell (an unclosed quote waits for its end): use a fresh one.
                shell = self.ids["shell"] = self._shell()
                response = self.api.post(f"/api/terminals/{shell}/commands", json=body)
            assert response.status_code == 200, response.text
            self._commands[shell] = response.json()["data"]["commandId"]
        return self._commands[shell]

    def refresh(self) -> None:
        """Remakes the targets a request changed: live ones it ended (kill, a signal, delete, eof, "exit" typed),
        the exited one it freed (delete)."""
        for slot, make, status in (("shell", self._shell, "active"), ("pipes", self._pipes, "active"),
                                   ("exited", self._exited, "exited")):
            record = self.api.get(f"/api/terminals/{self.ids[slot]}").json()["data"]
            if record["status"] != status or record["released"] is not None:
                self.ids[slot] = make()


@pytest.fixture(scope="module")
def targets(embedded_server, keys, fuzz_key):
    folder = tempfile.mkdtemp(prefix="terminals-fuzz-")
    api, other = Api(embedded_server.url, fuzz_key), Api(embedded_server.url, keys["bob"])
    yield Targets(api, other, folder)
    other.cleanup()
    api.cleanup()
    # Every terminal the fuzzing made is gone, so nothing is left running for the tests after these.
    left = api.get("/api/terminals", params={"status": "active"}).json()["data"]
    assert left["count"] == 0, left


def bounded(values: dict) -> dict:
    """The values with a wait time cut to MAX_FUZZ_WAIT_MS, in any form DRF's IntegerField takes (5, 5.0, "5.00")."""
    result = dict(values)
    for name in WAIT_FIELDS:
        value = result.get(name)
        if isinstance(value, (int, float, str)) and not isinstance(value, bool):
            digits = re.sub(r"\.0*$", "", str(value).strip())
            if digits.isdigit():
                result[name] = min(int(digits), MAX_FUZZ_WAIT_MS)
    return result


def bound_waits(case) -> None:
    """Makes every wait of a generated request short: a given time is cut, a missing one is set."""
    case.query = bounded(case.query) if isinstance(case.query, dict) else case.query
    case.body = bounded(case.body) if isinstance(case.body, dict) else case.body
    method, path = case.operation.method.upper(), case.operation.path
    if method == "DELETE":
        field = "gracefulTimeoutMs"
    elif path.endswith("/wait") or (path.endswith("/commands") and method == "POST"):
        field = "timeoutMs"
    else:
        return
    if not (isinstance(case.body, dict) and field in case.body):  # the body wins over the query
        case.query = {**(case.query if isinstance(case.query, dict) else {}), field: MAX_FUZZ_WAIT_MS}


def safe_create_body(body, folder: str):
    """A generated create body that can neither start an arbitrary program nor run in an existing directory."""
    if not isinstance(body, dict):
        return body
    body = dict(body)
    if isinstance(body.get("command"), str) and body["command"].strip():
        body["command"] = SAFE_COMMANDS[sum(body["command"].encode("utf-8", "surrogatepass")) % len(SAFE_COMMANDS)]
    cwd = body.get("cwd")
    if not isinstance(cwd, str) or os.path.isdir(os.path.join(folder, cwd)) or os.path.isdir(cwd):
        body["cwd"] = folder  # a directory that exists becomes a scratch one; a missing one stays, to be refused
    return body


def prepare(case, targets: Targets, slot: str, known_command: bool) -> None:
    """Points the generated request at a real terminal and keeps it short and harmless."""
    if "id" in (case.path_parameters or {}) and slot != "generated":
        case.path_parameters["id"] = targets.ids[slot]
    if "command_id" in (case.path_parameters or {}) and known_command:
        case.path_parameters["command_id"] = targets.command_id
    bound_waits(case)
    if isinstance(case.query, dict):
        # follow=true streams Server-Sent Events until the program exits, so it would block; test_live.py covers it.
        case.query.pop("follow", None)
    if case.operation.path == "/api/terminals" and case.operation.method.upper() == "POST":
        case.body = safe_create_body(case.body, targets.folder)


def tidy(case, response, targets: Targets) -> None:
    """Deletes a terminal the request created; remakes the live targets a request may have ended."""
    method = case.operation.method.upper()
    if case.operation.path == "/api/terminals" and method == "POST":
        if response.status_code == 201:
            created = response.json()["data"]["terminalId"]
            targets.api.created.append(created)
            assert targets.api.delete(f"/api/terminals/{created}", params={"force": "true"}).status_code == 200
    elif method in ("POST", "DELETE"):
        targets.refresh()


fuzzed = schemathesis.pytest.from_fixture("api_schema")


@fuzzed.parametrize()
@fuzzed.given(slot=st.sampled_from(SLOTS), known_command=st.booleans())
@FUZZ_SETTINGS
def test_api_answers_generated_requests_as_documented(case, slot, known_command, targets, fuzz_key):
    """Any request built from the document, valid or not, gets a documented status, content type and body; no 5xx."""
    prepare(case, targets, slot, known_command)
    response = case.call_and_validate(headers={"X-API-Key": fuzz_key}, checks=CHECKS, timeout=30)
    if slot == "others" and "id" in (case.path_parameters or {}):
        answers_like_an_unknown_id(case, response, targets, fuzz_key)
    tidy(case, response, targets)


def answers_like_an_unknown_id(case, response, targets: Targets, fuzz_key: str) -> None:
    """Another user's terminal gets exactly the answer an id that does not exist gets, and is left as it was."""
    case.path_parameters["id"] = targets.ids["unknown"]
    unknown = case.call(headers={"X-API-Key": fuzz_key}, timeout=30)
    assert (response.status_code, error_code(response)) == (unknown.status_code, error_code(unknown)), response.text
    record = targets.other.get(f"/api/terminals/{targets.ids['others']}").json()["data"]
    assert (record["status"], record["released"]) == ("active", None), record


def error_code(response) -> str | None:
    body = response.json() if "json" in response.headers.get("Content-Type", "") else {}
    return (body.get("error") or {}).get("code") if isinstance(body, dict) else None


reads = schemathesis.pytest.from_fixture("valid_schema").include(path="/api/terminals/{id}/output", method="GET")


@reads.parametrize()
@reads.given(slot=st.sampled_from(("reader", "reader", "reader-pipes", "shell")))
@settings(FUZZ_SETTINGS, max_examples=80)
def test_output_reads_with_generated_parameters_are_consistent(case, slot, targets, fuzz_key):
    """Valid output reads of real output, with any mode, since, limits and byte offsets, answer 200 or a
    documented 4xx that matches the schema, and a 200's numbers agree with each other."""
    prepare(case, targets, slot, known_command=False)
    query = case.query or {}
    response = case.call_and_validate(headers={"X-API-Key": fuzz_key}, checks=CHECKS, timeout=30)
    if response.status_code != 200:
        return
    data = response.json()["data"]
    if "chunk" in data:
        assert data["oldestByte"] <= data["fromByte"] <= data["nextByte"] <= data["totalBytes"]
        assert data["truncated"] == (query["fromByte"] < data["oldestByte"])
        return
    stats = data["stats"]
    assert data["oldestLine"] <= data["nextReadFrom"] <= data["totalLines"]
    assert stats["linesShown"] <= query.get("maxLines", 1000)
    if data["linesEvicted"] or stats["linesOmitted"]:
        assert data["truncated"] is True
    if "sinceTime" not in query:  # sinceTime moves the start to a line only the server knows
        since = query.get("since")
        start = min(max(data["oldestLine"] if since is None else since, data["oldestLine"]), data["totalLines"])
        assert stats["linesShown"] + stats["linesOmitted"] == data["totalLines"] - start
        assert data["linesEvicted"] == (0 if since is None else max(0, data["oldestLine"] - since))
