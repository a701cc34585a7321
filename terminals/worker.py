"""The channel-layer adapter around the PTY runtime: takes requests, runs them, records what happens."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Awaitable, Callable

from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import close_old_connections

from . import protocol, records
from .runtime.errors import TerminalError
from .runtime.manager import Limits, SessionManager
from .runtime.processes import signal_number
from .runtime.pty import ExitStatus, SpawnSpec
from .shapes import line_read_data, stats_data

logger = logging.getLogger(__name__)


# Ignored signals stay ignored across exec: a service started with nohup or `&`
# would hand its terminals a Ctrl-C that does nothing. A handler (here one that
# does nothing) is reset to the default in every child.
INHERITABLE_IGNORES = (signal.SIGINT, signal.SIGQUIT, signal.SIGHUP, signal.SIGTERM, signal.SIGTSTP,
                       signal.SIGTTIN, signal.SIGTTOU, signal.SIGUSR1, signal.SIGUSR2)


def _stop_ignoring_signals() -> None:
    if threading.current_thread() is not threading.main_thread():
        return
    for signum in INHERITABLE_IGNORES:
        if signal.getsignal(signum) == signal.SIG_IGN:
            signal.signal(signum, lambda *_: None)


def limits_from_settings() -> Limits:
    config = settings.TERMINALS
    return Limits(
        max_sessions=config["MAX_TOTAL"],
        buffer_lines=config["MAX_BUFFER_LINES"],
        buffer_bytes=config["MAX_BUFFER_BYTES"],
        max_pending_input=config["MAX_PENDING_INPUT_BYTES"],
        idle_timeout=config["SESSION_TIMEOUT_MS"] / 1000,
        kill_grace=config["KILL_GRACE_MS"] / 1000,
    )


class DatabaseQueue:
    """Runs the worker's database writes one at a time, in the order they were asked for.

    Order matters: a terminal's row is inserted before its exit is recorded,
    however quickly the process ends.
    """

    def __init__(self) -> None:
        self._jobs: asyncio.Queue[tuple[Callable[[], object], asyncio.Future | None]] = asyncio.Queue()
        self._runner: asyncio.Task | None = None

    def start(self) -> None:
        self._runner = asyncio.ensure_future(self._run())

    def submit(self, job: Callable[[], object]) -> None:
        """Queues a job nobody waits for; its failure is logged."""
        self._jobs.put_nowait((job, None))

    async def run(self, job: Callable[[], object]):
        """Queues a job and returns its result, or raises its error."""
        future = asyncio.get_running_loop().create_future()
        self._jobs.put_nowait((job, future))
        return await future

    async def _run(self) -> None:
        while True:
            job, future = await self._jobs.get()
            try:
                result = await database_sync_to_async(job)()
            except Exception as error:  # noqa: BLE001 - handed to whoever waits, or logged
                if future is None:
                    logger.exception("database job failed")
                elif not future.done():
                    future.set_exception(error)
            else:
                if future is not None and not future.done():
                    future.set_result(result)

    def stop(self) -> None:
        if self._runner is not None:
            self._runner.cancel()


class TerminalWorker:
    """Hosts terminals for the web processes that talk to it over the channel layer."""

    def __init__(self, *, limits: Limits | None = None, clock: Callable[[], float] = time.time, layer=None) -> None:
        self.id = uuid.uuid4().hex
        self.layer = layer or get_channel_layer()
        self.channel = ""
        self.hostname = socket.gethostname()
        self.manager = SessionManager(limits=limits or limits_from_settings(), clock=clock, on_exit=self._on_exit)
        self.database = DatabaseQueue()
        self.ready = asyncio.Event()
        self.stopped = asyncio.Event()
        self._tasks: set[asyncio.Task] = set()
        self._shutting_down = False
        self._handlers: dict[str, Callable[[dict], Awaitable[dict]]] = {
            protocol.CREATE: self.handle_create,
            protocol.INPUT: self.handle_input,
            protocol.OUTPUT: self.handle_output,
            protocol.STATS: self.handle_stats,
            protocol.TERMINATE: self.handle_terminate,
            protocol.PING: self.handle_ping,
        }

    # Running

    async def start(self) -> None:
        """Registers the worker and starts listening; returns once it takes requests."""
        _stop_ignoring_signals()
        self.database.start()
        self.channel = await self.layer.new_channel(protocol.WORKER_PREFIX)
        await self.database.run(lambda: records.worker_register(self.id, self.channel, self.hostname, os.getpid()))
        await self.mark_lost()
        self._spawn(self._listen(self.channel))
        self._spawn(self._listen(protocol.CREATE_CHANNEL))
        self._spawn(self._every(settings.TERMINALS["HEARTBEAT_INTERVAL_MS"] / 1000, self.beat))
        self._spawn(self._every(settings.TERMINALS["SWEEP_INTERVAL_MS"] / 1000, self.sweep_idle))
        self.ready.set()
        logger.info("terminal worker %s listening on %s", self.id, self.channel)

    async def run(self) -> None:
        """Starts, then serves until shutdown() is called."""
        await self.start()
        await self.stopped.wait()

    def _spawn(self, coroutine) -> asyncio.Task:
        task = asyncio.ensure_future(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _listen(self, channel: str) -> None:
        while True:
            try:
                message = await self.layer.receive(channel)
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - Redis away: keep trying, the service resumes when it returns
                logger.exception("receiving on %s failed", channel)
                await asyncio.sleep(1)
                continue
            self._spawn(self.dispatch(message))

    async def _every(self, seconds: float, step: Callable[[], Awaitable[object]]) -> None:
        while True:
            await asyncio.sleep(seconds)
            try:
                await step()
            except Exception:  # noqa: BLE001 - one failed step must not stop the next
                logger.exception("periodic step %s failed", step.__name__)

    async def dispatch(self, message: dict) -> None:
        """Runs one request and sends its reply, unless its caller already gave up."""
        if message.get("deadline", float("inf")) < time.time():
            logger.warning("dropped %s: its caller gave up", message.get("type"))
            return
        handler = self._handlers.get(message.get("type", ""))
        if handler is None:
            reply = protocol.reply_error("INTERNAL_ERROR", f"unknown request {message.get('type')!r}")
        else:
            reply = await self._run_handler(handler, message)
        if message.get("reply_to"):
            try:
                await self.layer.send(message["reply_to"], reply)
            except Exception:  # noqa: BLE001 - the caller times out and reports the worker unavailable
                logger.exception("replying to %s failed", message.get("type"))

    async def _run_handler(self, handler, message: dict) -> dict:
        try:
            return protocol.reply_ok(await handler(message))
        except TerminalError as error:
            return protocol.reply_error(error.code, error.message, error.details)
        except Exception:  # noqa: BLE001 - reported to the caller as an internal error
            logger.exception("request %s failed", message.get("type"))
            return protocol.reply_error("INTERNAL_ERROR", "The worker failed to handle the request")

    # Requests

    async def handle_create(self, message: dict) -> dict:
        await self.database.run(lambda: records.check_user_limit(message["owner_id"]))
        spec = SpawnSpec(
            argv=message["argv"], cwd=message["cwd"], env=message["env"], cols=message["cols"], rows=message["rows"]
        )
        session = self.manager.create(message["id"], spec)
        try:
            record = await self.database.run(
                lambda: records.session_insert(message, pid=session.pid, worker_id=self.id)
            )
        except Exception:
            await self.manager.terminate(message["id"], signal.SIGKILL, grace=0)
            raise
        return records.session_created_data(record)

    async def handle_input(self, message: dict) -> dict:
        data = message["data"].encode("utf-8", errors="surrogateescape")
        session = self.manager.get(message["id"])
        session.write(data)
        return {"bytesWritten": len(data), "pendingBytes": session.pending_input}

    async def handle_output(self, message: dict) -> dict:
        session = self.manager.get(message["id"])
        read = session.buffer.read_lines(
            since=message.get("since"),
            mode=message.get("mode", "full"),
            head_lines=message.get("head_lines", 50),
            tail_lines=message.get("tail_lines", 50),
            max_lines=message.get("max_lines", 1000),
        )
        return line_read_data(read, session)

    async def handle_stats(self, message: dict) -> dict:
        session = self.manager.get(message["id"])
        return stats_data(message["id"], session)

    async def handle_terminate(self, message: dict) -> dict:
        session_id = message["id"]
        was_alive = self.manager.get(session_id).is_alive
        status = await self.manager.terminate(session_id, signal_number(message.get("signal", "SIGTERM")), message.get("grace"))
        status = status or ExitStatus(exit_code=None, signal="SIGKILL")
        ended_as = records.KILLED if was_alive else None
        return await self.database.run(
            lambda: records.session_data(records.session_end(session_id, status, ended_as, release=True))
        )

    async def handle_ping(self, message: dict) -> dict:
        return {"worker": self.id, "terminals": len(self.manager), "active": self.manager.active_count}

    # Lifecycle events

    def _on_exit(self, session_id: str, status: ExitStatus) -> None:
        if self._shutting_down:
            return
        self.database.submit(lambda: records.session_end(session_id, status, records.EXITED, release=False, audit_action="exit"))

    async def beat(self) -> None:
        activity = {session_id: session.last_activity for session_id, session in self.manager.items()}
        await self.database.run(lambda: records.worker_beat(self.id, activity))
        await self.mark_lost()

    async def mark_lost(self) -> None:
        """Marks lost the terminals of workers that are gone (any live worker may do it)."""
        lost = await self.database.run(lambda: records.sessions_mark_lost(self.hostname))
        if lost:
            logger.warning("marked %d terminals of departed workers lost", lost)

    async def sweep_idle(self) -> int:
        """Ends terminals idle for longer than the session timeout; returns how many."""
        ended = 0
        for session_id in self.manager.idle_sessions():
            try:
                status = await self.manager.terminate(session_id, signal.SIGHUP)
                status = status or ExitStatus(exit_code=None, signal="SIGKILL")
                await self.database.run(lambda: records.session_end(session_id, status, records.TIMED_OUT, release=True, audit_action="timeout"))
                ended += 1
            except Exception:  # noqa: BLE001 - one broken terminal must not stop the sweep
                logger.exception("ending idle terminal %s failed", session_id)
        for session_id in self.manager.idle_sessions(ended=True):
            # Output of an ended terminal nobody read for a whole timeout is freed, so memory stays bounded.
            self.manager.release(session_id)
            await self.database.run(lambda: records.session_end(session_id, ExitStatus(None, None), None, release=True))
        return ended

    async def shutdown(self) -> None:
        """Ends every terminal, closes their records and stops serving."""
        if self._shutting_down:
            return
        self._shutting_down = True
        for task in list(self._tasks):
            task.cancel()
        statuses = await self.manager.shutdown()
        await self.database.run(lambda: records.worker_stop(self.id, statuses))
        self.database.stop()
        close_old_connections()
        self.stopped.set()
        logger.info("terminal worker %s stopped; ended %d terminals", self.id, len(statuses))

