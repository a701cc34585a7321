"""The worker's database writes, one at a time and in order, off its event loop."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from django.db import DatabaseError

from ..plumbing.database_threads import DatabaseThreads

logger = logging.getLogger(__name__)


class DatabaseQueue:
    """Runs the worker's database writes one at a time, in the order they were asked for.

    Order matters: a terminal's row is inserted before its exit is recorded,
    however quickly the process ends.
    """

    def __init__(self) -> None:
        self._jobs: asyncio.Queue[tuple[Callable[[], object], asyncio.Future | None]] = asyncio.Queue()
        self._runner: asyncio.Task | None = None
        self._thread = DatabaseThreads(1, "worker-database")
        self._current: asyncio.Future | None = None  # the future of the job running now
        self._stopped = False

    def start(self) -> None:
        self._runner = asyncio.ensure_future(self._run())

    def submit(self, job: Callable[[], object]) -> None:
        """Queues a job nobody waits for; its failure is logged."""
        self._jobs.put_nowait((job, None))

    async def run(self, job: Callable[[], object]):
        """Queues a job and returns its result, or raises its error."""
        if self._stopped:
            raise _stopped()
        future = asyncio.get_running_loop().create_future()
        self._jobs.put_nowait((job, future))
        return await future

    async def _run(self) -> None:
        while True:
            job, future = await self._jobs.get()
            self._current = future
            try:
                result = await self._thread.run(job)
            except Exception as error:  # noqa: BLE001 - handed to whoever waits, or logged
                if future is None:
                    logger.exception("database job failed")
                elif not future.done():
                    future.set_exception(error)
            else:
                if future is not None and not future.done():
                    future.set_result(result)

    def stop(self) -> None:
        """Stops running jobs. Whoever waits on one that will not run now is told (DatabaseError), rather than
        left waiting for ever (a creation that finished as the worker stopped, undoing itself)."""
        self._stopped = True
        if self._runner is not None:
            self._runner.cancel()
        self._thread.close()
        waiting = [self._current] + [future for _, future in self._drain()]
        for future in waiting:
            if future is not None and not future.done():
                future.set_exception(_stopped())

    def _drain(self) -> list[tuple[Callable[[], object], asyncio.Future | None]]:
        jobs = []
        while not self._jobs.empty():
            jobs.append(self._jobs.get_nowait())
        return jobs


def _stopped() -> DatabaseError:
    return DatabaseError("the worker is stopping: its database writes have ended")
