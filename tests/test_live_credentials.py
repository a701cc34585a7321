"""The credential watch behind live connections (terminals/live/credentials.py): each round closes exactly the
connections whose key or user stopped being usable, with one look at the database for all of them, however many
connections share a process. The promise itself, a revoked key's open WebSocket closed with 4401 within about 2 s,
is tested end to end in tests/test_live.py and tests/test_live_promises.py."""

from __future__ import annotations

import asyncio
import datetime as dt
import threading

from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from terminals.live import credentials
from terminals.models import ApiKey

from .conftest import make_key


def credentials_of_each_kind() -> dict[str, tuple[str, int]]:
    usable, _ = make_key(name="usable")
    revoked, _ = make_key(name="revoked", revoked=True)
    expired, _ = make_key(name="expired")
    ApiKey.objects.filter(user=expired).update(expires_at=timezone.now() - dt.timedelta(seconds=1))
    disabled, _ = make_key(name="disabled")
    inactive, _ = make_key(name="inactive")
    for user in (disabled, inactive):
        user.is_active = False
        user.save(update_fields=["is_active"])
    return {
        "usable key": ("key", ApiKey.objects.get(user=usable).pk),
        "revoked key": ("key", ApiKey.objects.get(user=revoked).pk),
        "expired key": ("key", ApiKey.objects.get(user=expired).pk),
        "key of a disabled user": ("key", ApiKey.objects.get(user=disabled).pk),
        "deleted key": ("key", -1),
        "active user": ("user", usable.pk),
        "disabled user": ("user", inactive.pk),
    }


def test_a_round_closes_exactly_the_connections_whose_credentials_ended_with_one_look(orm, monkeypatch):
    kinds = credentials_of_each_kind()
    monkeypatch.setattr(credentials, "CHUNK", 2)  # several statements per kind, as with thousands of keys
    rounds = []
    three_rounds = threading.Event()  # set by the third round's check, on a database thread
    checked = credentials._unusable

    def counted(wanted):
        with CaptureQueriesContext(connection) as queries:
            found = checked(wanted)
        rounds.append((len(wanted), len(queries)))
        if len(rounds) == 3:
            three_rounds.set()
        return found

    monkeypatch.setattr(credentials, "_unusable", counted)
    closed: list[tuple[str, int]] = []

    async def scenario():
        watch = credentials.CredentialWatch(0.05)
        for number in range(10):  # ten connections per credential, as viewers sharing a key
            for kind, credential in kinds.items():
                async def close(kind=kind, number=number):
                    closed.append((kind, number))
                watch.watch((kind, number), credential, close)
        watch.unwatch(("revoked key", 9))  # gone before the round: not closed
        assert await asyncio.to_thread(three_rounds.wait, 30), "three rounds within 30 s"

    asyncio.run(scenario())
    ended = {"revoked key", "expired key", "key of a disabled user", "deleted key", "disabled user"}
    assert sorted(closed) == sorted((kind, number) for kind in ended for number in range(10)
                                    if (kind, number) != ("revoked key", 9))
    # Each round: one call for the seven credentials of the 69 connections, and its statements (CHUNK ids each)
    # count the credentials, not the connections: five keys in 3 statements, two users in 1.
    assert rounds[0] == (7, 4)
    # Later rounds ask only about the usable key and the active user: the ended ones were closed and are watched
    # no more.
    assert rounds[1] == (2, 2)


def test_a_round_that_fails_leaves_the_watch_checking(orm, monkeypatch):
    """A round whose check fails (a locked database, or anything else) is retried the next round: a revoked key's
    connections are still closed."""
    user, _ = make_key(name="revoked", revoked=True)
    revoked = ("key", ApiKey.objects.get(user=user).pk)
    attempts = []
    checked = credentials._unusable

    def failing_first(wanted):
        attempts.append(len(wanted))
        if len(attempts) == 1:
            raise RuntimeError("the first round fails")
        return checked(wanted)

    monkeypatch.setattr(credentials, "_unusable", failing_first)

    async def scenario():
        done = asyncio.Event()

        async def close():
            done.set()

        watch = credentials.CredentialWatch(0.05)
        watch.watch("connection", revoked, close)
        await asyncio.wait_for(done.wait(), 30)

    asyncio.run(scenario())
    assert len(attempts) >= 2
