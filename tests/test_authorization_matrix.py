"""Who may reach what, on every route of every interface, for five callers: the owner, another user, staff, no key
and a revoked key.

The REST routes come from the URL configuration, the ACP methods from the endpoint's own method table, so a new
endpoint is in the matrix the day it is added: it fails here until its body and expectations are written down in
REQUESTS. Another user's answer must equal the answer for an id that does not exist (so ids cannot be probed), and
nothing another user, an anonymous caller or a revoked key sends may have any effect.
"""

from __future__ import annotations

import asyncio
import re
import uuid

import pytest
import requests
from django.urls import URLPattern, URLResolver, get_resolver

from terminals.acp.methods import METHODS as ACP_METHODS
from terminals.models import AuditEvent

from .client import Api
from .test_live import Live, refusal

# Routes anyone may read: the service's health, its API description and the start page (which leads to it).
PUBLIC = {"", "api/health", "api/health/live", "api/health/ready", "api/schema/", "api/docs/"}
# Routes of the whole collection: a key is needed, and each caller sees only their own.
COLLECTIONS = {("api/terminals", "GET"), ("api/terminals", "POST"), ("api/audit", "GET"), ("api/acp", "POST")}
# Routes for staff only: a valid key of anyone else gets 403.
STAFF_ONLY = {("api/metrics", "GET")}
# Django's admin has its own login (a staff session); tests/test_admin*.py cover it.
OTHER_INTERFACES = ("admin/",)

# For each route on one terminal: a body that is valid, so only who asks decides the answer. "owner_ends" marks the
# requests whose success ends the terminal; they get a terminal of their own.
REQUESTS: dict[tuple[str, str], dict] = {
    ("api/terminals/{pk}", "GET"): {},
    ("api/terminals/{pk}", "DELETE"): {"json": {}, "owner_ends": True},
    ("api/terminals/{pk}/input", "POST"): {"json": {"input": "echo {marker}"}},
    ("api/terminals/{pk}/output", "GET"): {},
    ("api/terminals/{pk}/stats", "GET"): {},
    ("api/terminals/{pk}/commands", "GET"): {},
    ("api/terminals/{pk}/commands", "POST"): {"json": {"command": "echo {marker}", "timeoutMs": 5000}},
    ("api/terminals/{pk}/commands/{command_id}", "GET"): {},
    ("api/terminals/{pk}/commands/{command_id}/wait", "POST"): {"json": {"timeoutMs": 100}},
    ("api/terminals/{pk}/signal", "POST"): {"json": {"signal": "SIGINT"}},
    ("api/terminals/{pk}/resize", "POST"): {"json": {"cols": 101, "rows": 31}},
    ("api/terminals/{pk}/wait", "POST"): {"json": {"timeoutMs": 100}},
    ("api/terminals/{pk}/output/wait", "POST"): {"json": {"pattern": "{marker}", "timeoutMs": 100}},
    ("api/terminals/{pk}/kill", "POST"): {"json": {"signal": "SIGKILL"}, "owner_ends": True},
    ("api/terminals/{pk}/screen", "GET"): {},
    ("api/terminals/{pk}/recording", "GET"): {"file": "application/x-asciicast"},
}
# Requests that act on the terminal as its user does: the owner's alone. Staff get 403 FORBIDDEN on another user's
# terminal (they read, watch and end it; tests/test_staff_read_only.py).
OWNER_ONLY = {("api/terminals/{pk}/input", "POST"), ("api/terminals/{pk}/commands", "POST"),
              ("api/terminals/{pk}/signal", "POST"), ("api/terminals/{pk}/resize", "POST")}
SSE = ("api/terminals/{pk}/output", "GET", {"follow": "true"})
IGNORED_METHODS = {"head", "options", "trace"}


# The routes, read from the URL configuration


def _template(pattern) -> str:
    """A route's path with its parameters as {name}: "api/terminals/{pk}/input"."""
    text = str(pattern.pattern)
    if hasattr(pattern.pattern, "regex") and text.startswith("^"):
        text = text.lstrip("^").rstrip("$")
        text = re.sub(r"\(\?P<(\w+)>[^)]*\)", r"{\1}", text)
    return re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", text)


def _methods(callback) -> list[str]:
    actions = getattr(callback, "actions", None)
    if actions:  # a DRF viewset route: {method: action}
        return sorted(method.upper() for method in actions if method not in IGNORED_METHODS)
    view = getattr(callback, "view_class", None) or getattr(callback, "cls", None)
    names = getattr(view, "http_method_names", [])
    return sorted(name.upper() for name in names if name not in IGNORED_METHODS and hasattr(view, name))


def routes(patterns=None, prefix: str = "") -> list[tuple[str, str]]:
    """Every (path template, method) the URL configuration serves."""
    found = []
    for entry in get_resolver().url_patterns if patterns is None else patterns:
        if isinstance(entry, URLResolver):
            found += routes(entry.url_patterns, prefix + _template(entry))
        elif isinstance(entry, URLPattern):
            found += [(prefix + _template(entry), method) for method in _methods(entry.callback)]
    return found


def api_routes() -> list[tuple[str, str]]:
    return [route for route in routes() if not route[0].startswith(OTHER_INTERFACES)]


def terminal_routes() -> list[tuple[str, str]]:
    return [route for route in api_routes() if "{pk}" in route[0]]


def test_every_route_is_in_the_matrix():
    """A route nobody classified fails here: say who may use it in PUBLIC, COLLECTIONS or REQUESTS."""
    for path, method in api_routes():
        known = (path in PUBLIC or (path, method) in COLLECTIONS or (path, method) in REQUESTS
                 or (path, method) in STAFF_ONLY)
        assert known, f"{method} /{path} is not in the authorization matrix; add it to tests/{__name__.split('.')[-1]}.py"
    assert set(REQUESTS) == set(terminal_routes()), "REQUESTS names a route the URL configuration no longer has"


# Callers


@pytest.fixture
def callers(server, keys):
    made = {name: Api(server.url, keys[name]) for name in ("alice", "bob", "staff", "revoked")}
    made["nobody"] = Api(server.url, None)
    yield made
    made["alice"].cleanup()


def prepared(alice: Api) -> tuple[str, str]:
    """A running, recorded shell of alice's with one finished command: (terminal id, command id)."""
    terminal = alice.create(shell="/bin/bash", record=True)["terminalId"]
    ran = alice.post(f"/api/terminals/{terminal}/commands", json={"command": "true", "timeoutMs": 10000})
    assert ran.status_code == 200, ran.text
    return terminal, ran.json()["data"]["commandId"]


def send(api: Api, path: str, method: str, terminal: str, command: str, marker: str, **query) -> requests.Response:
    spec = REQUESTS[(path, method)]
    url = "/" + path.format(pk=terminal, command_id=command)
    body = spec.get("json")
    if body is not None:
        body = {name: value.format(marker=marker) if isinstance(value, str) else value for name, value in body.items()}
    return api.request(method, url, json=body, params=query or None, timeout=30)


def shape(response: requests.Response, terminal: str, command: str) -> tuple:
    """What a caller can tell from an answer, with the ids it named taken out."""
    body = response.text.replace(terminal, "<id>").replace(command, "<command>")
    return response.status_code, response.headers.get("Content-Type"), body


# Staff only


@pytest.mark.parametrize("path,method", sorted(STAFF_ONLY))
def test_staff_routes_answer_staff_alone(callers, path, method):
    answers = {name: callers[name].request(method, f"/{path}").status_code for name in callers}
    assert answers == {"alice": 403, "bob": 403, "staff": 200, "revoked": 401, "nobody": 401}


# REST


def test_strangers_get_the_unknown_answer_and_change_nothing(callers, orm):
    """Bob gets for alice's terminal exactly what he gets for an id that does not exist; no key and a revoked key
    get 401; none of their requests reaches the terminal, and each is audited as refused."""
    alice, bob = callers["alice"], callers["bob"]
    terminal, command = prepared(alice)
    marker = f"stranger-{uuid.uuid4().hex[:8]}"
    before = AuditEvent.objects.order_by("-id").values_list("id", flat=True).first() or 0
    for path, method in sorted(REQUESTS):
        unknown_terminal, unknown_command = str(uuid.uuid4()), f"cmd_9_{uuid.uuid4().hex[:6]}"
        theirs = send(bob, path, method, terminal, command, marker)
        nobodys = send(bob, path, method, unknown_terminal, unknown_command, marker)
        assert theirs.status_code == 404, (method, path, theirs.text)
        assert theirs.json()["error"]["code"] == "TERMINAL_NOT_FOUND", (method, path, theirs.text)
        assert shape(theirs, terminal, command) == shape(nobodys, unknown_terminal, unknown_command), (method, path)
        for anonymous in ("nobody", "revoked"):
            refused = send(callers[anonymous], path, method, terminal, command, marker)
            assert refused.status_code == 401, (anonymous, method, path, refused.text)
            assert refused.json()["error"]["code"] == "UNAUTHORIZED", (anonymous, method, path, refused.text)

    # Nothing happened to the terminal: still running, its size and output untouched, no command of theirs.
    record = alice.get(f"/api/terminals/{terminal}").json()["data"]
    assert record["status"] == "active", record
    assert (record["cols"], record["rows"]) != (101, 31), record
    assert alice.run(terminal, "echo still-mine") == "still-mine"
    assert marker not in alice.full_output(terminal)
    listed = alice.get(f"/api/terminals/{terminal}/commands").json()["data"]["commands"]
    assert not [entry for entry in listed if marker in entry["command"]], listed
    rows = AuditEvent.objects.filter(id__gt=before, terminal_id=terminal)
    bobs = rows.filter(username=username_of(bob))
    assert list(bobs.values_list("outcome", flat=True)) == ["TERMINAL_NOT_FOUND"] * len(REQUESTS)
    anonymous = rows.filter(user__isnull=True)
    assert list(anonymous.values_list("outcome", flat=True)) == ["UNAUTHORIZED"] * (2 * len(REQUESTS))
    assert not rows.exclude(id__in=bobs).exclude(id__in=anonymous).exclude(username=username_of(alice)).exists()


def username_of(api: Api) -> str:
    """The username behind a client's key."""
    from terminals.models import ApiKey

    return ApiKey.objects.for_key(api.key).user.username


@pytest.mark.parametrize("who", ["alice", "staff"])
def test_owner_and_staff_reach_every_route(callers, who):
    """The owner and staff get past authorization on every route: no 401, 403 or 404; but only the owner types into,
    resizes or signals the terminal (OWNER_ONLY), staff get 403 there."""
    alice, caller = callers["alice"], callers[who]
    shared, command = prepared(alice)
    for path, method in sorted(REQUESTS):
        terminal, command_id = (prepared(alice) if REQUESTS[(path, method)].get("owner_ends") else (shared, command))
        answer = send(caller, path, method, terminal, command_id, "owner")
        if who == "staff" and (path, method) in OWNER_ONLY:
            assert answer.status_code == 403, (who, method, path, answer.text)
            assert answer.json()["error"]["code"] == "FORBIDDEN", (who, method, path, answer.text)
            continue
        assert answer.status_code == 200, (who, method, path, answer.text)
        if REQUESTS[(path, method)].get("file"):  # a file, not the JSON envelope
            assert answer.headers["Content-Type"] == REQUESTS[(path, method)]["file"], (who, method, path)
            continue
        assert answer.json()["success"] is True, (who, method, path, answer.text)


def test_collections_need_a_key_and_show_only_the_callers_own(callers):
    alice, bob = callers["alice"], callers["bob"]
    terminal = alice.create(shell="/bin/bash")["terminalId"]
    for path, method in sorted(COLLECTIONS):
        for anonymous in ("nobody", "revoked"):
            refused = callers[anonymous].request(method, "/" + path, json={} if method == "POST" else None)
            assert refused.status_code == 401, (anonymous, method, path, refused.text)
    bobs = bob.get("/api/terminals", params={"status": "all"}).json()["data"]["terminals"]
    assert terminal not in [entry["terminalId"] for entry in bobs]
    staffs = callers["staff"].get("/api/terminals", params={"status": "all"}).json()["data"]["terminals"]
    assert terminal in [entry["terminalId"] for entry in staffs]
    bobs_audit = bob.get("/api/audit", params={"pageSize": 1000}).json()["data"]["events"]
    assert not [row for row in bobs_audit if row.get("terminalId") == terminal], bobs_audit


def test_public_routes_answer_without_a_key(callers):
    for path in sorted(PUBLIC):
        assert callers["nobody"].get("/" + path).status_code == 200, path


# Live output: Server-Sent Events and the WebSocket. Who may open them is here; that they end when that access is
# taken away while they are open (a share, a staff flag, a key, a user; MCP and REST waits too) is
# tests/test_live_access.py.


def test_sse_follow_answers_strangers_like_an_unknown_terminal(callers):
    alice, bob = callers["alice"], callers["bob"]
    terminal, command = prepared(alice)
    path, method, query = SSE
    unknown = str(uuid.uuid4())
    theirs = send(bob, path, method, terminal, command, "", **query)
    nobodys = send(bob, path, method, unknown, command, "", **query)
    assert theirs.status_code == 404, theirs.text
    assert shape(theirs, terminal, command) == shape(nobodys, unknown, command)
    for anonymous in ("nobody", "revoked"):
        assert send(callers[anonymous], path, method, terminal, command, "", **query).status_code == 401
    for who in ("alice", "staff"):
        with callers[who].http.get(f"{alice.url}/{path.format(pk=terminal)}", params=query, stream=True,
                                   timeout=30) as stream:
            assert stream.status_code == 200, (who, stream.text)
            assert stream.headers["Content-Type"].startswith("text/event-stream")


def test_websocket_refuses_strangers_like_an_unknown_terminal(callers, keys):
    alice = callers["alice"]
    terminal, _ = prepared(alice)

    async def check():
        unknown = str(uuid.uuid4())
        theirs = await refusal(alice.url, terminal, {"X-API-Key": keys["bob"]})
        nobodys = await refusal(alice.url, unknown, {"X-API-Key": keys["bob"]})
        assert theirs == nobodys == 4404
        assert await refusal(alice.url, terminal) == 4401
        assert await refusal(alice.url, terminal, {"X-API-Key": keys["revoked"]}) == 4401
        for who, query in (("alice", {}), ("staff", {"mode": "view"})):  # staff watch; only the owner types
            live = await Live.open(alice.url, terminal, keys[who], **query)
            assert live.attached["type"] == "attached"
            await live.close()
        assert await refusal(alice.url, terminal, {"X-API-Key": keys["staff"]}) == 4403

    asyncio.run(check())


# The Agent Client Protocol


def acp(api: Api, method: str, params: dict) -> requests.Response:
    return api.post("/api/acp", json={"jsonrpc": "2.0", "id": 7, "method": method, "params": params})


def test_acp_methods_answer_strangers_like_an_unknown_terminal(callers):
    """Every ACP method that names a terminal: bob gets the error he gets for an unknown id, anonymous callers 401."""
    alice, bob = callers["alice"], callers["bob"]
    session = f"sess_{uuid.uuid4().hex}"
    created = acp(alice, "terminal/create", {"sessionId": session, "command": "sleep", "args": ["60"]}).json()
    terminal = created["result"]["terminalId"]
    alice.created.append(terminal)
    naming_a_terminal = sorted(method for method in ACP_METHODS if method != "terminal/create")
    assert naming_a_terminal, "the ACP endpoint lost its terminal methods"
    for method in naming_a_terminal:
        params = {"sessionId": session, "terminalId": terminal}
        unknown = {"sessionId": session, "terminalId": str(uuid.uuid4())}
        theirs, nobodys = acp(bob, method, params), acp(bob, method, unknown)
        assert theirs.status_code == nobodys.status_code == 200, (method, theirs.text)
        assert theirs.text.replace(terminal, "<id>") == nobodys.text.replace(unknown["terminalId"], "<id>"), method
        assert "error" in theirs.json(), (method, theirs.text)
        for anonymous in ("nobody", "revoked"):
            assert acp(callers[anonymous], method, params).status_code == 401, (anonymous, method)
    answer = acp(alice, "terminal/output", {"sessionId": session, "terminalId": terminal}).json()
    assert "result" in answer and answer["result"].get("exitStatus") is None, answer
    staffs = acp(callers["staff"], "terminal/output", {"sessionId": session, "terminalId": terminal}).json()
    assert "result" in staffs, staffs
