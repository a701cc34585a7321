"""A one-thread executor whose thread is a daemon, so that the process can exit while the thread is stuck.

A request's thread can be waiting on the event loop (a call to the worker through async_to_sync) when the server
stops, and its loop with it: that wait never ends. The threads of concurrent.futures.ThreadPoolExecutor are joined
when the interpreter exits, so one such thread kept the whole process alive for ever: a reload under the keeper
left the old server running and serving nothing, and the keeper waited for it. The request is lost either way
(its connection closes with the process, and the client sends it again); the process is not.
"""

from __future__ import annotations

import itertools
import queue
import threading
from concurrent.futures import Executor, Future

_numbers = itertools.count()


class DaemonThreadExecutor(Executor):
    """Runs what is submitted, in order, on one daemon thread."""

    def __init__(self, name: str) -> None:
        self._work: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._shut_down = False
        self._thread = threading.Thread(target=self._run, name=f"{name}_{next(_numbers)}", daemon=True)
        self._thread.start()

    def submit(self, fn, /, *args, **kwargs) -> Future:
        with self._lock:
            if self._shut_down:
                raise RuntimeError("cannot schedule new futures after shutdown")
            future: Future = Future()
            self._work.put((future, fn, args, kwargs))
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            if not self._shut_down:
                self._shut_down = True
                self._work.put(None)  # after the work queued before it
        if wait:
            self._thread.join()

    def _run(self) -> None:
        while (item := self._work.get()) is not None:
            future, fn, args, kwargs = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                result = fn(*args, **kwargs)
            except BaseException as error:  # noqa: BLE001 - handed to whoever waits on the future
                future.set_exception(error)
            else:
                future.set_result(result)
            del item, future, fn, args, kwargs  # nothing of a finished call kept alive while the thread waits
