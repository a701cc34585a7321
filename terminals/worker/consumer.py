"""The channel-layer adapter around the PTY runtime: takes requests, runs them, records what happens."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import random
import signal
import socket
import threading
import time
import uuid
import weakref
from collections.abc import Awaitable, Callable

from channels.layers import get_channel_layer
from django.conf import settings
from django.core.cache import cache
from django.db import DatabaseError, close_old_connections
from prometheus_client import REGISTRY
from prometheus_client.core import CounterMetricFamily

from ..clock import now as database_now
from ..database_threads import DatabaseThreads
from ..exceptions import ServiceError, database_unavailable
from ..environment import PER_USER, SERVICE, homes_base, run_as_policy, unenterable
from ..record_shapes import session_created_data, session_data
from ..runtime import confinement as confine
from ..runtime import integrity, sealed
from ..runtime.accounts import provision, unix_name
from ..runtime.ansi import newest_plain_text
from ..runtime.buffer import OutputBuffer
from ..runtime.commands import Command
from ..runtime.errors import SessionNotFound, TerminalError
from ..runtime.manager import Limits, SessionManager
from ..runtime.processes import marked_processes, process_space, signal_number
from ..runtime.pty import MARKER_VARIABLE, ExitStatus, PtySession, SpawnSpec, check_window_size
from ..runtime.shell import ShellSession, TerminalBusy
from ..runtime.signals import kill_marked
from ..remote import leases, protocol
from . import records
from .liveness import Silence
from .recordings import RecordingKeeper, read_chunk
from .shapes import bytes_data, command_data, command_summary, exit_status_data, info_data, line_read_data, stats_data
from .streaming import OutputFanout

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


# Backoff of a listen loop whose channel layer fails (seconds): doubling from the first to the second.
LISTEN_RETRY_MIN, LISTEN_RETRY_MAX = 0.05, 1.0


class InvalidRequest(TerminalError):
    """The request does not fit this kind of terminal."""

    code = "INVALID_INPUT"


def _allowed_size(message: dict) -> None:
    """A worker renders every screen it is asked for on its event loop: it takes no size past the service's limits,
    whoever sent the request (the web processes check first, sessions.checked_window_size)."""
    check_window_size(message["cols"], message["rows"], (settings.TERMINALS["MAX_COLS"], settings.TERMINALS["MAX_ROWS"]))


class CommandNotFound(TerminalError):
    """The terminal has no command with that id."""

    code = "COMMAND_NOT_FOUND"


def session_class_for(message: dict) -> type[PtySession]:
    """A shell runs commands; a program runs on a PTY, or on pipes when pty is false."""
    if message.get("kind", "shell") == "shell":
        return ShellSession
    if message.get("pty", True):
        return PtySession
    from ..runtime.pipes import PipeSession

    return PipeSession


def _buffer(session, stream: str | None) -> OutputBuffer:
    if stream in (None, "", "both"):
        return session.buffer
    if not hasattr(session, "buffer_for"):
        raise InvalidRequest("stream: only a terminal without a PTY keeps stdout and stderr apart")
    return session.buffer_for(stream)


def _record_data(session_id: str, record) -> dict:
    if record is None:
        raise SessionNotFound(f"terminal {session_id} has no record any more", terminal_id=session_id)
    return session_data(record)


class AccountUnavailable(TerminalError):
    """The Unix account a terminal is to run as does not exist here, or this worker cannot switch to it."""

    code = "FORBIDDEN"


# A new shell gets this long to show its first prompt on top of a command's timeout (so a command that does not
# wait, or waits less, still finds it started); a longer wait counts against the timeout. Within the web side's
# deadline, which allows the worker timeout on top of the command's.
FIRST_PROMPT_WAIT_SECONDS = 2.0


def cgroup_prefix() -> str:
    """A worker's parent group is <this><pid>: its pid gone, the worker was killed. The prefix carries the process
    space, because only there does a pid say anything: containers (and our tests' hosts) that share the cgroup
    tree but not their pids must not take each other's groups for those of dead workers and empty them."""
    space = hashlib.sha256(process_space().encode()).hexdigest()[:12]
    return f"terminals-worker-{space}-"


def confinement_from_settings() -> confine.Confinement:
    """The limits every terminal gets, and the control groups that enforce them where the machine lets us."""
    config = settings.TERMINALS
    limits = confine.ResourceLimits(
        processes=config["LIMIT_PROCESSES"] or None,
        open_files=config["LIMIT_OPEN_FILES"] or None,
        memory_bytes=(config["LIMIT_MEMORY_MB"] << 20) or None,
        cpu_cores=config["LIMIT_CPU_CORES"] or None,
    )
    if not config["CGROUPS"]:
        return confine.Confinement(limits=limits, cgroups=confine.Cgroups(problem="turned off (TERMINALS_CGROUPS=off)"))
    prefix = cgroup_prefix()
    reaped = confine.reap_departed(prefix, own=f"{prefix}{os.getpid()}")
    if reaped:
        logger.warning("killed %d processes left behind by terminals of workers that are gone", reaped)
    cgroups = confine.Cgroups.detect(f"{prefix}{os.getpid()}")
    if not cgroups.controllers:
        logger.warning("terminal limits without cgroups: %s", cgroups.problem or "no usable controller")
    return confine.Confinement(limits=limits, cgroups=cgroups)


def check_run_as() -> None:
    """Refuses to start a worker that could not run terminals as the configured account."""
    policy = run_as_policy()
    if settings.TERMINALS["RUN_AS"] == "":
        logger.warning("TERMINALS_RUN_AS is set but empty, read as 'service'; say TERMINALS_RUN_AS=service")
    if policy == PER_USER:
        try:
            unix_name("check", settings.TERMINALS["RUN_AS_PREFIX"])
        except ValueError as error:
            raise RuntimeError(f"TERMINALS_RUN_AS_PREFIX: {error}") from None
    if policy in (SERVICE, PER_USER) or os.geteuid() == 0:
        return
    account = confine.Account.lookup(policy)
    if account.uid != os.geteuid():
        raise RuntimeError(f"TERMINALS_RUN_AS={policy}: a worker running as uid {os.geteuid()} cannot switch to "
                           f"uid {account.uid}; run the worker as root or set TERMINALS_RUN_AS=service")


def terminal_account_kind() -> str:
    """Whom terminals run as, as integrity.describe sees it: root, the service's own account, or another."""
    policy = run_as_policy()
    if policy == PER_USER:
        return integrity.OTHER
    uid = os.geteuid()
    if policy != SERVICE:
        try:
            uid = confine.Account.lookup(policy).uid
        except KeyError:
            pass
    if uid == 0:
        return integrity.ROOT
    return integrity.SERVICE if uid == os.geteuid() else integrity.OTHER


def account_for(message: dict) -> confine.Account | None:
    """The account a new terminal runs as; per user, one this worker made for the terminal's owner, never another."""
    name = message.get("run_as")
    if run_as_policy() == PER_USER:
        if not message.get("username"):
            raise AccountUnavailable("this worker runs each user's terminals as their own account, and the request "
                                     "names no user: run web processes of the same version as the workers")
        account = provision(message["username"], prefix=settings.TERMINALS["RUN_AS_PREFIX"], homes=homes_base())
        if account.name != name:
            raise AccountUnavailable(f"this worker runs each user's terminals as their own account ({account.name!r}), "
                                     f"not as {name or 'its own'!r}: set TERMINALS_RUN_AS the same in every process",
                                     account=account.name)
        return account
    expected = "" if run_as_policy() == SERVICE else run_as_policy()
    if (name or "") != expected:
        # Whatever reaches the channel layer, this worker runs terminals only as it is configured to.
        raise AccountUnavailable(f"this worker runs terminals as {expected or 'its own account'!r}, not as "
                                 f"{name or 'its own account'!r}: set TERMINALS_RUN_AS the same in every process",
                                 account=name or "")
    if not name:
        return None
    try:
        account = confine.Account.lookup(name)
    except KeyError:
        raise AccountUnavailable(f"there is no Unix account {name!r} on this worker's host", account=name) from None
    if account.uid != os.geteuid() and os.geteuid() != 0:
        raise AccountUnavailable(f"this worker cannot run terminals as {name!r}", account=name)
    return account


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
        self._thread = DatabaseThreads(1, "worker-database")

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
        if self._runner is not None:
            self._runner.cancel()
        self._thread.close()


# A terminal nobody watches (WebSocket, SSE), nobody waits on (a command, a wait) and nobody asked about for this long
# is unread: when it floods, its reading is bounded (runtime/pty.py), so it cannot take the loop from the others.
UNREAD_AFTER_SECONDS = 5.0


class Readers:
    """Who reads a terminal, for PtySession.unread: its last request, and the requests in progress. Typing into a
    terminal, resizing or signalling it reads nothing: `yes` typed and left alone is a flood nobody reads."""

    NOT_READING = frozenset({protocol.INPUT, protocol.RESIZE, protocol.SIGNAL})

    def __init__(self, fanout: OutputFanout) -> None:
        self.fanout = fanout
        self.asked: dict[str, float] = {}
        self.waiting: dict[str, int] = {}

    def unread_check(self, terminal_id: str):
        self.asked[terminal_id] = 0.0  # being created is not being read: the first read request counts
        return lambda: (not self.waiting.get(terminal_id) and not self.fanout.watching(terminal_id)
                        and time.monotonic() - self.asked.get(terminal_id, 0.0) > UNREAD_AFTER_SECONDS)

    def begin(self, terminal_id: str | None, kind: str = "") -> None:
        if terminal_id in self.asked and kind not in self.NOT_READING:
            self.asked[terminal_id] = time.monotonic()
            self.waiting[terminal_id] = self.waiting.get(terminal_id, 0) + 1

    def end(self, terminal_id: str | None, kind: str = "") -> None:
        if terminal_id in self.waiting and kind not in self.NOT_READING:
            self.asked[terminal_id] = time.monotonic()
            self.waiting[terminal_id] -= 1
            if not self.waiting[terminal_id]:
                del self.waiting[terminal_id]

    def forget(self, terminal_id: str) -> None:
        self.asked.pop(terminal_id, None)
        self.waiting.pop(terminal_id, None)


# Longer than any creation's deadline, so a second delivery always finds the first one's claim.
CREATION_CLAIM_SECONDS = 3600


class _OutputBytes:
    """terminals_output_bytes_total: what the terminals of this process's workers wrote, read when scraped."""

    def describe(self):
        return [CounterMetricFamily("terminals_output_bytes", "", labels=["worker"])]

    def collect(self):
        family = CounterMetricFamily("terminals_output_bytes", "Bytes of output the terminals of this process wrote",
                                     labels=["worker"])
        for worker in list(_RUNNING):
            family.add_metric([worker.id], worker.manager.output_bytes())
        yield family


_RUNNING: weakref.WeakSet[TerminalWorker] = weakref.WeakSet()
REGISTRY.register(_OutputBytes())


class TerminalWorker:
    """Hosts terminals for the web processes that talk to it over the channel layer."""

    def __init__(self, *, limits: Limits | None = None, clock: Callable[[], float] = time.time, layer=None) -> None:
        self.id = uuid.uuid4().hex
        self.layer = layer or get_channel_layer()
        self.channel = ""
        self.hostname = socket.gethostname()
        self.process_space = process_space()
        self.confinement = confinement_from_settings()
        sealed.use_directory(settings.TERMINALS["SEALED_SHELL_DIR"])
        self.manager = SessionManager(limits=limits or limits_from_settings(), clock=clock, on_exit=self._on_exit,
                                      confinement=self.confinement)
        self.database = DatabaseQueue()
        self.recordings = RecordingKeeper(self.database.run, clock=clock)
        # A quarter of the process's Redis connections at most, leaving the rest for requests and replies.
        self.fanout = OutputFanout(self.layer, concurrency=max(1, min(32, settings.REDIS_MAX_CONNECTIONS // 4)))
        self.readers = Readers(self.fanout)
        self.ready = asyncio.Event()
        self.stopped = asyncio.Event()
        self._tasks: set[asyncio.Task] = set()
        self._shutting_down = False
        self._ending_vanished: set[str] = set()  # terminals whose record was deleted, being ended
        # The other workers' heartbeats, as seen at this one's beats.
        self.silence = Silence(settings.TERMINALS["HEARTBEAT_INTERVAL_MS"] / 1000)
        self._creating = 0  # creations taken and not yet hosted: their places are spoken for
        self._leases_checked = 0.0  # when expire_leases last ran (or the worker started), by the loop's clock
        self._handlers: dict[str, Callable[[dict], Awaitable[dict]]] = {
            protocol.CREATE: self.handle_create,
            protocol.INPUT: self.handle_input,
            protocol.OUTPUT: self.handle_output,
            protocol.STATS: self.handle_stats,
            protocol.TERMINATE: self.handle_terminate,
            protocol.PING: self.handle_ping,
            protocol.ACCOUNT: self.handle_account,
            protocol.BYTES: self.handle_bytes,
            protocol.NEWEST: self.handle_newest,
            protocol.INFO: self.handle_info,
            protocol.SCREEN: self.handle_screen,
            protocol.RESIZE: self.handle_resize,
            protocol.SIGNAL: self.handle_signal,
            protocol.WAIT: self.handle_wait,
            protocol.KILL: self.handle_kill,
            protocol.COMMAND_RUN: self.handle_command_run,
            protocol.COMMAND_GET: self.handle_command_get,
            protocol.COMMAND_WAIT: self.handle_command_wait,
            protocol.COMMAND_LIST: self.handle_command_list,
            protocol.ATTACH: self.handle_attach,
            protocol.DETACH: self.handle_detach,
            protocol.RENEW: self.handle_renew,
            protocol.RECORDING_READ: self.handle_recording_read,
        }

    # Running

    async def start(self) -> None:
        """Registers the worker and starts listening; returns once it takes requests."""
        _stop_ignoring_signals()
        check_run_as()
        if terminal_account_kind() == integrity.OTHER:
            # Made now, so a directory that cannot hold the copies shows in /api/health before any terminal starts.
            await asyncio.to_thread(sealed.SHELLS.copy_of, "/bin/sh")
        self.database.start()
        self.channel = await self.layer.new_channel()
        await self.database.run(lambda: records.worker_register(self.id, self.channel, self.hostname, os.getpid(),
                                                                 self.process_space))
        await self.mark_lost()
        await self.reap_lost()
        self._spawn(self._listen(self.channel))
        self._spawn(self._listen(protocol.CREATE_CHANNEL))
        self._spawn(self._every(settings.TERMINALS["HEARTBEAT_INTERVAL_MS"] / 1000, self.beat))
        self._spawn(self._every(settings.TERMINALS["SWEEP_INTERVAL_MS"] / 1000, self.sweep_idle))
        self._spawn(self._every(settings.TERMINALS["RECORDING_FLUSH_MS"] / 1000, self.recordings.flush))
        self._leases_checked = asyncio.get_running_loop().time()
        self._spawn(self._every(leases.RENEW_SECONDS, self.expire_leases))
        _RUNNING.add(self)
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
        if message.get("deadline", float("inf")) < database_now():
            logger.warning("dropped %s: its caller gave up", message.get("type"))
            return
        if message.get("type") == protocol.CREATE:
            if self._full() and await self._pass_creation_on(message):
                return
            if not await self._claim_creation(message):
                return
            self._creating += 1  # counted before the first await, so two creations never take the last place
        handler = self._handlers.get(message.get("type", ""))
        self.readers.begin(message.get("id"), message.get("type", ""))
        try:
            if handler is None:
                reply = protocol.reply_error("INTERNAL_ERROR", f"unknown request {message.get('type')!r}")
            else:
                reply = await self._run_handler(handler, message)
        finally:
            self.readers.end(message.get("id"), message.get("type", ""))
            if message.get("type") == protocol.CREATE:
                self._creating -= 1
        if message.get("reply_to"):
            await self._reply(message, reply)

    async def _reply(self, message: dict, reply: dict) -> None:
        try:
            await self.layer.send(message["reply_to"], reply)
        except Exception:  # noqa: BLE001 - the caller times out and reports the worker unavailable
            logger.exception("replying to %s failed", message.get("type"))

    async def _claim_creation(self, message: dict) -> bool:
        """Whether this worker is the one to run this creation. The Redis channel layer can deliver a message of the
        shared queue twice: a worker that receives puts back the messages another one took but has not yet
        cleared ("$inflight"). Run twice, a creation would start a second terminal, or answer the caller with
        the refusal of the second run while the first one's terminal lives. So each creation is claimed once,
        by its id, with an atomic add to the shared cache, and a second delivery is dropped unanswered."""
        try:
            claimed = await cache.aadd(f"terminals:creation:{message.get('id')}", self.id, CREATION_CLAIM_SECONDS)
        except Exception as error:  # noqa: BLE001 - no claim, no creation: the caller is told, nothing starts
            logger.warning("claiming a creation failed: %s: %s", type(error).__name__, error)
            if message.get("reply_to"):
                await self._reply(message, protocol.reply_error(
                    "WORKER_UNAVAILABLE", "The terminal workers cannot be reached (the shared cache failed); try again"))
            return False
        if not claimed:
            logger.warning("dropped a second delivery of creation %s", message.get("id"))
        return claimed

    def _full(self) -> bool:
        return self.manager.active_count + self._creating >= self.manager.limits.max_sessions

    async def _pass_creation_on(self, message: dict) -> bool:
        """Hands a creation this worker has no room for to a live worker that has not declined it yet, which
        answers the caller; returns False when there is none (every worker is full: the caller gets 429).

        The shared queue gives a creation to whichever worker asks first, full or not. Each worker passes it on
        at most once (it joins the message's "declined"), so a creation makes at most one hop per worker.
        """
        if settings.TERMINALS["EMBEDDED_WORKER"]:
            return False  # the in-memory channel layer reaches no other process
        declined = [*message.get("declined", []), self.id]
        channels = await self.database.run(lambda: records.worker_channels_except(declined, self.process_space,
                                                                                      message.get("host", "")))
        if not channels:
            return False
        try:
            await self.layer.send(random.choice(channels), {**message, "declined": declined})
        except Exception as error:  # noqa: BLE001 - the channel layer failed: answer here, with 429
            logger.warning("passing a creation on failed: %s: %s", type(error).__name__, error)
            return False
        return True

    async def _run_handler(self, handler, message: dict) -> dict:
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

    # Requests

    async def handle_create(self, message: dict) -> dict:
        plan = RecordingKeeper.plan(message, self.hostname)
        if plan is not None:
            message = {**message, "recording": plan}
        # One job on the database's thread writes the record, starts the terminal and records its pid, with no hop
        # to the event loop between the three (each hop was about 0.5 ms of a create, bench/ANALYSIS.md).
        self.manager.hold_room()
        job = asyncio.ensure_future(self.database.run(lambda: self._record_and_spawn(message)))
        try:
            session, record, recording, refused = await asyncio.shield(job)
        except asyncio.CancelledError:  # the worker is stopping: what the job still starts is ended, not left running
            job.add_done_callback(lambda done: self._end_late_start(message["id"], done))
            raise
        finally:
            self.manager.release_room()
        self._host(message["id"], session, recording)
        if refused is not None:
            await self._undo_start(message["id"])
            raise refused
        return session_created_data(record)

    def _host(self, terminal_id: str, session, recording) -> None:
        """On the event loop: a terminal the database job started is recorded (if planned), read and hosted."""
        if recording is not None:
            self.recordings.attach(terminal_id, session, recording)  # before the first read: nothing is missed
        session.unread = self.readers.unread_check(terminal_id)
        self.manager.adopt(terminal_id, session)

    def _end_late_start(self, terminal_id: str, job: asyncio.Future) -> None:
        if job.cancelled() or job.exception() is not None:
            return  # the job failed: it started nothing, or ended what it started and took its row back
        session, _, recording, _ = job.result()
        self._host(terminal_id, session, recording)
        asyncio.ensure_future(self._undo_start(terminal_id))

    def _record_and_spawn(self, message: dict):
        """On the database's thread: (session, record, recording, the refusal of its pid and audit row or None).

        The terminal's row is written before anything starts: a database that cannot take it refuses the create
        (AuditUnavailable) with nothing started. A terminal that started but whose pid and audit row were refused is
        returned with the refusal: the caller hosts it only to end it (none runs off the record)."""
        reserved = records.session_reserve(message, worker_id=self.id)
        try:
            session, recording = self._start_terminal(message)
        except BaseException:
            records.session_abandon(message["id"])
            raise
        try:
            record = records.session_started(reserved, session.pid, message.get("creation"))
        except Exception as error:  # noqa: BLE001 - handed to the event loop, which ends the terminal
            return session, None, recording, error
        return session, record, recording, None

    def _start_terminal(self, message: dict):
        account = account_for(message)  # reads files, and may make the account
        env = {**message["env"], MARKER_VARIABLE: message["id"]}
        _allowed_size(message)
        spec = SpawnSpec(argv=message["argv"], cwd=message["cwd"], env=env, cols=message["cols"], rows=message["rows"])
        if account is not None and not account.can_enter(spec.cwd):
            problem = unenterable(spec.cwd, spec.cwd, account)
            raise InvalidRequest(f"cwd: {problem}", fields={"cwd": [problem]})
        limit = message.get("output_byte_limit")
        plan = message.get("recording")
        recording = self.recordings.open(plan, spec.cols, spec.rows) if plan else None
        try:
            session = self.manager.spawn(
                message["id"], spec, session_class=session_class_for(message),
                buffer_bytes=min(limit, self.manager.limits.buffer_bytes) if limit else None, account=account,
            )
        except BaseException:
            if recording is not None:
                self.recordings.discard(recording)
            raise
        return session, recording

    async def _undo_start(self, session_id: str) -> None:
        """Ends a terminal that started but could not be put on record (none runs off the record), and takes back
        its reserved row, which would otherwise count against its owner's limit."""
        await self.manager.terminate(session_id, signal.SIGKILL, grace=0)
        try:
            await self.database.run(lambda: records.session_abandon(session_id))
        except DatabaseError as error:
            logger.error("terminal %s was ended unrecorded; its reserved row stays: %s", session_id, error)

    async def handle_input(self, message: dict) -> dict:
        data = message["data"].encode("utf-8", errors="surrogateescape")
        session = self.manager.get(message["id"])
        if message.get("close") and not hasattr(session, "close_input"):
            raise InvalidRequest("eof: only a terminal without a PTY has an input to close; send Ctrl-D (\\x04) instead")
        if data:
            session.type_input(data)  # what comes after it is the answer to it, its echo aside
            if session.recording is not None:
                session.recording.input(message["data"], self.manager.clock())
        if message.get("close"):
            session.close_input()
        return {"bytesWritten": len(data), "pendingBytes": session.pending_input}

    async def handle_output(self, message: dict) -> dict:
        session = self.manager.get(message["id"])
        buffer = _buffer(session, message.get("stream"))
        read = message.get("read", {})
        since = message.get("since")
        if message.get("since_time") is not None:
            since = max(since or 0, buffer.line_since_time(message["since_time"]))
        result = buffer.read_lines(
            since=since,
            mode=read.get("mode", "full"),
            head_lines=read.get("head_lines", 50),
            tail_lines=read.get("tail_lines", 50),
            max_lines=read.get("max_lines", 1000),
        )
        return line_read_data(result, session, strip=read.get("strip_ansi", False))

    async def handle_newest(self, message: dict) -> dict:
        session = self.manager.get(message["id"])
        raw, evicted = session.buffer.text_between(0, None)
        exit_status = exit_status_data(session.exit_status) if session.finished else None
        # Rendering a few MB takes a fraction of a second: off the loop, so other terminals are not held up.
        text, cut = await asyncio.to_thread(newest_plain_text, raw, message["limit"], cut_before=evicted)
        return {"output": text, "truncated": evicted or cut, "exitStatus": exit_status}

    async def handle_bytes(self, message: dict) -> dict:
        session = self.manager.get(message["id"])
        buffer = _buffer(session, message.get("stream"))
        return bytes_data(session, buffer, message["from_byte"], message["max_bytes"], message.get("strip_ansi", False),
                          without_echo=message.get("without_echo", False))

    async def handle_stats(self, message: dict) -> dict:
        session = self.manager.get(message["id"])
        return stats_data(message["id"], session)

    async def handle_info(self, message: dict) -> dict:
        return {**info_data(self.manager.get(message["id"])), "viewers": self.fanout.watching(message["id"]),
                "watchers": self.fanout.watchers(message["id"])}

    async def handle_screen(self, message: dict) -> dict:
        session = self.manager.get(message["id"])
        if not hasattr(session, "screen"):
            raise InvalidRequest("a terminal without a PTY has no screen")
        return {"terminalId": message["id"], **(await session.render_screen())}

    async def handle_resize(self, message: dict) -> dict:
        _allowed_size(message)
        session = self.manager.get(message["id"])
        session.resize(message["cols"], message["rows"])
        if session.recording is not None:
            session.recording.resize(message["cols"], message["rows"], self.manager.clock())
        await self.database.run(lambda: records.session_resize(message["id"], message["cols"], message["rows"]))
        return {"terminalId": message["id"], "cols": message["cols"], "rows": message["rows"]}

    async def handle_signal(self, message: dict) -> dict:
        session = self.manager.get(message["id"])
        if isinstance(session, ShellSession):
            # Sent right after creation, the signal waits for the shell's first prompt and finds it there, as it
            # would a moment later; otherwise it would go to the first process, before it became the shell.
            await session.started(FIRST_PROMPT_WAIT_SECONDS)
        group = session.signal_foreground(signal_number(message["signal"]))
        return {"terminalId": message["id"], "signal": message["signal"], "processGroup": group}

    async def handle_wait(self, message: dict) -> dict:
        session = self.manager.get(message["id"])
        status = await session.wait_for_exit(timeout=message["timeout"])
        return {
            "terminalId": message["id"],
            "timedOut": status is None,
            "exitCode": status.exit_code if status else None,
            "signal": status.signal if status else None,
        }

    async def handle_kill(self, message: dict) -> dict:
        session_id = message["id"]
        was_alive = self.manager.get(session_id).is_alive
        status = await self.manager.terminate(
            session_id, signal_number(message.get("signal", "SIGKILL")), message.get("grace"), release=False
        )
        status = status or ExitStatus(exit_code=None, signal="SIGKILL")
        self.fanout.notify(session_id)
        ended_as = records.KILLED if was_alive else None
        return await self.database.run(
            lambda: _record_data(session_id, records.session_end(session_id, status, ended_as, release=False))
        )

    # Live clients

    async def handle_attach(self, message: dict) -> dict:
        session = self.manager.get(message["id"])
        from_byte = message.get("from_byte")
        start = session.buffer.oldest_byte if from_byte is None else from_byte
        self.fanout.subscribe(message["id"], session, message["subscriber"], start,
                              interactive=message.get("interactive", False), who=message.get("who", ""),
                              actor=message.get("actor"))
        return {"terminalId": message["id"], "fromByte": start, "oldestByte": session.buffer.oldest_byte,
                "totalBytes": session.buffer.end, "isActive": session.is_alive, "cols": session.cols,
                "rows": session.rows, "viewers": self.fanout.watching(message["id"])}

    async def handle_detach(self, message: dict) -> dict:
        self.fanout.unsubscribe(message["id"], message["subscriber"])
        return {"terminalId": message["id"], "viewers": self.fanout.watching(message["id"])}

    async def handle_renew(self, message: dict) -> dict:
        self.fanout.renew(message.get("subscribers") or [])
        return {}

    async def expire_leases(self) -> None:
        """Stops streaming to the subscribers no web process renewed (leases.py): the web process is gone, or its
        detach was. Each channel is told once, in case a client still reads there, and a WebSocket's detach is
        audited unless its web process did it."""
        now = asyncio.get_running_loop().time()
        paused = now - self._leases_checked > 2 * leases.RENEW_SECONDS + 1.0
        self._leases_checked = now
        for terminal_id, subscriber in self.fanout.expire(leases.LEASE_SECONDS, paused=paused):
            logger.warning("stopped streaming terminal %s to %s: its lease was not renewed for %g s (its web "
                           "process is gone, or its detach was lost)", terminal_id, subscriber.channel,
                           leases.LEASE_SECONDS)
            try:
                await self.layer.send(subscriber.channel, {"type": protocol.STREAM_DROPPED, "terminal": terminal_id})
            except Exception as error:  # noqa: BLE001 - nobody may read there, which is the usual case
                logger.info("telling %s its stream ended failed: %s", subscriber.channel, error)
            if subscriber.actor is not None:
                self.database.submit(lambda terminal_id=terminal_id, subscriber=subscriber: records.lease_expired(
                    terminal_id, subscriber.channel, subscriber.actor))

    async def handle_recording_read(self, message: dict) -> dict:
        data = await asyncio.to_thread(read_chunk, message["path"], message["offset"], message["length"])
        return {"data": data}

    # Commands

    def _shell(self, session_id: str) -> ShellSession:
        session = self.manager.get(session_id)
        if not isinstance(session, ShellSession):
            raise InvalidRequest("commands run in shell terminals; this one runs a program directly")
        return session

    def _command(self, message: dict) -> tuple[ShellSession, Command]:
        session = self._shell(message["id"])
        record = session.commands.get(message["command_id"])
        if record is None:
            raise CommandNotFound(f"no command {message['command_id']} in terminal {message['id']}")
        return session, record

    async def handle_command_run(self, message: dict) -> dict:
        session = self._shell(message["id"])
        loop = asyncio.get_running_loop()
        deadline = loop.time() + message["timeout"] + FIRST_PROMPT_WAIT_SECONDS
        await self._first_prompt(session, message["timeout"] + FIRST_PROMPT_WAIT_SECONDS)
        await session.ready_for(message["command"], 0)
        record = session.run_command(message["command"])
        actor, terminal_id = message.get("actor") or {}, message["id"]
        record.on_finish = lambda finished: self.database.submit(
            lambda: records.command_audit(terminal_id, command_summary(finished), actor)
        )
        if message.get("wait", True):
            # A first prompt that took longer than FIRST_PROMPT_WAIT_SECONDS took that much of the timeout.
            result = await session.wait_command(record, min(message["timeout"], max(0.0, deadline - loop.time())))
        else:
            result = None
        return {"terminalId": message["id"], **command_data(session, record, message.get("read", {}), result)}

    @staticmethod
    async def _first_prompt(session: ShellSession, seconds: float) -> None:
        """Waits for a new shell's first prompt; refuses the command, typing nothing, when it does not come.

        Typed earlier, the command would sit in the terminal until the shell reads it, at no known time, or be
        read by whatever its startup files run (a question they ask, say).
        """
        if not await session.started(seconds):
            raise TerminalBusy(
                f"the shell has not shown its first prompt within {seconds:g} s: its startup files are still "
                "running (or waiting for input), so nothing was typed. Read the terminal's output to see what it "
                "is doing, then send the command again, with a longer timeoutMs if the shell starts slowly",
                startingShell={"waitedMs": round(seconds * 1000)},
            )

    async def handle_command_get(self, message: dict) -> dict:
        session, record = self._command(message)
        return {"terminalId": message["id"], **command_data(session, record, message.get("read", {}))}

    async def handle_command_wait(self, message: dict) -> dict:
        session, record = self._command(message)
        result = await session.wait_command(record, message["timeout"])
        return {"terminalId": message["id"], **command_data(session, record, message.get("read", {}), result)}

    async def handle_command_list(self, message: dict) -> dict:
        session = self._shell(message["id"])
        history = [command_summary(record) for record in session.commands.history()]
        return {"terminalId": message["id"], "commands": history, "count": len(history)}

    async def handle_terminate(self, message: dict) -> dict:
        session_id = message["id"]
        was_alive = self.manager.get(session_id).is_alive
        status = await self.manager.terminate(session_id, signal_number(message.get("signal", "SIGTERM")), message.get("grace"))
        status = status or ExitStatus(exit_code=None, signal="SIGKILL")
        self.fanout.notify(session_id)
        ended_as = records.KILLED if was_alive else None
        return await self.database.run(
            lambda: _record_data(session_id, records.session_end(session_id, status, ended_as, release=True))
        )

    async def handle_ping(self, message: dict) -> dict:
        return {"worker": self.id, "terminals": len(self.manager), "active": self.manager.active_count,
                "isolation": {**self.confinement.describe(), "runAs": run_as_policy(), "workerUid": os.geteuid()},
                "commandIntegrity": integrity.describe(terminal_account_kind(), sealed.SHELLS)}

    async def handle_account(self, message: dict) -> dict:
        """Makes the user's own account before their first terminal (the web process may not be root)."""
        if run_as_policy() != PER_USER:
            raise AccountUnavailable("this worker does not run terminals per user: set TERMINALS_RUN_AS the same in "
                                     "every process")
        account = await asyncio.to_thread(provision, message["username"], prefix=settings.TERMINALS["RUN_AS_PREFIX"],
                                          homes=homes_base())
        return {"account": account.name, "home": account.home}

    # Lifecycle events

    def _on_exit(self, session_id: str, status: ExitStatus) -> None:
        self.fanout.notify(session_id)
        if self._shutting_down:
            return
        self.database.submit(lambda: records.session_end(session_id, status, records.EXITED, release=False, audit_action="exit"))

    async def beat(self) -> None:
        # The liveness signal does not queue behind the audit writes: under load they can lag for
        # seconds, and a late heartbeat makes the web processes give up on this worker.
        activity = {session_id: session.last_activity for session_id, session in self.manager.items()}
        running = frozenset(session_id for session_id, session in self.manager.items() if session.is_alive)
        try:
            await asyncio.to_thread(records.worker_alive, self.id)
            beat = await self.database.run(lambda: records.worker_beat(self.id, activity, running))
        except Exception:
            self.silence.interrupted()  # the database did not take this beat: nobody is judged across the gap
            raise
        if beat.revived or beat.readopted:
            logger.error("this worker was judged gone (its heartbeats could not be seen) and beats again; it took "
                         "back %d of its terminals marked lost meanwhile", len(beat.readopted))
        await self.end_disowned(beat.disowned)
        for session_id in beat.vanished:
            if session_id in self.manager and session_id not in self._ending_vanished:
                self._ending_vanished.add(session_id)
                self._spawn(self.end_vanished(session_id))
        self.silence.observe(beat.heartbeats)
        await self.mark_lost()

    async def end_vanished(self, session_id: str) -> None:
        """Ends a terminal whose record was deleted while it ran: no request can reach it any more, so its
        processes would run on unseen. The end is audited under the system."""
        try:
            status = await self.manager.terminate(session_id)
            self.fanout.notify(session_id)
            await self.database.run(lambda: records.vanished_end(session_id, status))
            logger.warning("ended terminal %s: its record was deleted while it ran", session_id)
        except Exception:  # noqa: BLE001 - the next heartbeat tries again
            logger.exception("ending terminal %s, whose record was deleted, failed", session_id)
        finally:
            self._ending_vanished.discard(session_id)

    async def end_disowned(self, terminal_ids: list[str]) -> None:
        """Ends the terminals given a final state while this worker was judged gone that it could not take back
        (released; or lost and ended here meanwhile): on record they ended, and nobody can reach them, so nothing of
        theirs may keep running here."""
        for terminal_id in terminal_ids:
            if terminal_id not in self.manager:
                continue  # released here meanwhile
            logger.error("terminal %s was given a final state while this worker was judged gone; ending it",
                         terminal_id)
            try:
                await self.manager.terminate(terminal_id, signal.SIGKILL, grace=0)
            except TerminalError as error:
                logger.warning("ending disowned terminal %s: %s", terminal_id, error.message)
            self.fanout.notify(terminal_id)

    async def mark_lost(self) -> None:
        """Marks lost the terminals of workers that are gone (any live worker may do it), and ends what those
        of workers whose process is gone from this host left running here."""
        silent = self.silence.silent()
        lost = await self.database.run(lambda: records.sessions_mark_lost(self.process_space, self.id, silent))
        if lost:
            logger.warning("marked %d terminals of departed workers lost", len(lost))
            here = [terminal_id for terminal_id, endable in lost.items() if endable]
            if here:
                await self.reap_lost(here)
                await self.empty_departed_groups()

    async def empty_departed_groups(self) -> int:
        """Kills what is left in the control groups of this host's workers whose process is gone (what dropped the
        terminal's marker, `env -i`, is found only there), as a worker starting here would."""
        if not self.confinement.cgroups.controllers:
            return 0
        prefix = cgroup_prefix()
        killed = await asyncio.to_thread(confine.reap_departed, prefix, own=f"{prefix}{os.getpid()}")
        if killed:
            logger.warning("killed %d processes left in the control groups of workers that are gone", killed)
        return killed

    async def reap_lost(self, terminal_ids: list[str] | None = None) -> int:
        """SIGKILLs the processes on this host of lost terminals: of terminal_ids, or (None, when the worker
        starts) of every lost terminal whose marker a process here carries. Returns how many it killed.

        A worker killed without stopping leaves what its shells started that ignores the hangup (nohup, setsid,
        double-forked daemons); nobody can reach those terminals any more, so their processes go. Each carries
        its terminal's marker (MARKER_VARIABLE) in its environment, whoever its parent is now.
        """
        if terminal_ids is None:
            carried = await asyncio.to_thread(marked_processes, MARKER_VARIABLE)
            if not carried:
                return 0
            space = self.process_space  # a frozen worker's terminals here are left to it (it takes them back)
            terminal_ids = await self.database.run(lambda: records.sessions_lost_among(list(carried), space))
        doomed = [terminal_id for terminal_id in terminal_ids if terminal_id not in self.manager]  # never its own
        if not doomed:
            return 0
        killed = await asyncio.to_thread(kill_marked, MARKER_VARIABLE, doomed)
        if killed:
            logger.warning("killed %d processes left running by %d lost terminals", len(killed), len(doomed))
        return len(killed)

    async def sweep_idle(self) -> int:
        """Ends terminals idle for longer than the session timeout; returns how many."""
        self.manager.retry_releases()
        ended = 0
        for session_id in self.manager.idle_sessions():
            try:
                status = await self.manager.terminate(session_id, signal.SIGHUP)
                status = status or ExitStatus(exit_code=None, signal="SIGKILL")
                await self.database.run(lambda: records.session_end(session_id, status, records.TIMED_OUT, release=True, audit_action="timeout"))
                ended += 1
            except Exception:  # noqa: BLE001 - one broken terminal must not stop the sweep
                logger.exception("ending idle terminal %s failed", session_id)
        await self.recordings.sweep(self.hostname)
        for terminal_id in [terminal_id for terminal_id in self.readers.asked if terminal_id not in self.manager]:
            self.readers.forget(terminal_id)
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
        await self.recordings.flush(final=True)
        self.manager.retry_releases()
        self.confinement.cgroups.remove_parents()
        await self.database.run(lambda: records.worker_stop(self.id, statuses))
        self.database.stop()
        close_old_connections()
        self.stopped.set()
        logger.info("terminal worker %s stopped; ended %d terminals", self.id, len(statuses))

