"""Django's ASGI handler, with each request's synchronous code on a reused thread instead of a new one.

Django runs every request's sync code (middleware, DRF views, the ORM) in a
thread-sensitive context of its own, which asgiref backs with a new
one-thread executor: two thread starts per request (its worker, and the
thread that joins it afterwards), and, because database connections belong
to threads, a new database connection per request. Measured on a `GET
output` poll, that was most of the CPU a request cost outside Python.

Here a request borrows an idle one-thread executor, or makes one when all
are busy (so a request that waits long for a command never makes another
wait), and gives it back when it ends. Its thread keeps its database
connection (CONN_MAX_AGE) for the next request. Executors idle for
IDLE_SECONDS are closed, with their connections.

At most TERMINALS_REQUEST_THREADS requests run at once: each thread holds a database connection, and without a
bound a burst of requests (or a slow worker) took every connection PostgreSQL had, the workers' heartbeats among
them, and with them every host's terminals (bench figure 11, docs/capacity.md). A request that finds them all
busy waits for one, up to TERMINALS_REQUEST_QUEUE_MS, then answers 503 SERVER_BUSY with Retry-After. Long waits
hold a thread each, so each user's are capped below the bound (live_connections.holding).

Measured with a client polling `GET output` against the embedded server:
10.1 ms of server CPU per request before, 8.4 ms with reused threads, 5.9 ms
with the middleware chain in one hop as well (see ReusedThreadsASGIHandler).
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import Callable

from asgiref.sync import ThreadSensitiveContext, sync_to_async
from django.conf import settings
from django.core import signals
from django.core.handlers.asgi import ASGIHandler, get_script_prefix
from django.core.exceptions import RequestAborted
from django.db import connections
from django.http import FileResponse
from django.urls import set_script_prefix

from .daemon_executor import DaemonThreadExecutor

logger = logging.getLogger(__name__)

IDLE_SECONDS = 60.0
BUSY_LOG_SECONDS = 10.0  # refusals for want of a thread are logged at most this often


class ExecutorPool:
    """Idle one-thread executors, the most recently used first."""

    def __init__(self, idle_seconds: float = IDLE_SECONDS, limit: int = 0) -> None:
        self.idle_seconds = idle_seconds
        self.limit = limit  # executors lent through acquire() at once; 0: no bound
        self._idle: list[tuple[DaemonThreadExecutor, float]] = []  # (executor, when it became idle); newest last
        self._lock = threading.Lock()
        self.started = 0  # executors made (tests read it)
        self._slots: asyncio.Semaphore | None = None  # made on the event loop at the first acquire()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lent: set[DaemonThreadExecutor] = set()  # acquired, their slot not released yet

    async def acquire(self, within: float) -> DaemonThreadExecutor | None:
        """An executor for one request, once fewer than limit are lent (waiting up to within seconds for one to
        be given back); None if none was. give_back() returns it."""
        if not self.limit:
            return self.take()
        if self._slots is None:
            self._slots, self._loop = asyncio.Semaphore(self.limit), asyncio.get_running_loop()
        if not self._slots.locked():
            await self._slots.acquire()  # free now: no wait, no timer
        else:
            try:
                await asyncio.wait_for(self._slots.acquire(), within)
            except asyncio.TimeoutError:
                return None
        executor = self.take()
        with self._lock:
            self._lent.add(executor)
        return executor

    def release(self, executor: DaemonThreadExecutor) -> None:
        """Frees the slot acquire() lent executor under (once; from any thread): when its work has ended, or when
        its request streams from the event loop and no longer runs on it."""
        with self._lock:
            if executor not in self._lent:
                return
            self._lent.discard(executor)
        self._loop.call_soon_threadsafe(self._slots.release)

    def take(self) -> DaemonThreadExecutor:
        with self._lock:
            if self._idle:
                return self._idle.pop()[0]
            self.started += 1
        return DaemonThreadExecutor("request")

    def give_back(self, executor: DaemonThreadExecutor) -> None:
        """Makes the executor idle once the work queued on it has finished: a request whose client went away
        leaves its view running, and the next request must not queue behind it."""
        executor.submit(_nothing).add_done_callback(lambda _: self._idle_now(executor))

    def _idle_now(self, executor: DaemonThreadExecutor) -> None:
        now = time.monotonic()
        with self._lock:
            self._idle.append((executor, now))
            stale = [entry for entry in self._idle if now - entry[1] > self.idle_seconds]
            self._idle = [entry for entry in self._idle if now - entry[1] <= self.idle_seconds]
        for old, _ in stale:
            _close(old)
        self.release(executor)  # lent by acquire(): its slot is free once its work has ended

    def idle(self) -> int:
        return len(self._idle)


def _nothing() -> None:
    pass


def _close(executor: DaemonThreadExecutor) -> None:
    # The thread's database connections would otherwise stay open until garbage collection.
    executor.submit(connections.close_all)
    executor.shutdown(wait=False)


class ReusedThreadsASGIHandler(ASGIHandler):
    """ASGIHandler whose requests run their sync code on pooled threads, in one hop."""

    def __init__(self) -> None:
        super().__init__()
        # Every middleware here is synchronous. In Django's async chain each one hops to the request's thread
        # and back, twice (request and response): a dozen thread hand-offs per request. The sync chain runs
        # all of them and the view in a single hop.
        self.load_middleware(is_async=False)
        self.executors = ExecutorPool(limit=settings.TERMINALS["REQUEST_THREADS"])
        self._busy_logged = 0.0

    async def get_response_async(self, request):
        return await sync_to_async(self.get_response, thread_sensitive=True)(request)

    async def handle(self, scope, receive, send, on_streaming: Callable[[], None] = lambda: None):
        """Django's handle(), with the request's synchronous work in one hop instead of three.

        Django hops to the request's thread for request_started's receivers, again for the middleware and the
        view, and a third time after sending for response.close() (request_finished's receivers). A hop each way
        is a thread wake-up and a turn of the event loop, for every request (bench/ANALYSIS.md). Here the one
        hop does all three for a response whose body is already in memory: closing it first changes nothing it
        sends. A streamed response (server-sent events, a recording) is sent as Django sends it, watching for
        the client leaving, and closed after.
        """
        try:
            body_file = await self.read_body(receive)
        except RequestAborted:
            return
        set_script_prefix(get_script_prefix(scope))
        try:
            response = await sync_to_async(self._respond, thread_sensitive=True)(scope, body_file)
            if response.streaming:
                on_streaming()  # a stream runs on the event loop for as long as it lasts, not on its thread
                await self._stream(response, receive, send)
            else:
                # A client gone by now is daphne's to notice: a reply to a closed connection goes nowhere.
                await self.send_response(response, send)
        finally:
            body_file.close()

    def _respond(self, scope, body_file):
        signals.request_started.send(sender=self.__class__, scope=scope)
        request, response = self.create_request(scope, body_file)
        if request is not None:
            response = self.get_response(request)
            response._handler_class = self.__class__
            if isinstance(response, FileResponse):
                response.block_size = self.chunk_size
        if not response.streaming:
            response.close()
        else:
            connections.close_all()  # the thread idles while the response streams: it holds no connection meanwhile
        return response

    async def _stream(self, response, receive, send):
        """Sends a streamed response until it ends or the client leaves (as Django's handle() does), then closes it."""
        tasks = [asyncio.create_task(self.listen_for_disconnect(receive)),
                 asyncio.create_task(self.send_response(response, send))]
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in tasks:
            if not task.done():
                task.cancel()
            try:
                await task
            except (asyncio.CancelledError, RequestAborted):
                pass
        await sync_to_async(response.close, thread_sensitive=True)()

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await super().__call__(scope, receive, send)  # Django's own refusal
        executor = await self.executors.acquire(settings.TERMINALS["REQUEST_QUEUE_MS"] / 1000)
        if executor is None:
            return await self._refuse_busy(send)
        try:
            async with ThreadSensitiveContext(executor=executor):
                await self.handle(scope, receive, send, on_streaming=lambda: self.executors.release(executor))
        finally:
            self.executors.give_back(executor)

    async def _refuse_busy(self, send) -> None:
        """503 SERVER_BUSY, in the error envelope, for a request no thread was free for within the queue's time."""
        limit = self.executors.limit
        now = time.monotonic()
        if now - self._busy_logged >= BUSY_LOG_SECONDS:
            self._busy_logged = now
            logger.warning("all %d request threads stayed busy for %d ms: requests answer 503 SERVER_BUSY (raise "
                           "TERMINALS_REQUEST_THREADS, add web processes, or find what holds them)", limit,
                           settings.TERMINALS["REQUEST_QUEUE_MS"])
        body = json.dumps({"success": False, "error": {
            "code": "SERVER_BUSY",
            "message": f"this server is running as many requests as it may at once ({limit}, "
                       "TERMINALS_REQUEST_THREADS) and none ended in time; nothing was done: send the request again "
                       "after the Retry-After seconds",
            "details": {"requestThreads": limit}}}).encode()
        await send({"type": "http.response.start", "status": 503, "headers": [
            (b"content-type", b"application/json"), (b"retry-after", b"1"),
            (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})
