"""Telling the live clients of a web process when the worker hosting their terminal is gone.

A worker killed without stopping sends nothing more: no output, no exit. Its clients would wait for ever, so each
web process checks, every WATCH_SECONDS and in one query for all its connections, whether their terminals were
marked lost or their workers stopped beating (by the database's clock), and hands each such connection a
`terminal.worker_lost` event, which closes it with the documented code. Split deployment only: an embedded worker
lives and dies with its web process.
"""

from __future__ import annotations

import asyncio
import logging

from channels.db import DatabaseSyncToAsync
from django.conf import settings

from .. import records

logger = logging.getLogger(__name__)

WATCH_SECONDS = 2.0  # how soon after its terminal is lost, or its worker stops beating, a connection is told
WORKER_LOST = "terminal.worker_lost"  # the event handed to a connection: terminal, lost (bool)

_watched: dict[str, set] = {}  # terminal id -> the connections (consumers) attached to it here
_task: asyncio.Task | None = None


def watch(terminal_id: str, consumer) -> None:
    """Starts watching the terminal's worker for consumer, whose terminal_worker_lost(event) is called once."""
    global _task
    if settings.TERMINALS["EMBEDDED_WORKER"]:
        return
    _watched.setdefault(terminal_id, set()).add(consumer)
    if _task is None or _task.done():
        _task = asyncio.ensure_future(_run())


def unwatch(terminal_id: str, consumer) -> None:
    consumers = _watched.get(terminal_id)
    if consumers is not None:
        consumers.discard(consumer)
        if not consumers:
            _watched.pop(terminal_id, None)


async def _run() -> None:
    """Checks while anything is watched; the next watch() starts it again."""
    check = DatabaseSyncToAsync(records.terminals_cut_off, thread_sensitive=False)
    while _watched:
        await asyncio.sleep(WATCH_SECONDS)
        try:
            cut_off = await check(list(_watched))
        except Exception as error:  # noqa: BLE001 - the database away: check again next time
            logger.warning("checking the workers of live connections failed: %s: %s", type(error).__name__, error)
            continue
        for terminal_id, lost in cut_off.items():
            for consumer in list(_watched.pop(terminal_id, ())):
                asyncio.ensure_future(consumer.terminal_worker_lost({"type": WORKER_LOST, "terminal": terminal_id,
                                                                     "lost": lost}))
