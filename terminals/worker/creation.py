"""New terminals: which worker takes a creation (claimed once, passed on when full), and starting one on record."""

from __future__ import annotations

import asyncio
import logging
import random
import signal
from collections.abc import Awaitable, Callable

from django.conf import settings
from django.core.cache import cache
from django.db import DatabaseError

from ..environment import unenterable
from ..record_shapes import session_created_data
from ..remote import protocol
from ..runtime.errors import InvalidRequest
from ..runtime.manager import SessionManager
from ..runtime.pty import MARKER_VARIABLE, PtySession, SpawnSpec
from ..runtime.shell import ShellSession
from . import bookkeeping
from .database_queue import DatabaseQueue
from .placement import account_for
from .readers import Readers
from .recording_files import RecordingKeeper
from .requests import allowed_size

logger = logging.getLogger(__name__)

# Longer than any creation's deadline, so a second delivery always finds the first one's claim.
CREATION_CLAIM_SECONDS = 3600


def session_class_for(message: dict) -> type[PtySession]:
    """A shell runs commands; a program runs on a PTY, or on pipes when pty is false."""
    if message.get("kind", "shell") == "shell":
        return ShellSession
    if message.get("pty", True):
        return PtySession
    from ..runtime.pipes import PipeSession

    return PipeSession


class Creations:
    """The worker's creations: which ones it takes, and each one started, put on record and hosted."""

    def __init__(self, *, worker_id: str, hostname: str, space: str, layer, manager: SessionManager,
                 database: DatabaseQueue, recordings: RecordingKeeper, readers: Readers,
                 reply: Callable[[dict, dict], Awaitable[None]]) -> None:
        self.worker_id, self.hostname, self.space, self.layer = worker_id, hostname, space, layer
        self.manager, self.database, self.recordings, self.readers = manager, database, recordings, readers
        self.reply = reply
        self.taking = 0  # creations taken and not yet hosted: their places are spoken for

    # Which worker takes a creation

    async def take(self, message: dict) -> bool:
        """Whether this worker runs this creation (counted until settled()): not when it passed it on, nor when
        another worker claimed it first."""
        if self._full() and await self._pass_on(message):
            return False
        if not await self._claim(message):
            return False
        self.taking += 1  # counted before the first await, so two creations never take the last place
        return True

    def settled(self) -> None:
        self.taking -= 1

    async def _claim(self, message: dict) -> bool:
        """Whether this worker is the one to run this creation. The Redis channel layer can deliver a message of the
        shared queue twice: a worker that receives puts back the messages another one took but has not yet
        cleared ("$inflight"). Run twice, a creation would start a second terminal, or answer the caller with
        the refusal of the second run while the first one's terminal lives. So each creation is claimed once,
        by its id, with an atomic add to the shared cache, and a second delivery is dropped unanswered."""
        try:
            claimed = await cache.aadd(f"terminals:creation:{message.get('id')}", self.worker_id,
                                       CREATION_CLAIM_SECONDS)
        except Exception as error:  # noqa: BLE001 - no claim, no creation: the caller is told, nothing starts
            logger.warning("claiming a creation failed: %s: %s", type(error).__name__, error)
            if message.get("reply_to"):
                await self.reply(message, protocol.reply_error(
                    "WORKER_UNAVAILABLE", "The terminal workers cannot be reached (the shared cache failed); try again"))
            return False
        if not claimed:
            logger.warning("dropped a second delivery of creation %s", message.get("id"))
        return claimed

    def _full(self) -> bool:
        return self.manager.active_count + self.taking >= self.manager.limits.max_sessions

    async def _pass_on(self, message: dict) -> bool:
        """Hands a creation this worker has no room for to a live worker that has not declined it yet, which
        answers the caller; returns False when there is none (every worker is full: the caller gets 429).

        The shared queue gives a creation to whichever worker asks first, full or not. Each worker passes it on
        at most once (it joins the message's "declined"), so a creation makes at most one hop per worker.
        """
        if settings.TERMINALS["EMBEDDED_WORKER"]:
            return False  # the in-memory channel layer reaches no other process
        declined = [*message.get("declined", []), self.worker_id]
        channels = await self.database.run(lambda: bookkeeping.worker_channels_except(declined, self.space,
                                                                                      message.get("host", "")))
        if not channels:
            return False
        try:
            await self.layer.send(random.choice(channels), {**message, "declined": declined})
        except Exception as error:  # noqa: BLE001 - the channel layer failed: answer here, with 429
            logger.warning("passing a creation on failed: %s: %s", type(error).__name__, error)
            return False
        return True

    # Starting a terminal

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
        reserved = bookkeeping.session_reserve(message, worker_id=self.worker_id)
        try:
            session, recording = self._start_terminal(message)
        except BaseException:
            bookkeeping.session_abandon(message["id"])
            raise
        try:
            record = bookkeeping.session_started(reserved, session.pid, message.get("creation"))
        except Exception as error:  # noqa: BLE001 - handed to the event loop, which ends the terminal
            return session, None, recording, error
        return session, record, recording, None

    def _start_terminal(self, message: dict):
        account = account_for(message)  # reads files, and may make the account
        env = {**message["env"], MARKER_VARIABLE: message["id"]}
        allowed_size(message)
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
            await self.database.run(lambda: bookkeeping.session_abandon(session_id))
        except DatabaseError as error:
            logger.error("terminal %s was ended unrecorded; its reserved row stays: %s", session_id, error)
