"""The hot read paths (output and stats polls) take a terminal's record from a half-second cache of each web
process (terminals/sessions.py). The access rule must still be the caller's as authenticated now, on every request:
a record cached by the owner's poll opens nothing to anyone else, and staff who lose the flag lose the access at
once (SECURITY.md, "Who may do what")."""

from __future__ import annotations

from django.contrib.auth import get_user_model

from .client import Api
from .conftest import make_key


def test_a_record_cached_by_one_callers_read_opens_nothing_to_another(server, alice, bob, orm):
    terminal = alice.create(shell="/bin/bash")["terminalId"]
    user, key = make_key(staff=True, name="cache-staff")
    lead = Api(server.url, key)
    for path in (f"/api/terminals/{terminal}/output", f"/api/terminals/{terminal}/stats"):
        assert alice.get(path).status_code == 200  # the record is now cached in the web process
        assert bob.get(path).status_code == 404, path  # another user: as unknown, cache or not
        assert lead.get(path).status_code == 200, path  # staff see every terminal
        get_user_model().objects.filter(pk=user.pk).update(is_staff=False)
        assert lead.get(path).status_code == 404, path  # the flag gone: the next request already refuses
        get_user_model().objects.filter(pk=user.pk).update(is_staff=True)


def test_a_terminal_ended_here_reads_as_ended_at_once(server, alice):
    terminal = alice.create(shell="/bin/bash")["terminalId"]
    assert alice.get(f"/api/terminals/{terminal}/output").status_code == 200
    assert alice.delete(f"/api/terminals/{terminal}").status_code == 200
    alice.created.remove(terminal)
    answer = alice.get(f"/api/terminals/{terminal}/output")
    assert answer.status_code in (200, 409), answer.text
    if answer.status_code == 200:
        assert answer.json()["data"]["isActive"] is False
