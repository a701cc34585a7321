"""Every refusal in the error envelope: unknown URLs, wrong methods, bad bodies, invalid fields; and health."""

from __future__ import annotations

import pytest
import requests

from terminals.models import AuditEvent, TerminalSession


LONG_NAME = "n" * 101

# (name, method, path, body or query, the field the message must name, the audited action); {id} is alice's terminal.
INVALID_FIELDS = [
    ("cols-too-big", "POST", "/api/terminals", {"cols": 100_000}, "cols", "create"),
    ("rows-zero", "POST", "/api/terminals", {"rows": 0}, "rows", "create"),
    ("cols-not-a-number", "POST", "/api/terminals", {"cols": "wide"}, "cols", "create"),
    ("unknown-shell", "POST", "/api/terminals", {"shell": "/bin/no-such-shell"}, "shell", "create"),
    ("unknown-shell-name", "POST", "/api/terminals", {"shell": "python3"}, "shell", "create"),
    ("missing-cwd", "POST", "/api/terminals", {"cwd": "/no/such/directory"}, "cwd", "create"),
    ("cwd-is-a-file", "POST", "/api/terminals", {"cwd": "/etc/passwd"}, "cwd", "create"),
    ("env-bad-name", "POST", "/api/terminals", {"env": {"1BAD": "x"}}, "env", "create"),
    ("env-name-with-equals", "POST", "/api/terminals", {"env": {"A=B": "x"}}, "env", "create"),
    ("env-value-number", "POST", "/api/terminals", {"env": {"GOOD": 1}}, "env", "create"),
    ("env-not-an-object", "POST", "/api/terminals", {"env": "A=1"}, "env", "create"),
    ("name-too-long", "POST", "/api/terminals", {"name": LONG_NAME}, "name", "create"),
    ("input-missing", "POST", "/api/terminals/{id}/input", {}, "input", "input"),
    ("input-not-a-string", "POST", "/api/terminals/{id}/input", {"input": ["ls"]}, "input", "input"),
    ("mode-bogus", "GET", "/api/terminals/{id}/output", {"mode": "bogus"}, "mode", "output"),
    ("since-negative", "GET", "/api/terminals/{id}/output", {"since": -1}, "since", "output"),
    ("maxlines-zero", "GET", "/api/terminals/{id}/output", {"maxLines": 0}, "maxLines", "output"),
    ("signal-bogus", "DELETE", "/api/terminals/{id}", {"signal": "SIGBOGUS"}, "signal", "delete"),
    ("signal-bogus-query", "DELETE", "/api/terminals/{id}?signal=SIGBOGUS", None, "signal", "delete"),
    ("list-status-bogus", "GET", "/api/terminals", {"status": "bogus"}, "status", "list"),
    ("audit-since-garbage", "GET", "/api/audit", {"since": "yesterday"}, "since", "audit"),
]

# A barrage of bad requests of every kind, for the test that the service survives them.
BAD_REQUESTS = [
    ("GET", "/api/nowhere", {}),
    ("PUT", "/api/terminals/{id}", {"json": {}}),
    ("PATCH", "/api/terminals", {"json": {}}),
    ("POST", "/api/terminals", {"data": '{"cols": ', "headers": {"Content-Type": "application/json"}}),
    ("POST", "/api/terminals/{id}/input", {"data": "\x00\xff{", "headers": {"Content-Type": "application/json"}}),
    ("POST", "/api/terminals/{id}/input", {"data": "input=ls", "headers": {"Content-Type": "text/plain"}}),
    ("POST", "/api/terminals", {"json": {"cols": -1, "rows": 10**9, "env": {"": ""}}}),
    ("GET", "/api/terminals/{id}/output", {"params": {"mode": "bogus", "since": -5}}),
    ("DELETE", "/api/terminals/{id}", {"json": {"signal": "SIGBOGUS"}}),
    ("DELETE", "/api/terminals/{id}", {"data": "{signal", "headers": {"Content-Type": "application/json"}}),
    ("GET", "/api/terminals/not-a-uuid/stats", {}),
]


def last_audit_id() -> int:
    return AuditEvent.objects.order_by("-id").values_list("id", flat=True).first() or 0


def assert_error(response, status: int, code: str) -> dict:
    """Checks the error envelope and returns its error object."""
    assert response.status_code == status, response.text
    assert response.headers["Content-Type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"success", "error"}
    assert body["success"] is False
    assert set(body["error"]) == {"code", "message", "details"}
    assert body["error"]["code"] == code
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    assert isinstance(body["error"]["details"], dict)
    return body["error"]


# Unknown URLs and methods


@pytest.mark.parametrize(
    "path", ["/api/nowhere", "/api/terminals/", "/api/terminals/abc/input/extra", "/api/terminals/abc/bogus", "/api/"]
)
def test_errors_unknown_api_url_is_not_found(alice, anonymous, path):
    """An unknown URL under /api/ answers 404 NOT_FOUND in the envelope, with a key or without."""
    assert_error(alice.get(path), 404, "NOT_FOUND")
    assert_error(anonymous.get(path), 404, "NOT_FOUND")


@pytest.mark.parametrize(("path", "hint"), [
    ("/api/terminals/", "use /api/terminals (no trailing slash)"),
    ("/api/audit/", "use /api/audit (no trailing slash)"),
    ("/api/nowhere", "the endpoints are listed at /api/docs/"),
])
def test_errors_unknown_url_says_what_to_try(alice, path, hint):
    """A near miss says what to use instead: the path without its slash, or where the endpoints are listed."""
    assert hint in assert_error(alice.get(path), 404, "NOT_FOUND")["message"]


# Missing keys: the message names the headers that work


@pytest.mark.parametrize(("how", "reason"), [
    ("nothing", "No API key: send it in a header"),
    ("token-scheme", "scheme is not one this service takes"),
    ("query-parameter", "a key in the URL is not read"),
])
def test_errors_a_missing_key_names_the_headers_that_work(anonymous, keys, how, reason):
    """401 UNAUTHORIZED says why no key was found and names X-API-Key and Authorization: Bearer; a key put in
    the wrong place is not quoted back."""
    key = keys["bob"]
    headers, params = {}, {}
    if how == "token-scheme":
        headers["Authorization"] = f"Token {key}"
    elif how == "query-parameter":
        params["api_key"] = key
    response = anonymous.get("/api/terminals", headers=headers, params=params)
    error = assert_error(response, 401, "UNAUTHORIZED")
    assert reason in error["message"], error
    assert "X-API-Key: <key>" in error["message"] and "Authorization: Bearer <key>" in error["message"], error
    assert key.split(".", 1)[1][:8] not in response.text


def test_errors_an_unknown_host_names_the_setting(server):
    """A Host header outside ALLOWED_HOSTS is refused with 400 naming the setting to change."""
    response = requests.get(f"{server.url}/api/health", headers={"Host": "not-allowed.example"}, timeout=30)
    error = assert_error(response, 400, "INVALID_INPUT")
    assert "ALLOWED_HOSTS" in error["message"], error


@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [
        ("PUT", "/api/terminals/{id}", "DELETE"),
        ("PATCH", "/api/terminals/{id}", "DELETE"),
        ("PUT", "/api/terminals", "POST"),
        ("DELETE", "/api/terminals", "GET"),
        ("GET", "/api/terminals/{id}/input", "POST"),
        ("POST", "/api/terminals/{id}/output", "GET"),
        ("DELETE", "/api/terminals/{id}/stats", "GET"),
        ("POST", "/api/audit", "GET"),
        ("POST", "/api/health", "GET"),
    ],
)
def test_errors_wrong_method_is_not_allowed(alice, terminal, method, path, allowed):
    """A method an endpoint does not take answers 405 METHOD_NOT_ALLOWED, with an Allow header."""
    response = alice.request(method, path.format(id=terminal), json={})
    assert_error(response, 405, "METHOD_NOT_ALLOWED")
    assert allowed in response.headers.get("Allow", "")


# Bodies


@pytest.mark.parametrize("path", ["/api/terminals", "/api/terminals/{id}/input"])
def test_errors_malformed_json_is_invalid_input(alice, terminal, orm, alice_user, path):
    """A body that is not JSON answers 400 INVALID_INPUT and is audited."""
    path = path.format(id=terminal)
    before = last_audit_id()
    response = alice.post(path, data='{"input": "ls", ', headers={"Content-Type": "application/json"})
    error = assert_error(response, 400, "INVALID_INPUT")
    assert "JSON" in error["message"]
    assert AuditEvent.objects.filter(id__gt=before, user=alice_user, outcome="INVALID_INPUT", details__path=path)


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", "application/xml"])
@pytest.mark.parametrize("path", ["/api/terminals", "/api/terminals/{id}/input"])
def test_errors_wrong_content_type_is_invalid_input(alice, terminal, orm, alice_user, path, content_type):
    """A body that is not application/json answers 400 INVALID_INPUT naming the media type, and is audited."""
    path = path.format(id=terminal)
    before = last_audit_id()
    response = alice.post(path, data="input=echo+hi", headers={"Content-Type": content_type})
    error = assert_error(response, 400, "INVALID_INPUT")
    assert content_type in error["message"]
    assert AuditEvent.objects.filter(id__gt=before, user=alice_user, outcome="INVALID_INPUT", details__path=path)
    assert "echo hi" not in alice.full_output(terminal)


def test_errors_json_body_that_is_not_an_object_is_invalid_input(alice):
    """A JSON array or string as the body of create answers 400 INVALID_INPUT."""
    for body in ([], "cols", 42):
        assert_error(alice.post("/api/terminals", json=body), 400, "INVALID_INPUT")


# Fields


@pytest.mark.parametrize(
    ("method", "path", "payload", "field", "action"),
    [case[1:] for case in INVALID_FIELDS],
    ids=[case[0] for case in INVALID_FIELDS],
)
def test_errors_invalid_field_names_the_field(alice, terminal, orm, alice_user, method, path, payload, field, action):
    """An invalid field answers 400 INVALID_INPUT whose message names it; the refusal is audited; nothing starts."""
    path = path.format(id=terminal)
    as_query = method == "GET"
    terminals_before = TerminalSession.objects.filter(owner=alice_user).count()
    before = last_audit_id()
    response = alice.request(method, path, params=payload if as_query else None, json=None if as_query else payload)
    error = assert_error(response, 400, "INVALID_INPUT")
    assert field in error["message"], error
    [row] = AuditEvent.objects.filter(id__gt=before, user=alice_user)
    assert (row.action, row.outcome) == (action, "INVALID_INPUT")
    assert row.key_prefix == alice.key.split(".")[0]
    assert row.details["path"] == path.split("?")[0]
    assert TerminalSession.objects.filter(owner=alice_user).count() == terminals_before
    assert alice.get(f"/api/terminals/{terminal}").json()["data"]["status"] == "active"


def test_errors_delete_with_non_object_body_is_invalid_input(alice, terminal):
    """DELETE with a JSON body that is not an object answers 400 INVALID_INPUT and leaves the terminal running."""
    response = alice.delete(f"/api/terminals/{terminal}", json=["SIGKILL"])
    assert_error(response, 400, "INVALID_INPUT")
    assert alice.get(f"/api/terminals/{terminal}").json()["data"]["status"] == "active"


def test_errors_field_message_names_each_bad_field(alice):
    """Several bad fields in one body are all named."""
    response = alice.post("/api/terminals", json={"cols": 0, "rows": 0, "name": LONG_NAME})
    error = assert_error(response, 400, "INVALID_INPUT")
    for field in ("cols", "rows", "name"):
        assert field in error["message"]


@pytest.mark.parametrize("suffix", ["", "/output", "/stats", "/input"])
@pytest.mark.parametrize("terminal_id", ["not-a-uuid", "12345", "0" * 40, "not%20a%20uuid"])
def test_errors_non_uuid_terminal_id_is_terminal_not_found(alice, terminal_id, suffix):
    """A terminal id that is no uuid answers 404 TERMINAL_NOT_FOUND on every terminal endpoint."""
    method = "POST" if suffix == "/input" else "GET"
    response = alice.request(method, f"/api/terminals/{terminal_id}{suffix}", json={"input": "ls"})
    assert_error(response, 404, "TERMINAL_NOT_FOUND")


def test_errors_non_uuid_terminal_id_on_delete_is_terminal_not_found(alice):
    """DELETE of a terminal id that is no uuid answers 404 TERMINAL_NOT_FOUND."""
    assert_error(alice.delete("/api/terminals/not-a-uuid"), 404, "TERMINAL_NOT_FOUND")


def test_errors_leave_service_and_terminal_working(alice, terminal, orm, alice_user):
    """After a barrage of bad requests, the user's terminal still runs commands and new terminals start."""
    before = last_audit_id()
    for method, path, options in BAD_REQUESTS:
        response = alice.request(method, path.format(id=terminal), **options)
        assert 400 <= response.status_code < 500, (method, path, response.text)
        assert response.json()["success"] is False
    assert alice.run(terminal, "echo $((6 * 7))") == "42"
    record = alice.get(f"/api/terminals/{terminal}").json()["data"]
    assert record["status"] == "active"
    fresh = alice.create(cwd="/tmp")["terminalId"]
    assert alice.run(fresh, "pwd") == "/tmp"
    refusals = AuditEvent.objects.filter(id__gt=before, user=alice_user).exclude(outcome__in=["ok", "sent"])
    # Every refusal except the unknown URL, which no view handles, is in the trail.
    assert refusals.count() == len(BAD_REQUESTS) - 1


# Health


def test_health_answers_without_a_key(anonymous, alice):
    """/api/health needs no key and reports status, uptime, active terminals, version, worker and database."""
    alice.create()
    response = anonymous.get("/api/health")
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["success"] is True
    data = body["data"]
    assert data["status"] == "healthy"
    assert isinstance(data["uptime"], (int, float)) and data["uptime"] >= 0
    assert isinstance(data["activeTerminals"], int) and data["activeTerminals"] >= 1
    assert isinstance(data["version"], str) and data["version"]
    assert data["worker"]["ok"] is True
    assert isinstance(data["worker"]["id"], str)
    assert data["database"] == {"ok": True}

