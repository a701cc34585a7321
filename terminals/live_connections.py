"""A cap on each user's live connections: the WebSockets, follow streams (SSE) and waits (a REST, MCP or ACP call
that waits for output, a command or an exit) one user holds open at once in a web process, at most
TERMINALS_MAX_LIVE_CONNECTIONS_PER_USER. Each holds a task or a thread, buffers and a worker subscription for as long
as it stays open: without a cap one user opened 1,500 and took what every other user's connections need.

Counted per web process, in its memory: a process that dies takes its count with it, where a count shared in Redis
would keep the dead process's connections for ever. With several web processes behind a balancer, a user may hold
up to the cap on each. The WebSocket and the follow take a slot here before they attach and give it back when the
connection ends; the core's waits hold one while they wait (holding()).
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

from django.conf import settings

from .exceptions import LimitReached

_held: Counter[int] = Counter()  # user pk -> open live connections in this process
_waiting: Counter[int] = Counter()  # user pk -> waits in progress in this process (also counted in _held)
_lock = threading.Lock()  # slots are taken on the event loop (WebSockets) and on request threads (SSE)


class Slot:
    """One live connection of one user; release() gives it back (once, however often it is called)."""

    def __init__(self, user_pk: int) -> None:
        self._user_pk = user_pk
        self._held = True

    def release(self) -> None:
        with _lock:
            if not self._held:
                return
            self._held = False
            _held[self._user_pk] -= 1
            if _held[self._user_pk] <= 0:
                del _held[self._user_pk]


def take(user) -> Slot:
    """A slot for one more live connection of user; LimitReached (429) when the user holds the cap already."""
    limit = settings.TERMINALS["MAX_LIVE_CONNECTIONS_PER_USER"]
    with _lock:
        if _held[user.pk] >= limit:
            raise LimitReached(
                f"you already have {limit} live connections (WebSockets, follow streams and waits) open on this "
                "server, its limit per user (TERMINALS_MAX_LIVE_CONNECTIONS_PER_USER); close one you no longer watch, "
                "or read with GET .../output?fromByte= instead, then connect again", {"limit": limit})
        _held[user.pk] += 1
    return Slot(user.pk)


@contextmanager
def holding(user) -> Iterator[Slot]:
    """A slot for the duration of a with block (a wait): a live connection, and one of the user's waits, which
    each hold a request thread of the web process (plumbing/request_threads.py). Without their own cap, one
    user's waits could take every thread and leave other users' requests queued until they answer 503."""
    limit = settings.TERMINALS["MAX_WAITS_PER_USER"]
    with _lock:
        if _waiting[user.pk] >= limit:
            raise LimitReached(
                f"you already have {limit} waits in progress on this server, its limit per user "
                "(TERMINALS_MAX_WAITS_PER_USER); let one end first, or wait with a shorter timeout and wait again",
                {"limit": limit})
        _waiting[user.pk] += 1
    try:
        slot = take(user)
        try:
            yield slot
        finally:
            slot.release()
    finally:
        with _lock:
            _waiting[user.pk] -= 1
            if _waiting[user.pk] <= 0:
                del _waiting[user.pk]


def held(user) -> int:
    """How many live connections user holds open in this process now."""
    with _lock:
        return _held.get(user.pk, 0)
