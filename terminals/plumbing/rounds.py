"""Watching many things for one process with one database check a round, however many watch each.

Live connections wait on conditions only the database knows: their terminal's worker is gone (remote/watch.py),
their access was taken away (access.py). Asking once per connection costs a query per connection per round;
here one task per process asks about everything watched in one call, every `seconds`, and tells each watcher of
what the check found, once, then forgets it. The task runs while anything is watched.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Hashable

from . import database_threads, outage

logger = logging.getLogger(__name__)

Tell = Callable[[object], Awaitable[None]]


class RoundWatch:
    def __init__(self, seconds: float, check: Callable[[list], dict], what: str) -> None:
        """check(keys) runs on a database thread and returns {key: what to tell its watchers} for the keys found."""
        self.seconds = seconds
        self._check = check
        self._what = what
        self._watched: dict[Hashable, dict[object, Tell]] = {}
        self._task: asyncio.Task | None = None

    def watch(self, key: Hashable, watcher: object, tell: Tell) -> None:
        """From now on, tell(found) runs once, on the event loop, in the round whose check finds key."""
        self._watched.setdefault(key, {})[watcher] = tell
        loop = asyncio.get_running_loop()
        if self._task is None or self._task.done() or self._task.get_loop() is not loop:
            self._task = loop.create_task(self._run())

    def unwatch(self, key: Hashable, watcher: object) -> None:
        watchers = self._watched.get(key)
        if watchers is not None:
            watchers.pop(watcher, None)
            if not watchers:
                del self._watched[key]

    async def _run(self) -> None:
        while self._watched:
            await asyncio.sleep(self.seconds)
            try:
                found = await database_threads.run(self._check, list(self._watched))
            except Exception as error:  # noqa: BLE001 - the database away, or anything: the next round checks again
                if outage.is_unavailable(error):
                    outage.noticed(error)  # logged once for the outage, not each round; live output goes on
                else:
                    logger.warning("checking %s failed: %s: %s", self._what, type(error).__name__, error)
                continue
            for key, outcome in found.items():
                for tell in self._watched.pop(key, {}).values():
                    asyncio.ensure_future(tell(outcome)).add_done_callback(self._log_failure)

    def _log_failure(self, task: asyncio.Future) -> None:
        if not task.cancelled() and task.exception() is not None:
            logger.error("telling a watcher of %s failed", self._what, exc_info=task.exception())
