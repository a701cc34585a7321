"""The Django admin, driven like a browser against the live server: it cannot add or delete the rows that stand for
running terminals and workers, and it ends terminals through the same use case as DELETE /api/terminals/{id}."""

from __future__ import annotations

import re
import uuid

import pytest
import requests
from django.contrib.auth import get_user_model
from django.test import Client

from terminals.models import AuditEvent, TerminalSession, Worker

from .runtime_support import gone
from .servers import wait_for

SESSIONS = "/admin/terminals/terminalsession/"
WORKERS = "/admin/terminals/worker/"


@pytest.fixture
def browser(orm, server):
    """A requests session logged in to the admin as a superuser, and that user."""
    user = get_user_model().objects.create(username=f"admin-{uuid.uuid4().hex[:8]}", is_staff=True, is_superuser=True)
    login = Client()
    login.force_login(user)
    http = requests.Session()
    http.cookies.set("sessionid", login.cookies["sessionid"].value)
    http.base = server.url
    return http, user


def get(http, path: str) -> requests.Response:
    return http.get(f"{http.base}{path}", timeout=30, allow_redirects=False)


def post(http, path: str, data: dict) -> requests.Response:
    """A form post as the admin's pages send it, with the CSRF token the changelist page carries."""
    page = get(http, SESSIONS)
    token = http.cookies.get("csrftoken") or re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)[1]
    return http.post(f"{http.base}{path}", data={"csrfmiddlewaretoken": token, **data}, timeout=60,
                     allow_redirects=False, headers={"Referer": f"{http.base}{path}"})


def shown_messages(http) -> list[str]:
    """The messages the admin shows after an action (what it tells the person who ran it)."""
    page = get(http, SESSIONS).text
    return re.findall(r'<li class="(?:success|warning|error|info)">(.*?)</li>', page, re.S)


def test_admin_cannot_add_or_delete_terminal_or_worker_rows(browser, alice):
    """The add and delete pages of terminals and workers answer 403, a delete or a change posted anyway alters
    nothing and leaves the process running, and the changelist offers "End selected terminals" instead of deleting."""
    http, _ = browser
    created = alice.create(command="sleep", args=["100"])
    terminal = created["terminalId"]
    worker = str(TerminalSession.objects.get(pk=terminal).worker_id)
    for path in (f"{SESSIONS}add/", f"{SESSIONS}{terminal}/delete/", f"{WORKERS}add/", f"{WORKERS}{worker}/delete/"):
        assert get(http, path).status_code == 403, path
    assert post(http, f"{SESSIONS}{terminal}/delete/", {"post": "yes"}).status_code == 403
    assert post(http, f"{WORKERS}{worker}/delete/", {"post": "yes"}).status_code == 403
    # The detail pages show the records read-only: a save cannot write a stale form over the worker's updates.
    assert post(http, f"{SESSIONS}{terminal}/change/", {"status": "exited"}).status_code == 403
    assert post(http, f"{WORKERS}{worker}/change/", {"pid": "1"}).status_code == 403
    assert get(http, f"{SESSIONS}{terminal}/change/").status_code == 200
    refused_bulk = post(http, SESSIONS, {"action": "delete_selected", "_selected_action": terminal})
    assert refused_bulk.status_code == 302  # the admin answers an unknown action by redirecting with a warning
    assert TerminalSession.objects.filter(pk=terminal).exists()
    assert Worker.objects.filter(pk=worker).exists()
    assert not gone(created["pid"])
    changelist = get(http, SESSIONS)
    assert changelist.status_code == 200
    assert "End selected terminals" in changelist.text
    assert 'value="delete_selected"' not in changelist.text


def test_admin_action_ends_terminals_like_delete_and_audits_the_admin(browser, alice, bob):
    """"End selected terminals" ends the terminal's processes and releases it as DELETE does, audited as a delete
    by the admin user; a terminal not selected keeps running, and one already released is refused and audited."""
    http, user = browser
    doomed = alice.create(command="sleep", args=["100"])
    bystander = bob.create(shell="/bin/bash")["terminalId"]
    response = post(http, SESSIONS, {"action": "end_terminals", "_selected_action": doomed["terminalId"]})
    assert response.status_code == 302, response.text[-2000:]

    record = TerminalSession.objects.get(pk=doomed["terminalId"])
    assert record.status == TerminalSession.Status.KILLED, shown_messages(http)
    assert record.released is not None
    wait_for(lambda: gone(doomed["pid"]), 10, "the terminal's process to end")
    [event] = AuditEvent.objects.filter(terminal_id=doomed["terminalId"], action="delete")
    assert (event.user_id, event.outcome, event.details["signal"]) == (user.pk, "ok", "SIGTERM")
    assert bob.run(bystander, "echo alive-$((6*7))") == "alive-42"

    again = post(http, SESSIONS, {"action": "end_terminals", "_selected_action": doomed["terminalId"]})
    assert again.status_code == 302
    refused = AuditEvent.objects.filter(terminal_id=doomed["terminalId"], action="delete").exclude(outcome="ok")
    assert [(event.user_id, event.outcome) for event in refused] == [(user.pk, "TERMINAL_INACTIVE")]


AUDIT = "/admin/terminals/auditevent/"


def audit_row(pk: int) -> dict:
    """Every column of one audit row, as the database holds it."""
    return AuditEvent.objects.filter(pk=pk).values().get()


def test_admin_shows_audit_rows_read_only_and_refuses_to_change_or_delete_them(browser, alice):
    """The change page has no form fields and no save button; a change, a delete or a bulk delete posted anyway is
    refused (403, or an unknown action) and the row, its hash included, stays exactly as it was."""
    http, _ = browser
    terminal = alice.create(command="sleep", args=["100"])["terminalId"]
    event = AuditEvent.objects.filter(terminal_id=terminal, action="create").get()
    before = audit_row(event.pk)

    page = get(http, f"{AUDIT}{event.pk}/change/")
    assert page.status_code == 200
    assert terminal in page.text  # the row is shown...
    assert not re.search(r'<(input|textarea|select)[^>]+name="(outcome|action|username|details|terminal_id)"',
                         page.text)  # ...with nothing to edit
    assert 'name="_save"' not in page.text

    changed = {"outcome": "ok", "action": "create", "username": "someone-else", "details": "{}", "_save": "Save"}
    assert post(http, f"{AUDIT}{event.pk}/change/", changed).status_code == 403
    assert get(http, f"{AUDIT}{event.pk}/delete/").status_code == 403
    assert post(http, f"{AUDIT}{event.pk}/delete/", {"post": "yes"}).status_code == 403
    assert get(http, f"{AUDIT}add/").status_code == 403
    assert post(http, f"{AUDIT}add/", changed).status_code == 403
    bulk = post(http, AUDIT, {"action": "delete_selected", "_selected_action": str(event.pk), "post": "yes"})
    assert bulk.status_code in (200, 302)  # the admin answers an unknown action with a message
    assert 'value="delete_selected"' not in get(http, AUDIT).text

    assert audit_row(event.pk) == before


def test_admin_audit_list_is_newest_first_with_full_times_and_filters_by_user(browser, alice, bob, keys):
    """The audit changelist shows the newest row first, with milliseconds and the time zone; filtering by a user
    shows only that user's rows."""
    http, _ = browser
    terminal = alice.create(command="sleep", args=["100"])["terminalId"]
    newest = AuditEvent.objects.filter(terminal_id=terminal, action="create").get()
    page = get(http, AUDIT)
    assert page.status_code == 200
    ids = [int(pk) for pk in re.findall(rf'href="{AUDIT}(\d+)/change/', page.text)]
    # Full times with milliseconds and the zone (rows written by different processes may differ by a few ms
    # from the id order, which is the chain's).
    assert re.search(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}\.\d{3} UTC", page.text)
    assert ids and ids == sorted(ids, reverse=True) and ids[0] >= newest.pk, ids[:5]
    alices = get(http, f"{AUDIT}?username={newest.username}")
    assert alices.status_code == 200
    shown = set(re.findall(r'class="field-username">([^<]+)<', alices.text))
    assert shown == {newest.username}, shown
