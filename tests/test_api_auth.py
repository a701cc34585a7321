"""API keys and isolation: who may call which endpoint, what a refusal looks like, and the audit trail it leaves."""

from __future__ import annotations

import json
import secrets
import uuid
from datetime import datetime, timedelta

import pytest
import requests
from django.forms.models import model_to_dict
from django.utils import timezone

from terminals.models import ApiKey, AuditEvent

from .client import Api
from .conftest import make_key

# (method, path, body, the view's action as the audit trail names it); {id} is an existing terminal of alice's.
ENDPOINTS = [
    ("GET", "/api/terminals", None, "list"),
    ("POST", "/api/terminals", {}, "create"),
    ("GET", "/api/terminals/{id}", None, "detail"),
    ("DELETE", "/api/terminals/{id}", None, "delete"),
    ("POST", "/api/terminals/{id}/input", {"input": "echo refused"}, "input"),
    ("GET", "/api/terminals/{id}/output", None, "output"),
    ("GET", "/api/terminals/{id}/stats", None, "stats"),
    ("GET", "/api/audit", None, "audit"),
]
ENDPOINT_IDS = [f"{method} {path}" for method, path, _, _ in ENDPOINTS]

# The terminal endpoints a second user might aim at someone else's terminal: (method, suffix, body).
TERMINAL_ENDPOINTS = [
    ("GET", "", None),
    ("GET", "/output", None),
    ("GET", "/stats", None),
    ("POST", "/input", "INPUT"),
    ("DELETE", "", {"signal": "SIGKILL"}),
]


@pytest.fixture(scope="module")
def alice_terminal(server, keys):
    """One live terminal of alice's, shared by the refusal tests."""
    api = Api(server.url, keys["alice"])
    terminal = api.create(shell="/bin/bash")["terminalId"]
    yield terminal
    api.cleanup()


@pytest.fixture(scope="module")
def bad_keys(keys, django_db_blocker) -> dict[str, str]:
    """Keys the service must refuse, by kind."""
    with django_db_blocker.unblock():
        user, _ = make_key(name="expired")
        _, expired = ApiKey.objects.create_key(user=user, expires_at=timezone.now() - timedelta(minutes=1))
    return {
        "unknown": f"tk_{secrets.token_hex(4)}.{secrets.token_urlsafe(32)}",
        "malformed": f"tk_{secrets.token_hex(6)}.{secrets.token_urlsafe(32)}",  # a 12-character prefix
        "revoked": keys["revoked"],
        "expired": expired,
    }


def public_prefix(key: str) -> str:
    return key.split(".", 1)[0]


def secret_part(key: str) -> str:
    return key.split(".", 1)[-1]


def call(server, method: str, path: str, body=None, headers: dict | None = None) -> requests.Response:
    return requests.request(method, f"{server.url}{path}", json=body, headers=headers or {}, timeout=30)


def last_audit_id() -> int:
    return AuditEvent.objects.order_by("-id").values_list("id", flat=True).first() or 0


def refusal_rows(after: int, method: str, path: str, outcome: str) -> list[AuditEvent]:
    return list(
        AuditEvent.objects.filter(id__gt=after, outcome=outcome, details__path=path, details__method=method)
    )


def row_text(row: AuditEvent) -> str:
    return json.dumps(model_to_dict(row), default=str)


def assert_unauthorized(response: requests.Response) -> None:
    assert response.status_code == 401, response.text
    assert response.headers.get("WWW-Authenticate") == "Api-Key"
    body = response.json()
    assert body["success"] is False
    assert body["error"]["code"] == "UNAUTHORIZED"
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    assert body["error"]["details"] == {}
    assert set(body) == {"success", "error"}


# Refusals


@pytest.mark.parametrize(("method", "path", "body", "action"), ENDPOINTS, ids=ENDPOINT_IDS)
def test_auth_request_without_key_is_refused(orm, server, alice_terminal, method, path, body, action):
    """A request without a key gets 401 UNAUTHORIZED with WWW-Authenticate, and an audit row."""
    path = path.format(id=alice_terminal)
    before = last_audit_id()
    assert_unauthorized(call(server, method, path, body))
    [row] = refusal_rows(before, method, path, "UNAUTHORIZED")
    assert row.action == action
    assert row.key_prefix == ""
    assert row.user is None
    assert row.source == "127.0.0.1"


@pytest.mark.parametrize("kind", ["unknown", "malformed", "revoked", "expired"])
@pytest.mark.parametrize(("method", "path", "body", "action"), ENDPOINTS, ids=ENDPOINT_IDS)
def test_auth_bad_key_is_refused(orm, server, alice_terminal, bad_keys, kind, method, path, body, action):
    """Unknown, malformed, revoked and expired keys get 401; the audit row keeps the public prefix only."""
    key = bad_keys[kind]
    path = path.format(id=alice_terminal)
    before = last_audit_id()
    assert_unauthorized(call(server, method, path, body, {"X-API-Key": key}))
    [row] = refusal_rows(before, method, path, "UNAUTHORIZED")
    assert row.action == action
    assert row.user is None
    assert row.key_prefix == ("" if kind == "malformed" else public_prefix(key))
    assert secret_part(key) not in row_text(row)


def test_auth_refused_requests_do_not_touch_the_terminal(orm, alice, alice_terminal, bad_keys, server):
    """Input and delete with a bad key reach nothing: the terminal stays active and never sees the input."""
    marker = f"refused-{secrets.token_hex(4)}"
    path = f"/api/terminals/{alice_terminal}"
    for key in [None, *bad_keys.values()]:
        headers = {} if key is None else {"X-API-Key": key}
        assert_unauthorized(call(server, "POST", f"{path}/input", {"input": f"echo {marker}"}, headers))
        assert_unauthorized(call(server, "DELETE", path, None, headers))
    assert alice.run(alice_terminal, "echo alive") == "alive"
    assert marker not in alice.full_output(alice_terminal)
    assert alice.get(f"/api/terminals/{alice_terminal}").json()["data"]["status"] == "active"


def test_auth_no_secret_reaches_the_audit_trail(orm, alice, keys, bad_keys, server):
    """After accepted and refused requests with every kind of key, no audit row holds a key's secret part."""
    terminal = alice.create()["terminalId"]
    alice.send(terminal, "echo audited")
    for key in bad_keys.values():
        path = f"/api/terminals/{terminal}"
        assert_unauthorized(call(server, "GET", path, headers={"Authorization": f"Api-Key {key}"}))
        assert_unauthorized(call(server, "POST", "/api/terminals", {}, {"Authorization": f"Bearer {key}"}))
    everything = [row_text(row) for row in AuditEvent.objects.all()]
    assert everything
    for key in [*keys.values(), *bad_keys.values()]:
        assert not [text for text in everything if secret_part(key) in text], "a key's secret was audited"
    prefixes = set(AuditEvent.objects.values_list("key_prefix", flat=True))
    assert public_prefix(keys["alice"]) in prefixes
    assert all(len(prefix) <= len("tk_") + 8 for prefix in prefixes)


def test_auth_disabled_users_key_is_refused(orm, server):
    """The key of a user who was deactivated gets 401."""
    user, key = make_key(name="disabled")
    user.is_active = False
    user.save()
    assert_unauthorized(call(server, "GET", "/api/terminals", headers={"X-API-Key": key}))


# Accepted keys


@pytest.mark.parametrize("scheme", ["X-API-Key", "Api-Key", "api-key", "Bearer"])
def test_auth_key_is_accepted_in_each_header(server, keys, scheme):
    """The key works as X-API-Key, as Authorization: Api-Key and as Authorization: Bearer."""
    key = keys["alice"]
    headers = {"X-API-Key": key} if scheme == "X-API-Key" else {"Authorization": f"{scheme} {key}"}
    response = call(server, "GET", "/api/terminals", headers=headers)
    assert response.status_code == 200, response.text
    assert response.json()["success"] is True


def test_auth_authorization_with_other_scheme_is_refused(server, keys):
    """Authorization: Basic with a real key is not an API key: 401."""
    response = call(server, "GET", "/api/terminals", headers={"Authorization": f"Basic {keys['alice']}"})
    assert_unauthorized(response)


def test_auth_key_with_future_expiry_works(orm, server):
    """A key whose expiry is still ahead is accepted."""
    user, _ = make_key(name="future")
    _, key = ApiKey.objects.create_key(user=user, expires_at=timezone.now() + timedelta(days=1))
    response = call(server, "GET", "/api/terminals", headers={"X-API-Key": key})
    assert response.status_code == 200, response.text


# Isolation between users


def normalized(response: requests.Response, terminal_id: str) -> str:
    return response.text.replace(terminal_id, "<id>")


def test_auth_other_users_terminal_answers_like_an_unknown_one(orm, alice, bob):
    """Bob gets for alice's terminal exactly the 404 he gets for an unknown id, on every terminal endpoint."""
    terminal = alice.create(shell="/bin/bash")["terminalId"]
    assert alice.run(terminal, "echo ready") == "ready"
    unknown = str(uuid.uuid4())
    marker = f"bob-{secrets.token_hex(4)}"
    before = last_audit_id()
    for method, suffix, body in TERMINAL_ENDPOINTS:
        body = {"input": f"echo {marker}"} if body == "INPUT" else body
        theirs = bob.request(method, f"/api/terminals/{terminal}{suffix}", json=body)
        nobodys = bob.request(method, f"/api/terminals/{unknown}{suffix}", json=body)
        assert theirs.status_code == nobodys.status_code == 404, (method, suffix, theirs.text)
        assert theirs.json()["error"]["code"] == "TERMINAL_NOT_FOUND"
        assert normalized(theirs, terminal) == normalized(nobodys, unknown), (method, suffix)
        assert theirs.headers["Content-Type"] == nobodys.headers["Content-Type"]
        assert theirs.headers["Content-Length"] == nobodys.headers["Content-Length"]

    refusals = AuditEvent.objects.filter(id__gt=before, terminal_id=terminal)
    assert sorted(refusals.values_list("outcome", flat=True)) == ["TERMINAL_NOT_FOUND"] * len(TERMINAL_ENDPOINTS)
    assert not AuditEvent.objects.filter(id__gt=before, terminal_id=terminal).exclude(outcome="TERMINAL_NOT_FOUND")
    assert alice.get(f"/api/terminals/{terminal}").json()["data"]["status"] == "active"
    assert alice.run(terminal, "echo still-mine") == "still-mine"
    assert marker not in alice.full_output(terminal)


def test_auth_list_shows_only_own_terminals(alice, bob):
    """Each user's list, active or all, holds only their own terminals."""
    mine = alice.create()["terminalId"]
    theirs = bob.create()["terminalId"]
    for status in ("active", "all"):
        alices = alice.get("/api/terminals", params={"status": status}).json()["data"]["terminals"]
        bobs = bob.get("/api/terminals", params={"status": status}).json()["data"]["terminals"]
        assert mine in [item["terminalId"] for item in alices]
        assert mine not in [item["terminalId"] for item in bobs]
        assert theirs in [item["terminalId"] for item in bobs]
        assert theirs not in [item["terminalId"] for item in alices]
        assert len({item["owner"] for item in alices}) == 1
        assert len({item["owner"] for item in bobs}) == 1


def test_auth_staff_sees_and_reads_other_users_terminals(alice, staff):
    """Staff lists alice's terminal and reads its detail, output and stats."""
    terminal = alice.create(shell="/bin/bash")["terminalId"]
    owner = alice.get(f"/api/terminals/{terminal}").json()["data"]["owner"]
    assert alice.run(terminal, "echo for-staff-$((40 + 2))") == "for-staff-42"

    listed = staff.get("/api/terminals").json()["data"]["terminals"]
    assert [item["owner"] for item in listed if item["terminalId"] == terminal] == [owner]
    detail = staff.get(f"/api/terminals/{terminal}")
    assert detail.status_code == 200, detail.text
    assert detail.json()["data"]["owner"] == owner
    output = staff.get(f"/api/terminals/{terminal}/output")
    assert output.status_code == 200, output.text
    assert "for-staff-42" in output.json()["data"]["output"]
    stats = staff.get(f"/api/terminals/{terminal}/stats")
    assert stats.status_code == 200, stats.text
    assert stats.json()["data"]["isActive"] is True


# The audit trail through the API


def audit_events(api: Api, **params) -> list[dict]:
    response = api.get("/api/audit", params=params)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["success"] is True
    return body["data"]["events"]


@pytest.fixture
def two_users(orm, server):
    """Two fresh users, each with a terminal, some input and one refused request."""
    clients = []
    for name in ("carol", "dave"):
        user, key = make_key(name=name)
        api = Api(server.url, key)
        terminal = api.create(shell="/bin/bash")["terminalId"]
        api.send(terminal, f"echo hello-{name}")
        assert api.get(f"/api/terminals/{uuid.uuid4()}").status_code == 404
        clients.append((user, api, terminal))
    yield clients
    for _, api, _ in clients:
        api.cleanup()


def test_audit_lists_own_events_only(two_users):
    """A user's audit list holds their own events and none of another user's terminal."""
    (carol, carol_api, carol_terminal), (_, _, dave_terminal) = two_users
    events = audit_events(carol_api)
    assert {event["user"] for event in events} == {carol.username}
    assert {"create", "input", "detail"} <= {event["action"] for event in events}
    assert dave_terminal not in {event["terminalId"] for event in events}
    assert audit_events(carol_api, terminal=dave_terminal) == []
    assert [e["outcome"] for e in events if e["action"] == "detail"] == ["TERMINAL_NOT_FOUND"]
    assert {event["keyPrefix"] for event in events} == {public_prefix(carol_api.key)}


def test_audit_staff_sees_every_users_events(two_users, staff):
    """Staff's audit list holds both users' events."""
    (carol, carol_api, carol_terminal), (dave, _, dave_terminal) = two_users
    assert {event["user"] for event in audit_events(staff, terminal=carol_terminal)} == {carol.username}
    assert {event["user"] for event in audit_events(staff, terminal=dave_terminal)} == {dave.username}
    # From carol's first event on (oldest first):  the run's earlier tests wrote thousands before it.
    since = audit_events(carol_api, ordering="at")[0]["at"]
    everyone = {event["user"] for event in audit_events(staff, sinceTime=since, pageSize=1000)}
    assert {carol.username, dave.username} <= everyone


def test_audit_filters_by_terminal_action_and_since(two_users):
    """terminal, action and since narrow the audit list."""
    (_, api, terminal), _ = two_users
    api.send(terminal, "echo second")
    for_terminal = audit_events(api, terminal=terminal, ordering="at")
    assert {event["terminalId"] for event in for_terminal} == {terminal}
    assert [event["action"] for event in for_terminal] == ["create", "input", "input"]

    inputs = audit_events(api, action="input", ordering="at")
    assert [event["action"] for event in inputs] == ["input", "input"]
    assert [event["details"]["input"] for event in inputs] == ["echo hello-carol\n", "echo second\n"]

    everything = audit_events(api, ordering="at")
    cutoff = everything[1]["at"]
    since = audit_events(api, sinceTime=cutoff, ordering="at")
    moment = datetime.fromisoformat(cutoff)
    assert [event["id"] for event in since] == [
        event["id"] for event in everything if datetime.fromisoformat(event["at"]) >= moment
    ]
    assert 0 < len(since) < len(everything)
    # The first spelling keeps working, and untilTime takes the other side.
    assert audit_events(api, since=cutoff, ordering="at") == since
    before = audit_events(api, untilTime=cutoff, ordering="at")
    assert [event["id"] for event in before] == [
        event["id"] for event in everything if datetime.fromisoformat(event["at"]) < moment
    ]


def test_audit_list_is_paginated(two_users):
    """pageSize limits a page; following next walks every event once."""
    (_, api, _), _ = two_users
    everything = audit_events(api)
    assert len(everything) >= 3
    response = api.get("/api/audit", params={"pageSize": 1})
    seen = []
    while True:
        assert response.status_code == 200, response.text
        data = response.json()["data"]
        assert data["count"] == len(everything)
        assert len(data["events"]) == 1
        seen += [event["id"] for event in data["events"]]
        if data["next"] is None:
            break
        response = api.http.get(data["next"], timeout=30)
    assert seen == [event["id"] for event in everything]


def test_audit_list_is_newest_first_unless_asked(two_users):
    """By default the newest event comes first; ordering=at gives the oldest first; both hold the same events."""
    (_, api, _), _ = two_users
    newest_first = [event["id"] for event in audit_events(api)]
    oldest_first = [event["id"] for event in audit_events(api, ordering="at")]
    assert len(newest_first) >= 3
    assert newest_first == sorted(newest_first, reverse=True)
    assert oldest_first == list(reversed(newest_first))


def test_audit_filters_by_user_and_outcome(two_users, staff):
    """user and outcome narrow the list; a user filter naming someone else gives a user nothing of theirs."""
    (carol, carol_api, _), (dave, _, _) = two_users
    refused = audit_events(carol_api, outcome="TERMINAL_NOT_FOUND")
    assert [(event["action"], event["user"]) for event in refused] == [("detail", carol.username)]
    assert {event["user"] for event in audit_events(staff, user=dave.username)} == {dave.username}
    assert audit_events(carol_api, user=dave.username) == []


@pytest.mark.parametrize("params", [{"user_name": "x"}, {"bob": "1"}, {"api_key": "x"}, {"terminalId": "x"}])
def test_audit_unknown_parameters_are_refused(two_users, params):
    """A parameter the list does not take is 400 INVALID_INPUT naming it and the accepted ones, not silently
    ignored (which would look like a filter that matched everything)."""
    (_, api, _), _ = two_users
    response = api.get("/api/audit", params=params)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "INVALID_INPUT"
    assert repr(next(iter(params))) in error["message"] and "outcome" in error["message"], error


def test_audit_page_past_the_end_says_how_many_pages(two_users):
    (_, api, _), _ = two_users
    total = len(audit_events(api))
    response = api.get("/api/audit", params={"pageSize": 1, "page": total + 5})
    assert response.status_code == 404, response.text
    error = response.json()["error"]
    assert error["code"] == "NOT_FOUND" and error["details"] == {"pages": total}, error
    assert f"there are {total} pages" in error["message"], error


def test_audit_trail_cannot_be_changed_through_the_orm(orm):
    """Updating, deleting or re-saving audit events raises PermissionError and leaves the row as it was."""
    row = AuditEvent.objects.create(action="probe", outcome="ok", details={"note": "original"})
    with pytest.raises(PermissionError):
        AuditEvent.objects.filter(pk=row.pk).update(outcome="tampered")
    with pytest.raises(PermissionError):
        AuditEvent.objects.update(outcome="tampered")
    with pytest.raises(PermissionError):
        AuditEvent.objects.filter(pk=row.pk).delete()
    with pytest.raises(PermissionError):
        AuditEvent.objects.all().delete()
    row.outcome = "tampered"
    with pytest.raises(PermissionError):
        row.save()
    with pytest.raises(PermissionError):
        AuditEvent.objects.bulk_update([row], ["outcome"])
    with pytest.raises(PermissionError):
        row.delete()
    stored = AuditEvent.objects.get(pk=row.pk)
    assert (stored.outcome, stored.details) == ("ok", {"note": "original"})
