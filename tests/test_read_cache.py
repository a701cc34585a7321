"""The hot read paths (output and stats polls) take a terminal's record from a short-lived cache of each web
process (terminals/sessions/lookup.py). The access rule must still be the caller's as authenticated now, on every request:
a record cached by the owner's poll opens nothing to anyone else, and staff who lose the flag lose the access as
soon as their key's check is renewed, within KEY_CHECK_SECONDS (SECURITY.md, "Who may do what")."""

from __future__ import annotations

import time

from django.contrib.auth import get_user_model

from terminals.auth import KEY_CHECK_SECONDS

from .client import Api
from .conftest import make_key
from .servers import wait_for


def set_staff(user, staff: bool) -> None:
    """Changes the flag from outside the web process, then waits out the key check's bound (terminals/auth.py)."""
    get_user_model().objects.filter(pk=user.pk).update(is_staff=staff)
    changed_at = time.monotonic()
    wait_for(lambda: time.monotonic() - changed_at >= KEY_CHECK_SECONDS, 10, "the key check's bound to pass")


def first_refusal(api: Api, path: str, timeout: float, what: str):
    """Reads path until it answers anything but 200; returns that answer."""
    def refused():
        response = api.get(path)
        return (response,) if response.status_code != 200 else None  # a Response with an error status is false

    return wait_for(refused, timeout, what)[0]


def test_a_record_cached_by_one_callers_read_opens_nothing_to_another(server, alice, bob, orm):
    terminal = alice.create(shell="/bin/bash")["terminalId"]
    user, key = make_key(staff=True, name="cache-staff")
    lead = Api(server.url, key)
    for path in (f"/api/terminals/{terminal}/output", f"/api/terminals/{terminal}/stats"):
        assert alice.get(path).status_code == 200  # the record is now cached in the web process
        assert bob.get(path).status_code == 404, path  # another user: as unknown, cache or not
        assert lead.get(path).status_code == 200, path  # staff see every terminal
        set_staff(user, False)
        assert lead.get(path).status_code == 404, path  # the flag gone: the record cached meanwhile opens nothing
        set_staff(user, True)


def test_a_terminal_ended_here_reads_as_ended_at_once(server, alice):
    terminal = alice.create(shell="/bin/bash")["terminalId"]
    assert alice.get(f"/api/terminals/{terminal}/output").status_code == 200
    assert alice.delete(f"/api/terminals/{terminal}").status_code == 200
    alice.created.remove(terminal)
    answer = alice.get(f"/api/terminals/{terminal}/output")
    assert answer.status_code in (200, 409), answer.text
    if answer.status_code == 200:
        assert answer.json()["data"]["isActive"] is False


def test_a_cached_record_follows_its_row_within_the_cache_bound(server, alice, orm):
    """A row released behind the web process's back answers 409 TERMINAL_INACTIVE soon after, not the output it
    held: in split mode the cached record is read again within READ_RECORD_SECONDS; the embedded worker, whose
    records are renewed less often (HOSTED_RECORD_SECONDS), frees the terminal itself."""
    from django.utils import timezone

    from terminals.models import TerminalSession
    from terminals.sessions import READ_RECORD_SECONDS

    terminal = alice.create(shell="/bin/bash")["terminalId"]
    path = f"/api/terminals/{terminal}/output"
    assert alice.get(path).status_code == 200  # cached now
    TerminalSession.objects.filter(pk=terminal).update(released=timezone.now())
    try:
        answer = first_refusal(alice, path, READ_RECORD_SECONDS + 10, "the release to be seen")
        assert answer.status_code == 409, answer.text
        assert answer.json()["error"]["code"] == "TERMINAL_INACTIVE", answer.text
    finally:
        TerminalSession.objects.filter(pk=terminal).update(released=None)  # so the cleanup can end its shell

