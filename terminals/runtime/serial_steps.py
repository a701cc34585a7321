"""Work on a terminal's screen mirror (pyte) off the event loop, one step at a time and in the order it was asked.

Rendering a 1000 x 500 screen takes about 150 ms of pure Python, and rebuilding a mirror from 64 KiB of output
60 to 75 ms more (measured for issue 29): on the event loop, which every terminal and request of a worker shares,
one user's screen reads stalled everyone else's. The steps run on a small pool of threads instead. Each terminal's
steps run one at a time, in the order the loop submitted them (a later step never overtakes an earlier one, on
whichever thread it lands), so the mirror sees the output, its resizes and its reads in the order they happened.
"""

from __future__ import annotations

import asyncio
import collections
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
THREADS = 2  # one terminal's long render leaves a thread for the others' (the GIL is shared all the same)
_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _executor() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(THREADS, thread_name_prefix="screen")
        return _pool


class SerialSteps:
    """One terminal's queue of steps: submit() from the event loop, each runs on the pool after those before it."""

    def __init__(self) -> None:
        self._steps: collections.deque[tuple[Callable[[], object], Future]] = collections.deque()
        self._running = threading.Lock()

    def submit(self, step: Callable[[], T]) -> Future[T]:
        future: Future[T] = Future()
        self._steps.append((step, future))
        _executor().submit(self._drain)
        return future

    def _drain(self) -> None:
        # Steps leave the queue only here, under the lock and from its front: whichever drain runs first runs the
        # steps in their order, and a drain that finds them taken has nothing left to do.
        with self._running:
            while self._steps:
                step, future = self._steps.popleft()
                if not future.set_running_or_notify_cancel():
                    continue
                try:
                    future.set_result(step())
                except BaseException as error:  # noqa: BLE001 - handed to whoever waits for the step
                    future.set_exception(error)


def call_on_loop(loop: asyncio.AbstractEventLoop | None, callback, *args) -> None:
    """callback(*args) on the event loop, from a screen thread; nothing once the loop is gone (the worker stopped)."""
    if loop is None:
        return
    try:
        loop.call_soon_threadsafe(callback, *args)
    except RuntimeError:
        pass  # the loop is closed
