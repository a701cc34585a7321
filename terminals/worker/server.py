"""The terminal worker: registers itself, takes requests off the channel layer, hands each to the object that
answers it, runs its periodic steps, and stops. What it does is in the objects it owns: creation.py (new
terminals), requests.py and command_requests.py (one handler per message), upkeep.py (heartbeat and sweeps)."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
import uuid
from collections.abc import Awaitable, Callable

from channels.layers import get_channel_layer
from django.conf import settings
from django.db import close_old_connections

from ..plumbing.clock import now as database_now
from ..exceptions import ServiceError, database_unavailable
from ..remote import leases, protocol
from ..runtime import integrity, sealed
from ..runtime import keeper_protocol
from ..runtime.commands import API, RUNNING
from ..runtime.errors import TerminalError
from ..runtime.keeping import KeeperLink, Keeping, die_with_keeper, holder_pid
from ..runtime.manager import Limits, SessionManager
from ..runtime.processes import process_space
from ..runtime.pty import ExitStatus
from . import output_metric, bookkeeping
from .command_requests import CommandRequests
from .creation import Creations
from .database_queue import DatabaseQueue
from .placement import (check_run_as, confinement_from_settings, limits_from_settings, stop_ignoring_signals,
                        terminal_account_kind)
from .readers import Readers
from .recording_files import RecordingKeeper
from .requests import Handler, TerminalRequests
from .streaming import OutputFanout
from .upkeep import Upkeep

logger = logging.getLogger(__name__)

# Backoff of a listen loop whose channel layer fails (seconds): doubling from the first to the second.
LISTEN_RETRY_MIN, LISTEN_RETRY_MAX = 0.05, 1.0
# The answer to a request still running when the worker hands its terminals over (a reload under its keeper).
RESTARTING = ("The terminal's worker restarted (a reload) while this request was running; the terminal lives on. "
              "Send the request again in a moment. A command it started keeps running: find it with GET "
              "/api/terminals/{id}/commands rather than sending it again.")
HANDOVER_REPLY_SECONDS = 2.0  # how long the requests still running get to send that answer
LISTENER_STOP_SECONDS = 2.0  # how long the listener of the worker's channel gets to stop between two requests


class TerminalWorker:
    """Hosts terminals for the web processes that talk to it over the channel layer."""

    def __init__(self, *, limits: Limits | None = None, clock: Callable[[], float] = time.time, layer=None) -> None:
        # Under a keeper (runtime/keeper.py) the terminals outlive this process: it registers under the keeper's
        # id, takes back what its predecessor left running, and on SIGUSR1 hands them over instead of ending them.
        self.link = KeeperLink.from_environment()
        self.id = (self.link and os.environ.get(keeper_protocol.ID_VARIABLE)) or uuid.uuid4().hex
        self.layer = layer or get_channel_layer()
        self.channel = ""
        self.hostname = socket.gethostname()
        self.process_space = process_space()
        self.confinement = confinement_from_settings()
        sealed.use_directory(settings.TERMINALS["SEALED_SHELL_DIR"])
        self.manager = SessionManager(limits=limits or limits_from_settings(), clock=clock, on_exit=self._on_exit,
                                      confinement=self.confinement)
        if self.link is not None:
            self.manager.keeping = Keeping(self.link)
        self.database = DatabaseQueue()
        self.recordings = RecordingKeeper(self.database.run, clock=clock)
        # A quarter of the process's Redis connections at most, leaving the rest for requests and replies.
        self.fanout = OutputFanout(self.layer, concurrency=max(1, min(32, settings.REDIS_MAX_CONNECTIONS // 4)))
        self.readers = Readers(self.fanout)
        self.ready = asyncio.Event()
        self.stopped = asyncio.Event()
        self._tasks: set[asyncio.Task] = set()
        self._shutting_down = False
        self._handing_over = False
        self._listener: asyncio.Task | None = None
        place = {"worker_id": self.id, "hostname": self.hostname, "space": self.process_space, "layer": self.layer}
        self.creations = Creations(**place, manager=self.manager, database=self.database, recordings=self.recordings,
                                   readers=self.readers, reply=self._reply)
        self.requests = TerminalRequests(worker_id=self.id, manager=self.manager, database=self.database,
                                         fanout=self.fanout, confinement=self.confinement)
        self.commands = CommandRequests(manager=self.manager, database=self.database)
        self.upkeep = Upkeep(**place, manager=self.manager, database=self.database, fanout=self.fanout,
                             readers=self.readers, recordings=self.recordings, confinement=self.confinement,
                             spawn=self._spawn)
        self._handlers: dict[str, Handler] = {protocol.CREATE: self.creations.handle_create,
                                              **self.requests.handlers(), **self.commands.handlers()}

    # Starting and stopping

    async def start(self) -> None:
        """Registers the worker and starts listening; returns once it takes requests."""
        stop_ignoring_signals()
        check_run_as()
        if terminal_account_kind() == integrity.OTHER:
            # Made now, so a directory that cannot hold the copies shows in /api/health before any terminal starts.
            await asyncio.to_thread(sealed.SHELLS.copy_of, "/bin/sh")
        self.database.start()
        # Under a keeper, one channel for every process of this worker: what is sent while it restarts waits there
        # for the next one, instead of going to a process that is gone and timing out (WORKER_TIMEOUT_MS). A plain
        # channel, popped one message per receive: a process's own ("!") channel is popped in batches, and what a
        # batch held when the process handed over died with it (figure 12: requests lost, 5 s gaps in split).
        self.channel = f"terminals.worker.{self.id}" if self.link is not None else await self.layer.new_channel()
        await self.database.run(lambda: bookkeeping.worker_register(self.id, self.channel, self.hostname,
                                                                 holder_pid(), self.process_space))
        if self.link is not None:
            await self._take_back()
        await self.upkeep.mark_lost()
        await self.upkeep.reap_lost()
        self._listener = self._spawn(self._listen(self.channel))
        self._spawn(self._listen(protocol.CREATE_CHANNEL))
        self._spawn(self.upkeep.keep_alive())
        self._spawn(self._every(settings.TERMINALS["HEARTBEAT_INTERVAL_MS"] / 1000, self.upkeep.beat))
        self._spawn(self._every(settings.TERMINALS["SWEEP_INTERVAL_MS"] / 1000, self.upkeep.sweep_idle))
        self._spawn(self._every(settings.TERMINALS["RECORDING_FLUSH_MS"] / 1000, self.recordings.flush))
        self.upkeep.started()
        self._spawn(self._every(leases.RENEW_SECONDS, self.upkeep.expire_leases))
        output_metric.track(self)
        self.ready.set()
        logger.info("terminal worker %s listening on %s", self.id, self.channel)

    async def _take_back(self) -> None:
        """Hosts the terminals the keeper held while this worker was away (before anything can judge them lost)."""
        die_with_keeper()
        failed = self.manager.take_back(self.link.take_back())
        for terminal_id, error in failed:
            logger.error("terminal %s could not be taken back, and runs on held by the keeper: %s", terminal_id, error)
        self.link.watch(self.manager.reaped)
        for terminal_id, session in self.manager.items():
            if session.recording is not None:
                self.recordings.attach(terminal_id, session, session.recording)
            commands = getattr(session, "commands", None)  # a shell's: its API commands' ends are audited
            for record in commands.history() if commands is not None else ():
                if record.status == RUNNING and record.source == API:
                    self.commands.audit_end(terminal_id, record)
        adopted = {terminal_id: session.pid for terminal_id, session in self.manager.items()}
        if adopted or failed:  # a restart (the keeper's first worker has nothing to take back)
            reasons = {terminal_id: str(error) for terminal_id, error in failed}
            await self.database.run(lambda: bookkeeping.terminals_adopted(self.id, adopted, reasons))
            logger.info("took back %d terminals from the keeper", len(adopted))

    async def hand_over(self) -> None:
        """Stops serving and leaves every terminal running, held by the keeper, for the worker it starts next;
        live clients are told the byte to reattach from. (shutdown() ends them instead.)"""
        if self._shutting_down or self.link is None or self.link.broken:
            logger.error("no keeper holds this worker's terminals: SIGUSR1 is ignored (SIGTERM ends them)")
            return
        self._shutting_down = self._handing_over = True
        await self._stop_listening()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()  # a request still running answers that the worker restarts (dispatch)
        await asyncio.wait(tasks, timeout=HANDOVER_REPLY_SECONDS)
        await self.upkeep.stop()
        await self.fanout.restarting()
        await self.recordings.flush()  # written so far; the next worker goes on in the same files
        self.manager.keeping.save_all()
        self.database.stop()
        close_old_connections()
        self.stopped.set()
        logger.info("terminal worker %s handed %d terminals over to its keeper", self.id, len(self.manager))

    async def run(self) -> None:
        """Starts, then serves until shutdown() is called."""
        await self.start()
        await self.stopped.wait()

    async def shutdown(self) -> None:
        """Ends every terminal, closes their records and stops serving."""
        if self._shutting_down:
            return
        self._shutting_down = True
        for task in list(self._tasks):
            task.cancel()
        await self.upkeep.stop()
        statuses = await self.manager.shutdown()
        await self.recordings.flush(final=True)
        self.manager.retry_releases()
        self.confinement.cgroups.remove_parents()
        await self.database.run(lambda: bookkeeping.worker_stop(self.id, statuses))
        self.database.stop()
        close_old_connections()
        self.stopped.set()
        logger.info("terminal worker %s stopped; ended %d terminals", self.id, len(statuses))

    def _spawn(self, coroutine) -> asyncio.Task:
        task = asyncio.ensure_future(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _every(self, seconds: float, step: Callable[[], Awaitable[object]]) -> None:
        while True:
            await asyncio.sleep(seconds)
            try:
                await step()
            except Exception:  # noqa: BLE001 - one failed step must not stop the next
                logger.exception("periodic step %s failed", step.__name__)

    def _on_exit(self, session_id: str, status: ExitStatus) -> None:
        """A terminal's first process ended: its live clients are told, and its end recorded (audited as an exit)."""
        self.fanout.notify(session_id)
        if self._shutting_down:
            return
        self.database.submit(lambda: bookkeeping.session_end(session_id, status, bookkeeping.EXITED, release=False, audit_action="exit"))

    # Requests

    async def _listen(self, channel: str) -> None:
        """Takes requests off channel for as long as the worker runs; the channel layer going away stops nothing.

        While Redis is down or frozen, receiving fails (refused, or the socket timeout): the loop retries with a
        backoff up to LISTEN_RETRY_MAX seconds and resumes by itself when Redis is back. Nothing needs to be set up
        again then, even in an empty Redis: the worker's channel and the creation queue are plain keys, written
        on the next send, and live clients are kept by the worker (streaming.py), not in channel-layer groups.
        """
        delay = 0.0
        while True:
            try:
                message = await self.layer.receive(channel)
            except asyncio.CancelledError:
                raise
            except Exception as error:  # noqa: BLE001 - Redis away: keep trying, the service resumes when it returns
                if not delay:
                    logger.warning("receiving on %s failed, retrying until the channel layer answers: %s: %s",
                                   channel, type(error).__name__, error)
                delay = min(LISTEN_RETRY_MAX, max(LISTEN_RETRY_MIN, delay * 2))
                await asyncio.sleep(delay)
                continue
            if delay:
                logger.warning("receiving on %s works again", channel)
                delay = 0.0
            if self._shutting_down:  # taken as it stops (_stop_listening)
                await self._pass_on(channel, message)
                return
            if message.get("type") != protocol.WAKE:  # one its previous process sent itself, as it handed over
                self._spawn(self.dispatch(message))

    async def _stop_listening(self) -> None:
        """Ends the listener of this worker's channel between two requests rather than cancelling it in the middle
        of a pop, which can lose what Redis had just handed it (a request the next process would never see): a
        wake-up message sent to the channel ends its wait, and what it took last is put back (_pass_on)."""
        listener = self._listener
        if listener is None or listener.done():
            return
        try:
            await self.layer.send(self.channel, {"type": protocol.WAKE})
            await asyncio.wait_for(asyncio.shield(listener), LISTENER_STOP_SECONDS)
        except Exception as error:  # noqa: BLE001 - cancelled with the rest, as before
            logger.warning("the listener of %s did not stop between two requests (%s: %s); it is cancelled",
                           self.channel, type(error).__name__, error)

    async def _pass_on(self, channel: str, message: dict) -> None:
        """A request taken while stopping: put back, first in line, for the worker's next process (a hand-over)
        or for another worker (a creation), or answered that the worker is stopping."""
        if message.get("type") == protocol.WAKE:
            return
        if self._handing_over or channel == protocol.CREATE_CHANNEL:
            put_back = getattr(self.layer, "send_first", self.layer.send)  # in memory: nobody comes next anyway
            try:
                await put_back(channel, message)
                return
            except Exception:  # noqa: BLE001 - the caller times out, as it would have
                logger.exception("putting back a %s request taken while stopping failed", message.get("type"))
                return
        if message.get("reply_to"):
            await self._reply(message, protocol.reply_error(
                "WORKER_UNAVAILABLE", "The terminal worker is stopping; send the request again in a moment."))

    async def dispatch(self, message: dict) -> None:
        """Runs one request and sends its reply, unless its caller already gave up. A request still running when
        the worker hands over is answered WORKER_UNAVAILABLE, saying so, rather than left to time out."""
        try:
            await self._dispatch(message)
        except asyncio.CancelledError:
            if self._handing_over and message.get("reply_to"):
                await self._reply(message, protocol.reply_error("WORKER_UNAVAILABLE", RESTARTING, {"restarting": True}))
            raise

    async def _dispatch(self, message: dict) -> None:
        kind = message.get("type", "")
        if message.get("deadline", float("inf")) < database_now():
            logger.warning("dropped %s: its caller gave up", message.get("type"))
            return
        if kind == protocol.CREATE and not await self.creations.take(message):
            return
        handler = self._handlers.get(kind)
        self.readers.begin(message.get("id"), kind)
        try:
            if handler is None:
                reply = protocol.reply_error("INTERNAL_ERROR", f"unknown request {message.get('type')!r}")
            else:
                reply = await self._run_handler(handler, message)
        finally:
            self.readers.end(message.get("id"), kind)
            if kind == protocol.CREATE:
                self.creations.settled()
        if message.get("reply_to"):
            await self._reply(message, reply)

    async def _reply(self, message: dict, reply: dict) -> None:
        try:
            await self.layer.send(message["reply_to"], reply)
        except Exception:  # noqa: BLE001 - the caller times out and reports the worker unavailable
            logger.exception("replying to %s failed", message.get("type"))

    async def _run_handler(self, handler: Handler, message: dict) -> dict:
        try:
            return protocol.reply_ok(await handler(message))
        except TerminalError as error:
            return protocol.reply_error(error.code, error.message, error.details)
        except ServiceError as error:  # the database's refusals (AuditUnavailable)
            return protocol.reply_error(error.default_code, error.message, error.details)
        except Exception as error:  # noqa: BLE001 - reported to the caller as an internal error
            unavailable = database_unavailable(error)  # the database away: said as such, its outage logged once
            if unavailable is not None:
                return protocol.reply_error(unavailable.default_code, unavailable.message, unavailable.details)
            logger.exception("request %s failed", message.get("type"))
            return protocol.reply_error("INTERNAL_ERROR", "The worker failed to handle the request")
