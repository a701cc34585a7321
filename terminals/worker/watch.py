"""Telling the live clients of a web process when the worker hosting their terminal is gone.

A worker killed without stopping sends nothing more: no output, no exit. Its clients would wait for ever, so each
web process checks, every WATCH_SECONDS and in one query for all its connections, whether their terminals were
marked lost or their workers stopped beating (by the database's clock), and hands each such connection a
`terminal.worker_lost` event, which closes it with the documented code. Split deployment only: an embedded worker
lives and dies with its web process.
"""

from __future__ import annotations

from django.conf import settings

from .. import records
from ..rounds import RoundWatch

WATCH_SECONDS = 2.0  # how soon after its terminal is lost, or its worker stops beating, a connection is told
WORKER_LOST = "terminal.worker_lost"  # the event handed to a connection: terminal, lost (bool)

_rounds = RoundWatch(WATCH_SECONDS, records.terminals_cut_off, "the workers of live connections")


def watch(terminal_id: str, consumer) -> None:
    """Starts watching the terminal's worker for consumer, whose terminal_worker_lost(event) is called once."""
    if settings.TERMINALS["EMBEDDED_WORKER"]:
        return
    _rounds.watch(terminal_id, consumer, lambda lost: consumer.terminal_worker_lost(
        {"type": WORKER_LOST, "terminal": terminal_id, "lost": lost}))


def unwatch(terminal_id: str, consumer) -> None:
    _rounds.unwatch(terminal_id, consumer)
