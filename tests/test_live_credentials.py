"""The access watch behind live connections (terminals/access.py): each round ends exactly the connections whose key
or user stopped being usable (UNAUTHORIZED), or that no longer reach their terminal in their mode (a staff flag or a
share taken away: TERMINAL_NOT_FOUND), with a few statements for all of them, however many connections share a
process. The promises themselves are tested end to end in tests/test_live_access.py, tests/test_live.py and
tests/test_live_promises.py."""

from __future__ import annotations

import asyncio
import datetime as dt
import threading

from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from terminals import access
from terminals.models import ApiKey, TerminalSession, ViewGrant

from .conftest import make_key


def holds_of_each_kind() -> dict[str, access.Hold]:
    usable, _ = make_key(name="usable")
    revoked, _ = make_key(name="revoked", revoked=True)
    expired, _ = make_key(name="expired")
    ApiKey.objects.filter(user=expired).update(expires_at=timezone.now() - dt.timedelta(seconds=1))
    disabled, _ = make_key(name="disabled")
    inactive, _ = make_key(name="inactive")
    for user in (disabled, inactive):
        user.is_active = False
        user.save(update_fields=["is_active"])
    staff, _ = make_key(name="staff", staff=True)
    stranger, _ = make_key(name="stranger")
    viewer, _ = make_key(name="viewer")
    terminal = TerminalSession.objects.create(owner=usable, cwd="/", status="exited")
    ViewGrant.objects.create(terminal=terminal, user=viewer, granted_by=usable)

    def key(user):
        return ("key", ApiKey.objects.get(user=user).pk)

    def hold(credential, view=False):
        return access.Hold(credential, str(terminal.pk), view)

    return {
        "usable key": hold(key(usable)),
        "revoked key": hold(key(revoked)),
        "expired key": hold(key(expired)),
        "key of a disabled user": hold(key(disabled)),
        "deleted key": hold(("key", -1)),
        "active user": hold(("user", usable.pk)),
        "disabled user": hold(("user", inactive.pk)),
        "staff": hold(key(staff)),
        "not staff": hold(key(stranger)),
        "shared viewer": hold(key(viewer), view=True),
        "shared viewer typing": hold(key(viewer)),
        "viewer without a share": hold(key(stranger), view=True),
    }


UNAUTHORIZED = {"revoked key", "expired key", "key of a disabled user", "deleted key", "disabled user"}
NOT_FOUND = {"not staff", "shared viewer typing", "viewer without a share"}


def test_a_round_closes_exactly_the_connections_whose_credentials_ended_with_one_look(orm, monkeypatch):
    kinds = holds_of_each_kind()
    monkeypatch.setattr(access, "CHUNK", 2)  # several statements per kind, as with thousands of keys
    rounds = []
    three_rounds = threading.Event()  # set by the third round's check, on a database thread
    checked = access.lost

    def counted(wanted):
        with CaptureQueriesContext(connection) as queries:
            found = checked(wanted)
        rounds.append((len(wanted), len(queries)))
        if len(rounds) == 3:
            three_rounds.set()
        return found

    monkeypatch.setattr(access, "lost", counted)
    ended: list[tuple[str, int, str]] = []

    async def scenario():
        watch = access.AccessWatch(0.05)
        for number in range(10):  # ten connections per hold, as viewers sharing a key
            for kind, hold in kinds.items():
                async def end(reason, kind=kind, number=number):
                    ended.append((kind, number, reason))
                watch.watch((kind, number), hold, end)
        watch.unwatch(("revoked key", 9))  # gone before the round: not ended
        assert await asyncio.to_thread(three_rounds.wait, 30), "three rounds within 30 s"

    asyncio.run(scenario())
    expected = [(kind, number, access.UNAUTHORIZED) for kind in UNAUTHORIZED for number in range(10)
                if (kind, number) != ("revoked key", 9)]
    expected += [(kind, number, access.NOT_FOUND) for kind in NOT_FOUND for number in range(10)]
    assert sorted(ended) == sorted(expected)
    # Each round: one call for the twelve holds of the 119 connections, and its statements (CHUNK ids each) count
    # the holds, not the connections: eight keys in 4 statements, two users in 1, the terminal's owner in 1 and
    # its shares in 1.
    assert rounds[0] == (12, 7)
    # Later rounds ask only about the holds still held (three keys, a user, the terminal and its share).
    assert rounds[1] == (4, 5)


def test_a_round_that_fails_leaves_the_watch_checking(orm, monkeypatch):
    """A round whose check fails (a locked database, or anything else) is retried the next round: a revoked key's
    connections are still closed."""
    hold = holds_of_each_kind()["revoked key"]
    attempts = []
    checked = access.lost

    def failing_first(wanted):
        attempts.append(len(wanted))
        if len(attempts) == 1:
            raise RuntimeError("the first round fails")
        return checked(wanted)

    monkeypatch.setattr(access, "lost", failing_first)

    async def scenario():
        done = asyncio.Event()

        async def end(reason):
            assert reason == access.UNAUTHORIZED
            done.set()

        watch = access.AccessWatch(0.05)
        watch.watch("connection", hold, end)
        await asyncio.wait_for(done.wait(), 30)

    asyncio.run(scenario())
    assert len(attempts) >= 2
