"""Live access ends when access ends: every open connection to a terminal is checked again, once a round.

A WebSocket, a Server-Sent Events stream or a waiting call was let in once, by its credential and the access rule
(sessions.session_get_for, or session_get_for_viewing for a read-only look). Any of that can be taken away while
it is open: its key revoked, its user disabled, the staff flag that let it reach another user's terminal removed,
the share that let it watch removed. Each web process holds what its open connections hold, a Hold (credential,
terminal, read-only or not), and asks about all of them in one check a round (rounds.py): a few statements
however many connections there are. A connection whose hold is lost is told why, once: UNAUTHORIZED (the
credential is no longer usable) or TERMINAL_NOT_FOUND (the credential still is, but no longer reaches the
terminal, which then answers like an unknown one). Synchronous waits, which cannot be told, ask lost() themselves
every CHECK_SECONDS (sessions/waiting.py).
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import NamedTuple

from django.contrib.auth import get_user_model

from .exceptions import ServiceError, TerminalNotFound, Unauthorized
from .models import ApiKey, TerminalSession, ViewGrant
from .plumbing.rounds import RoundWatch

CHECK_SECONDS = 2.0  # how soon an open connection ends after its access was taken away (plus the check itself)
CHUNK = 500  # ids per statement, well below SQLite's limit on a statement's variables
UNAUTHORIZED, NOT_FOUND = "UNAUTHORIZED", "TERMINAL_NOT_FOUND"

Credential = tuple[str, int]  # ("key", its pk), or ("user", its pk) for a connection without a key (a cookie)


class Hold(NamedTuple):
    """What an open connection holds: who (by credential), which terminal, and whether only to watch it."""

    credential: Credential
    terminal: str  # the terminal's id, canonical
    view: bool


def hold_of(actor, terminal_id, *, view: bool = False) -> Hold:
    """The hold of an actor (audit.Actor) on a terminal it was just let into."""
    credential = ("key", actor.api_key.pk) if actor.api_key is not None else ("user", actor.user.pk)
    return Hold(credential, str(uuid.UUID(str(terminal_id))), view)


def refusal(reason: str, terminal_id) -> ServiceError:
    """The error a wait answers with when its hold was lost: as if the request had come in now."""
    if reason == UNAUTHORIZED:
        return Unauthorized("The API key was revoked or its user disabled while this waited; use a usable key")
    return TerminalNotFound(f"Terminal {terminal_id} not found")


def require(hold: Hold) -> None:
    """Raises what the hold's loss answers (refusal()), if it was lost; for synchronous waits."""
    reason = lost([hold]).get(hold)
    if reason is not None:
        raise refusal(reason, hold.terminal)


def lost(holds: list[Hold]) -> dict[Hold, str]:
    """The holds no longer held, with why: UNAUTHORIZED or TERMINAL_NOT_FOUND. One statement for the keys, one for
    the users, one for the terminals' owners and one for the shares, per CHUNK ids, however many holds."""
    holders = _holders({hold.credential for hold in holds})
    reaching = [hold for hold in holds if hold.credential in holders and not holders[hold.credential][1]]
    owners = _owners({hold.terminal for hold in reaching})
    watching = {(hold.terminal, holders[hold.credential][0]) for hold in reaching
                if hold.view and owners.get(hold.terminal) not in (None, holders[hold.credential][0])}
    granted = _granted(watching)
    found = {}
    for hold in holds:
        if hold.credential not in holders:
            found[hold] = UNAUTHORIZED
            continue
        user, staff = holders[hold.credential]
        # sessions.session_get_for's rule (staff reach every terminal, others their own), and for a read-only
        # look session_get_for_viewing's (or one shared with them).
        if not (staff or owners.get(hold.terminal) == user or (hold.view and (hold.terminal, user) in granted)):
            found[hold] = NOT_FOUND
    return found


def _chunks(values) -> list[list]:
    ordered = sorted(values)
    return [ordered[start:start + CHUNK] for start in range(0, len(ordered), CHUNK)]


def _holders(credentials: set[Credential]) -> dict[Credential, tuple[int, bool]]:
    """{usable credential: (its user's pk, whether that user is staff now)}."""
    found = {}
    for chunk in _chunks(pk for kind, pk in credentials if kind == "key"):
        for key in ApiKey.objects.select_related("user").filter(pk__in=chunk):
            if key.is_usable() and key.user.is_active:
                found[("key", key.pk)] = (key.user_id, key.user.is_staff)
    for chunk in _chunks(pk for kind, pk in credentials if kind == "user"):
        for pk, staff in get_user_model().objects.filter(pk__in=chunk, is_active=True).values_list("pk", "is_staff"):
            found[("user", pk)] = (pk, staff)
    return found


def _owners(terminals: set[str]) -> dict[str, int]:
    found = {}
    for chunk in _chunks(terminals):
        found.update((str(pk), owner) for pk, owner in
                     TerminalSession.objects.filter(pk__in=chunk).values_list("pk", "owner_id"))
    return found


def _granted(wanted: set[tuple[str, int]]) -> set[tuple[str, int]]:
    found = set()
    for chunk in _chunks({terminal for terminal, _ in wanted}):
        rows = ViewGrant.objects.filter(terminal_id__in=chunk, user_id__in={user for _, user in wanted})
        found.update((str(terminal), user) for terminal, user in rows.values_list("terminal_id", "user_id"))
    return found & wanted


class AccessWatch:
    """The open live connections of this process by what each holds, checked in one round (rounds.py)."""

    def __init__(self, seconds: float) -> None:
        # lost looked up at each round, not bound here (a test replaces it).
        self._rounds = RoundWatch(seconds, lambda holds: lost(holds), "the access of live connections")
        self._held: dict[object, Hold] = {}

    def watch(self, connection: object, hold: Hold, on_lost: Callable[[str], Awaitable[None]]) -> None:
        """From now on, on_lost(why) runs once, on the event loop, in the round that finds the hold lost."""
        self._held[connection] = hold
        self._rounds.watch(hold, connection, lambda reason: self._end(connection, reason, on_lost))

    def unwatch(self, connection: object) -> None:
        hold = self._held.pop(connection, None)
        if hold is not None:
            self._rounds.unwatch(hold, connection)

    async def _end(self, connection: object, reason: str, on_lost: Callable[[str], Awaitable[None]]) -> None:
        self._held.pop(connection, None)
        await on_lost(reason)


access_watch = AccessWatch(CHECK_SECONDS)  # the one of this process: WebSockets and event streams alike
