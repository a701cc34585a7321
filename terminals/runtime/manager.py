"""The terminals one worker hosts: creation within limits, lookup, idle expiry and shutdown."""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from . import adoption
from .adoption import HeldTerminal
from .buffer import OutputBuffer
from .confinement import Account, Confinement
from .errors import SessionLimitReached, SessionNotFound
from .pty import ExitStatus, PtySession, SpawnSpec
from .shell import ShellSession

if TYPE_CHECKING:
    from .keeping import Keeping

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Limits:
    max_sessions: int = 1000
    buffer_lines: int = 10_000
    buffer_bytes: int = 4 << 20
    max_pending_input: int = 1 << 20
    idle_timeout: float = 24 * 3600.0  # seconds without input or output
    kill_grace: float = 3.0  # seconds between the requested signal and SIGKILL


class SessionManager:
    """Owns every PtySession of one worker, by id."""

    def __init__(
        self,
        *,
        limits: Limits = Limits(),
        clock: Callable[[], float] = time.time,
        on_exit: Callable[[str, ExitStatus], None] | None = None,
        confinement: Confinement | None = None,
    ) -> None:
        self.limits = limits
        self.confinement = confinement
        self._unreleased: set[str] = set()  # control groups that still had members when their terminal went
        self.clock = clock
        self._on_exit = on_exit
        self._sessions: dict[str, PtySession] = {}
        self._held = 0  # places kept for terminals being started (hold_room)
        self.keeping: Keeping | None = None  # the keeper that holds the terminals across restarts, if any
        self.taken_back: set[str] = set()  # the terminals this process took back from the keeper (take_back)
        self._released_output_bytes = 0  # what released terminals wrote, for output_bytes()

    def __len__(self) -> int:
        return len(self._sessions)

    def __contains__(self, session_id: str) -> bool:
        return session_id in self._sessions

    @property
    def active_count(self) -> int:
        return sum(1 for session in self._sessions.values() if session.is_alive)

    def create(self, session_id: str, spec: SpawnSpec, **options) -> PtySession:
        """Starts a terminal, on the event loop, with spawn()'s options; raises SessionLimitReached or SpawnFailed."""
        self.hold_room()
        try:
            session = self.spawn(session_id, spec, **options)
        finally:
            self.release_room()
        self.adopt(session_id, session)
        return session

    def hold_room(self) -> None:
        """Keeps a place for a terminal about to start (counted as hosted until release_room()); raises
        SessionLimitReached when this worker hosts its most terminals already, counting those places."""
        if self.active_count + self._held >= self.limits.max_sessions:
            raise SessionLimitReached(
                f"this worker already hosts {self.limits.max_sessions} terminals",
                limit=self.limits.max_sessions,
            )
        self._held += 1

    def release_room(self) -> None:
        self._held -= 1

    def spawn(
        self,
        session_id: str,
        spec: SpawnSpec,
        *,
        session_class: type[PtySession] = ShellSession,
        buffer_bytes: int | None = None,
        account: Account | None = None,
    ) -> PtySession:
        """create() without the limit and the watching: from any thread, for a caller that holds a place
        (hold_room, on the event loop) and calls adopt() there next. Touches none of the hosted terminals.

        session_class: ShellSession for a shell that runs commands, PtySession for a
        program on a PTY, or a class with the same interface (such as a PipeSession).
        account: the Unix account to run as (needs a confinement; None: the worker's own).
        """
        if self.confinement is not None:
            spec = replace(spec, launch=tuple(self.confinement.launch_argv(session_id, [], account)),
                           account_uid=account.uid if account is not None else None)
        buffer = OutputBuffer(max_lines=self.limits.buffer_lines, max_bytes=buffer_bytes or self.limits.buffer_bytes)
        session = session_class(
            spec,
            buffer=buffer,
            max_pending_input=self.limits.max_pending_input,
            clock=self.clock,
            on_exit=lambda ended: self._report_exit(session_id, ended),
        )
        self._confine(session_id, session)
        try:
            session.spawn()
        except BaseException:
            self._release_confinement(session_id)
            raise
        return session

    def adopt(self, session_id: str, session: PtySession) -> None:
        """On the event loop: a terminal spawn() started is watched and hosted from now on (held by the keeper
        first, if there is one, so that its first byte is in the ring)."""
        if self.keeping is not None:
            self.keeping.hold(session_id, session)
        session.watch()
        self._sessions[session_id] = session

    def take_back(self, held: list[HeldTerminal]) -> list[tuple[str, Exception]]:
        """On the event loop: hosts the terminals the keeper held for this process (keeping.py); returns those
        this code could not adopt, with why. The keeper goes on holding those: they still run."""
        failed = []
        for terminal in held:
            buffer = OutputBuffer(max_lines=self.limits.buffer_lines, max_bytes=self.limits.buffer_bytes)
            try:
                session = adoption.adopt(terminal, buffer=buffer, max_pending_input=self.limits.max_pending_input,
                                         clock=self.clock,
                                         on_exit=lambda ended, session_id=terminal.id: self._report_exit(session_id, ended))
            except (adoption.AdoptionFailed, ValueError, KeyError) as error:
                failed.append((terminal.id, error))
                terminal.close()
                continue
            self._confine(terminal.id, session)
            self.keeping.track(terminal.id, session, adoption.StateFile(terminal.state))
            session.watch()
            self._sessions[terminal.id] = session
            self.taken_back.add(terminal.id)
        return failed

    def reaped(self, session_id: str, returncode: int) -> None:
        """The keeper collected how an adopted terminal's process ended."""
        session = self._sessions.get(session_id)
        if session is not None:
            session.reaped(returncode)

    def _confine(self, session_id: str, session: PtySession) -> None:
        if self.confinement is not None:
            confinement = self.confinement
            session.confined_members = lambda: confinement.members(session_id)
            session.confines = lambda pid: confinement.holds(session_id, pid)

    def get(self, session_id: str) -> PtySession:
        try:
            return self._sessions[session_id]
        except KeyError:
            raise SessionNotFound(f"terminal {session_id} is not hosted here", terminal_id=session_id) from None

    def _report_exit(self, session_id: str, session: PtySession) -> None:
        if self.keeping is not None and session.exit_status is not None:
            self.keeping.ended(session_id, session.exit_status.returncode)
        if self._on_exit is not None and session.exit_status is not None and not session.terminating:
            self._on_exit(session_id, session.exit_status)

    async def terminate(
        self, session_id: str, signum: int = signal.SIGTERM, grace: float | None = None, *, release: bool = True
    ) -> ExitStatus | None:
        """Ends the terminal's processes (and frees it, when release); returns how its first process ended."""
        session = self.get(session_id)
        status = session.exit_status
        # A shell that already exited can leave jobs behind in its session: they end too.
        if session.is_alive or session.members():
            status = await session.terminate(signum, self.limits.kill_grace if grace is None else grace)
        if release:
            self.release(session_id)
        return status

    def release(self, session_id: str) -> None:
        """Frees an ended terminal's PTY and buffer."""
        session = self._sessions.pop(session_id, None)
        self.taken_back.discard(session_id)
        if self.keeping is not None:
            self.keeping.release(session_id)
        if session is not None:
            self._released_output_bytes += session.buffer.end
            session.close()
            self._release_confinement(session_id)

    def _release_confinement(self, session_id: str) -> None:
        if self.confinement is not None and not self.confinement.release(session_id):
            self._unreleased.add(session_id)

    def retry_releases(self) -> None:
        """Removes the control groups that were still busy when their terminals were freed."""
        for session_id in list(self._unreleased):
            if self.confinement is None or self.confinement.release(session_id):
                self._unreleased.discard(session_id)

    def idle_sessions(self, *, ended: bool = False) -> list[str]:
        """Returns the ids of terminals without input or output for longer than the idle timeout.

        ended=False: live ones, to be ended; ended=True: ended ones whose output is still held, to be freed.
        """
        cutoff = self.clock() - self.limits.idle_timeout
        return [
            session_id
            for session_id, session in self._sessions.items()
            if session.is_alive != ended and session.last_activity < cutoff
        ]

    def output_bytes(self) -> int:
        """Every byte of output the terminals of this manager wrote, released ones included."""
        return self._released_output_bytes + sum(session.buffer.end for session in list(self._sessions.values()))

    def items(self) -> list[tuple[str, PtySession]]:
        return list(self._sessions.items())

    async def shutdown(self, grace: float = 2.0) -> dict[str, ExitStatus | None]:
        """Ends every terminal at once and frees them all."""
        ids = list(self._sessions)
        results = await asyncio.gather(
            *(self.terminate(session_id, signal.SIGTERM, grace) for session_id in ids),
            return_exceptions=True,
        )
        statuses = {}
        for session_id, result in zip(ids, results, strict=True):
            if isinstance(result, BaseException):
                logger.error("ending terminal %s failed: %r", session_id, result)
                result = None
            statuses[session_id] = result
        return statuses
