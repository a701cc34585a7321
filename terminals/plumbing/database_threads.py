"""Database work from the event loop, on threads that keep their connections, without asgiref's cost per call.

channels' DatabaseSyncToAsync runs each call through asgiref's SyncToAsync: a copied context, thread-local
bookkeeping so that the call may use async_to_sync, and Django's connection checks around it. Writing one audit
row took 0.23 ms by itself, 0.49 ms with a hop to a thread and the same connection checks, and 0.60-0.67 ms
through DatabaseSyncToAsync (bench/ANALYSIS.md, seventh session): the difference is Python run under the GIL,
taken from every other request and terminal of the process.

Only for work that touches the database alone: code that asks a worker (worker.client.request_sync, the use
cases that signal or resize a terminal) needs asgiref's thread-local and keeps DatabaseSyncToAsync.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from django.db import close_old_connections

T = TypeVar("T")


class DatabaseThreads:
    """Runs calls on a pool of threads (one: in the order they were asked for), each between Django's connection
    checks, as a request's code runs between requests."""

    def __init__(self, threads: int, name: str) -> None:
        self._executor = ThreadPoolExecutor(threads, thread_name_prefix=name)

    async def run(self, function: Callable[..., T], /, *args, **kwargs) -> T:
        call = functools.partial(_checked, function, args, kwargs)
        return await asyncio.get_running_loop().run_in_executor(self._executor, call)

    def close(self) -> None:
        """Lets the threads end once what they run is done; no call may come after."""
        self._executor.shutdown(wait=False)


def _checked(function: Callable[..., T], args: tuple, kwargs: dict) -> T:
    close_old_connections()  # one past CONN_MAX_AGE, or broken by an earlier error, is replaced
    try:
        return function(*args, **kwargs)
    finally:
        close_old_connections()


# As many as the thread pool asyncio would use on a 4-core machine; a call waiting on a locked SQLite holds one.
shared = DatabaseThreads(8, "database")
run = shared.run
