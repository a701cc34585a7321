"""Telling the live clients of a web process when the worker hosting their terminal is gone.

A worker killed without stopping sends nothing more: no output, no exit. Its clients would wait for ever, so each
web process checks, every WATCH_SECONDS and in one query for all its connections, whether their terminals were
marked lost or their workers stopped beating (by the database's clock), and hands each such connection a
`terminal.worker_lost` event, which closes it with the documented code. Split deployment only: an embedded worker
lives and dies with its web process.

A heartbeat gone stale counts only once this process has reached the database for three heartbeat intervals in a
row: no worker can beat while the database is down, so right after an outage every heartbeat is stale until its
worker's next beat, and every connection would be closed for nothing (issue 31).
"""

from __future__ import annotations

import time

from django.conf import settings

from . import lost
from ..plumbing.rounds import RoundWatch

WATCH_SECONDS = 2.0  # how soon after its terminal is lost, or its worker stops beating, a connection is told
WORKER_LOST = "terminal.worker_lost"  # the event handed to a connection: terminal, lost (bool)

# Monotonic times of the first check of this process's unbroken run of successful ones, and of the last.
_reachable_since: float | None = None
_last_check = 0.0


def _cut_off(terminal_ids) -> dict[str, bool]:
    """lost.terminals_cut_off, with stale heartbeats left out until the database answered long enough."""
    global _reachable_since, _last_check
    try:
        found = lost.terminals_cut_off(terminal_ids)
    except Exception:
        _reachable_since = None
        raise
    now = time.monotonic()
    if _reachable_since is None or now - _last_check > 2 * WATCH_SECONDS:  # unwatched meanwhile: nothing known
        _reachable_since = now
    _last_check = now
    if now - _reachable_since < 3 * settings.TERMINALS["HEARTBEAT_INTERVAL_MS"] / 1000:
        return {terminal_id: lost for terminal_id, lost in found.items() if lost}
    return found


_rounds = RoundWatch(WATCH_SECONDS, _cut_off, "the workers of live connections")


def watch(terminal_id: str, consumer) -> None:
    """Starts watching the terminal's worker for consumer, whose terminal_worker_lost(event) is called once."""
    if settings.TERMINALS["EMBEDDED_WORKER"]:
        return
    _rounds.watch(terminal_id, consumer, lambda lost: consumer.terminal_worker_lost(
        {"type": WORKER_LOST, "terminal": terminal_id, "lost": lost}))


def unwatch(terminal_id: str, consumer) -> None:
    _rounds.unwatch(terminal_id, consumer)
