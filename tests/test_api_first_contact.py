"""Errors a new client meets first say what to do (issue 30, items 6 to 10): a misspelt field or query parameter is
refused naming the one meant, never ignored; a body that is not JSON says to send JSON; a command line in command
shows the corrected body; a choice lists the choices; a key sent in the wrong form names the right one."""

from __future__ import annotations

import os

import pytest
import requests

from terminals.models import AuditEvent, TerminalSession

from .test_api_errors import assert_error, last_audit_id

# (method, path, body, the unknown name, the name it must suggest); {id} is a live terminal of alice's.
UNKNOWN_BODY_FIELDS = [
    ("POST", "/api/terminals", {"cwdir": "/nonexistent"}, "cwdir", "cwd"),
    ("POST", "/api/terminals", {"command": "ls", "Args": ["-l"]}, "Args", "args"),
    ("POST", "/api/terminals/{id}/input", {"input": "true", "append_newline": False}, "append_newline",
     "appendNewline"),
    ("POST", "/api/terminals/{id}/commands", {"command": "true", "timeout_ms": 5000}, "timeout_ms", "timeoutMs"),
    ("POST", "/api/terminals/{id}/commands/cmd_1/wait", {"timeot": 5}, "timeot", None),
    ("POST", "/api/terminals/{id}/signal", {"sig": "INT"}, "sig", "signal"),
    ("POST", "/api/terminals/{id}/resize", {"cols": 80, "rows": 24, "colums": 100}, "colums", "cols"),
    ("POST", "/api/terminals/{id}/wait", {"timeout_ms": 10}, "timeout_ms", "timeoutMs"),
    ("POST", "/api/terminals/{id}/output/wait", {"patern": "x"}, "patern", "pattern"),
    ("POST", "/api/terminals/{id}/kill", {"signl": "KILL"}, "signl", "signal"),
    ("DELETE", "/api/terminals/{id}", {"forced": True}, "forced", "force"),
]

# (method, path with its query string, body, the unknown name, the name it must suggest).
UNKNOWN_QUERY_PARAMETERS = [
    ("GET", "/api/terminals?stauts=all", None, "stauts", "status"),
    ("GET", "/api/terminals/{id}?verbose=1", None, "verbose", None),
    ("GET", "/api/terminals/{id}/output?strip_ansi=true", None, "strip_ansi", "stripAnsi"),
    ("GET", "/api/terminals/{id}/output?maxlines=5", None, "maxlines", "maxLines"),
    ("GET", "/api/terminals/{id}/stats?x=1", None, "x", None),
    ("GET", "/api/terminals/{id}/screen?rows=5", None, "rows", None),
    ("GET", "/api/terminals/{id}/commands?limit=5", None, "limit", None),
    ("GET", "/api/terminals/{id}/commands/cmd_1?max_lines=5", None, "max_lines", "maxLines"),
    ("POST", "/api/terminals/{id}/input?append_newline=false", {"input": "true"}, "append_newline", None),
    ("POST", "/api/terminals/{id}/wait?timeout=1", None, "timeout", "timeoutMs"),
    ("DELETE", "/api/terminals/{id}?forse=true", None, "forse", "force"),
    ("POST", "/api/terminals?dry_run=1", {}, "dry_run", None),
    ("GET", "/api/audit?ordering=at&sort=at", None, "sort", None),
]


def _refused_naming(response, name: str, meant: str | None) -> dict:
    error = assert_error(response, 400, "INVALID_INPUT")
    assert repr(name) in error["message"], error
    if meant is not None:
        assert f"did you mean {meant!r}?" in error["message"], error
    return error


@pytest.mark.parametrize("method,path,body,name,meant", UNKNOWN_BODY_FIELDS, ids=[row[3] for row in UNKNOWN_BODY_FIELDS])
def test_unknown_body_field_is_refused_naming_the_field_meant(alice, terminal, orm, alice_user, method, path, body,
                                                              name, meant):
    """A body field the endpoint does not take is 400 INVALID_INPUT naming it and the field meant, audited, and
    nothing is done: no terminal starts, the terminal keeps running."""
    terminals_before = TerminalSession.objects.filter(owner=alice_user).count()
    before = last_audit_id()
    error = _refused_naming(alice.request(method, path.format(id=terminal), json=body), name, meant)
    assert name in error["details"]["fields"] and error["details"]["accepted"], error
    assert AuditEvent.objects.filter(id__gt=before, user=alice_user, outcome="INVALID_INPUT").count() == 1
    assert TerminalSession.objects.filter(owner=alice_user).count() == terminals_before
    assert alice.get(f"/api/terminals/{terminal}").json()["data"]["status"] == "active"


@pytest.mark.parametrize("method,path,body,name,meant", UNKNOWN_QUERY_PARAMETERS,
                         ids=[row[1].split("?")[0].rsplit("/", 1)[-1] + "-" + row[3] for row in UNKNOWN_QUERY_PARAMETERS])
def test_unknown_query_parameter_is_refused_naming_the_one_meant(alice, terminal, orm, alice_user, method, path, body,
                                                                 name, meant):
    """A query parameter the endpoint does not read (any endpoint, GET or not) is 400 INVALID_INPUT naming it and the
    parameter meant; the terminal is left as it was."""
    terminals_before = TerminalSession.objects.filter(owner=alice_user).count()
    before = last_audit_id()
    _refused_naming(alice.request(method, path.format(id=terminal), json=body), name, meant)
    assert AuditEvent.objects.filter(id__gt=before, user=alice_user, outcome="INVALID_INPUT").count() == 1
    assert TerminalSession.objects.filter(owner=alice_user).count() == terminals_before
    assert alice.get(f"/api/terminals/{terminal}").json()["data"]["status"] == "active"


def test_health_refuses_an_unknown_query_parameter(anonymous):
    _refused_naming(anonymous.get("/api/health?verbose=1"), "verbose", None)


def test_known_fields_spelt_right_still_work(alice, terminal):
    """The refusal is of unknown names only: the documented ones, in the body and the query, are read."""
    output = alice.get(f"/api/terminals/{terminal}/output", params={"stripAnsi": "true", "mode": "tail",
                                                                   "tailLines": 5})
    assert output.status_code == 200, output.text
    audit = alice.get("/api/audit", params={"page": 1, "pageSize": 5, "ordering": "at"})
    assert audit.status_code == 200, audit.text


# A body that is not JSON


@pytest.mark.parametrize("headers", [{"Content-Type": "text/plain"}, {"Content-Type": "application/x-www-form-urlencoded"},
                                     {}], ids=["text", "form", "no-content-type"])
def test_body_that_is_not_json_says_to_send_json_with_the_header(alice, orm, alice_user, headers):
    """A body sent as another media type, or with no Content-Type at all (which DRF would read as no body and start
    a default terminal), is 400 saying to send JSON with the header to use; nothing starts."""
    terminals_before = TerminalSession.objects.filter(owner=alice_user).count()
    response = alice.post("/api/terminals", data=b'{"command": "sleep", "args": ["30"]}', headers=headers)
    error = assert_error(response, 400, "INVALID_INPUT")
    assert '"Content-Type: application/json"' in error["message"], error
    assert TerminalSession.objects.filter(owner=alice_user).count() == terminals_before


# A command line in command


def test_command_with_arguments_shows_the_corrected_body_and_never_the_service_path(alice, orm, alice_user):
    """{"command": "ls -la"} says the arguments go in args and shows the body that works; no message quotes the
    service's own PATH."""
    response = alice.post("/api/terminals", json={"command": "ls -la"})
    error = assert_error(response, 400, "INVALID_INPUT")
    assert '{"command": "ls", "args": ["-la"]}' in error["message"], error
    missing = assert_error(alice.post("/api/terminals", json={"command": "no-such-program-here"}), 400,
                           "INVALID_INPUT")
    for message in (error["message"], missing["message"], str(error["details"]), str(missing["details"])):
        assert os.environ["PATH"] not in message and "/usr/local/sbin" not in message, message
    assert "its path" in missing["message"], missing


# Choices


@pytest.mark.parametrize("method,path,payload,choices", [
    ("GET", "/api/terminals/{id}/output", {"mode": "middle"}, ["full", "head", "tail", "head-tail"]),
    ("GET", "/api/terminals/{id}/output", {"stream": "err"}, ["both", "stdout", "stderr"]),
    ("POST", "/api/terminals/{id}/signal", {"signal": "STOP"}, ["SIGINT", "SIGTERM", "SIGUSR2"]),
    ("GET", "/api/terminals", {"status": "running"}, ["active", "all", "exited"]),
    ("GET", "/api/audit", {"ordering": "newest"}, ["-at", "at"]),
], ids=["mode", "stream", "signal", "status", "ordering"])
def test_choice_error_lists_the_choices(alice, terminal, method, path, payload, choices):
    as_query = method == "GET"
    response = alice.request(method, path.format(id=terminal), params=payload if as_query else None,
                             json=None if as_query else payload)
    error = assert_error(response, 400, "INVALID_INPUT")
    assert "choose one of:" in error["message"], error
    for choice in choices:
        assert choice in error["message"], (choice, error)


# Keys sent in the wrong form


def test_key_with_a_scheme_in_x_api_key_names_the_right_form(server, keys):
    """X-API-Key: Bearer tk_... is 401 naming the two forms that work, without echoing the key."""
    key = keys["alice"]
    response = requests.get(f"{server.url}/api/terminals", headers={"X-API-Key": f"Bearer {key}"}, timeout=30)
    error = assert_error(response, 401, "UNAUTHORIZED")
    assert "X-API-Key: tk_…" in error["message"] and "Authorization: Bearer tk_…" in error["message"], error
    assert key.split(".")[1] not in response.text


def test_key_without_a_scheme_in_authorization_names_the_right_form(server, keys):
    """Authorization: tk_... (no scheme) is 401 saying the scheme is missing and the form to send."""
    key = keys["alice"]
    response = requests.get(f"{server.url}/api/terminals", headers={"Authorization": key}, timeout=30)
    error = assert_error(response, 401, "UNAUTHORIZED")
    assert "no scheme" in error["message"] and "Authorization: Bearer tk_…" in error["message"], error
    assert key.split(".")[1] not in response.text
