"""The worker's side of the keeper (keeper.py): what it hands the keeper for each terminal, and what it takes back.

A SessionManager with a Keeping hands every terminal it starts to the keeper (hold: copies of the PTY master, the
pidfd, an output ring and a state file), keeps the state file current as commands begin and end, tells the keeper
how its process ended, and lets it go when the terminal is freed. A worker that starts under a keeper first takes
back every terminal the keeper holds (take_back), before it serves anything.

If the keeper goes away (killed), sends fail: the worker logs it once and goes on, its terminals now as persistent
as the worker itself.
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import os
import signal
import socket
import sys
from collections.abc import Callable

from . import adoption, keeper_protocol
from .adoption import HeldTerminal, StateFile, terminal_state
from .output_ring import OutputRing
from .pty import PtySession

logger = logging.getLogger(__name__)


PR_SET_PDEATHSIG = 1


def holder_pid() -> int:
    """The pid of the process that holds this worker's terminals: its keeper's, or its own without one."""
    return int(os.environ.get(keeper_protocol.PID_VARIABLE) or os.getpid())


def die_with_keeper() -> None:
    """Has the kernel SIGKILL this process when its keeper dies: a keeper killed (-9) takes its worker along,
    as killing the service's main process always did, rather than leaving a worker nobody restarts."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != holder_pid():  # the keeper died before the line above
        os.kill(os.getpid(), signal.SIGKILL)


REHEARSAL_REASONS = 10  # the first reasons a rehearsal tells the keeper (the rest are counted)


def rehearse_if_asked() -> None:
    """In a rehearsal (the keeper's SIGHUP, keeper_protocol.REHEARSAL_VARIABLE set): checks that this code can take back
    every terminal the keeper holds, touching none (no output read, no state written), and tells the keeper. If
    it cannot, it exits; if it can, it waits until the running worker has handed over and returns: this process
    goes on as the next worker. Call it once this code is loaded and before it does anything else: no database,
    no channel."""
    if not os.environ.pop(keeper_protocol.REHEARSAL_VARIABLE, None):
        return
    die_with_keeper()
    link = KeeperLink.from_environment()
    held = link.take_back()
    failed: dict[str, str] = {}
    for terminal in held:
        try:
            adoption.check(terminal)
        except (adoption.AdoptionFailed, ValueError, OSError) as error:
            failed[terminal.id] = str(error)
        finally:
            terminal.close()
    for fd in link._listeners.values():
        os.close(fd)
    link.send({"op": "rehearsed", "checked": len(held), "failed": len(failed),
               "reasons": list(failed.values())[:REHEARSAL_REASONS]})
    if failed:
        sys.exit(1)
    # It can: it waits, loaded, to go on as the next worker once the running one has handed over (keeper_rehearsal.promote).
    message, fds = keeper_protocol.receive(link._sock)
    for fd in fds:
        os.close(fd)
    if message is None or message.get("op") != "go":
        sys.exit(0)
    link._exchanged = False  # it takes the terminals back as a worker now, from what the keeper holds by then


_link: KeeperLink | None = None


class KeeperLink:
    """The socket to the keeper this process runs under."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self.broken = False
        self._exchanged = False
        self._held: list[HeldTerminal] = []
        self._listeners: dict[str, int] = {}

    @classmethod
    def from_environment(cls) -> KeeperLink | None:
        """The link the keeper passed (keeper_protocol.FD_VARIABLE), or None when this process runs without one; the same
        link every time. The variable is taken out of the environment: the terminals' programs never see it."""
        global _link
        fd = os.environ.pop(keeper_protocol.FD_VARIABLE, None)
        if fd:
            sock = socket.socket(fileno=int(fd))
            os.set_inheritable(sock.fileno(), False)
            _link = cls(sock)
        return _link

    def send(self, message: dict, fds: list[int] = ()) -> None:
        if self.broken:
            return
        try:
            keeper_protocol.send(self._sock, message, fds)
        except OSError as error:
            self.broken = True
            logger.error("the keeper cannot be reached (%s): terminals now end with this worker", error)

    def take_back(self) -> list[HeldTerminal]:
        """Every terminal the keeper holds, with copies of their fds (this process's to close); once."""
        self._exchange()
        held, self._held = self._held, []
        return held

    def listener(self, name: str) -> int | None:
        """The listening socket the keeper held under name (this process's to close), if any."""
        self._exchange()
        return self._listeners.pop(name, None)

    def hold_listener(self, name: str, fd: int) -> None:
        """Has the keeper hold a copy of a listening socket: the next process serves on it, and connections made
        while none runs wait in its backlog instead of being refused."""
        self.send({"op": "listen", "name": name}, [fd])

    def _exchange(self) -> None:
        """Asks the keeper for what it holds, once: the terminals and listening sockets of the process before."""
        if self._exchanged:
            return
        self._exchanged = True
        self.send({"op": "adopt"})
        while True:
            message, fds = keeper_protocol.receive(self._sock)
            if message is None:
                raise ConnectionError("the keeper closed the link while handing terminals over")
            if message["op"] == "terminal":
                self._held.append(HeldTerminal(message["id"], message["pid"], message["returncode"], *fds))
            elif message["op"] == "listener":
                self._listeners[message["name"]] = fds[0]
            elif message["op"] == "exited":
                for terminal in self._held:
                    if terminal.id == message["id"]:
                        terminal.returncode = message["returncode"]
            elif message["op"] == "adopted":
                return

    def watch(self, on_exited: Callable[[str, int], None]) -> None:
        """From now on, on_exited(terminal id, returncode) is called on the event loop when the keeper reaps a
        process this worker adopted; a restart the keeper refused (its rehearsal failed) is logged."""
        loop = asyncio.get_running_loop()
        self._sock.setblocking(False)

        def readable() -> None:
            try:
                message, fds = keeper_protocol.receive(self._sock)
            except BlockingIOError:
                return
            for fd in fds:
                os.close(fd)
            if message is None:
                loop.remove_reader(self._sock)
                self.broken = True
                logger.error("the keeper closed its link: terminals now end with this worker")
            elif message.get("op") == "exited":
                on_exited(message["id"], message["returncode"])
            elif message.get("op") == "restart_refused":
                logger.error("the keeper refused to restart this worker, which keeps its terminals: the code on "
                             "disk cannot take them over: %s", message["reason"])

        loop.add_reader(self._sock, readable)


class Keeping:
    """The terminals of one SessionManager, as held by the keeper."""

    def __init__(self, link: KeeperLink) -> None:
        self.link = link
        self._states: dict[str, StateFile] = {}
        self._due: set[str] = set()  # state files to rewrite at the loop's next turn
        self._sessions: dict[str, PtySession] = {}

    def hold(self, session_id: str, session: PtySession) -> None:
        """Hands a terminal just started (not read yet) to the keeper: its ring and state file are made here."""
        if not hasattr(session, "master_fd"):
            return  # a program on pipes: nothing to hold across a restart
        buffer = session.buffer
        session.ring = OutputRing.create(buffer.max_bytes + buffer.slack)
        self.track(session_id, session, StateFile())
        self.link.send({"op": "hold", "id": session_id, "pid": session.pid},
                       [session.master_fd, session.ring.fd, session.pidfd, self._states[session_id].fd])

    def track(self, session_id: str, session: PtySession, state: StateFile) -> None:
        """Keeps the terminal's state file current from now on (a terminal held, or taken back)."""
        self._states[session_id], self._sessions[session_id] = state, session
        commands = getattr(session, "commands", None)
        if commands is not None:
            commands.on_change = lambda: self.save_soon(session_id)
        self.save(session_id)

    def save_soon(self, session_id: str) -> None:
        """Rewrites the state file at the loop's next turn: once, however many markers one read brought."""
        if session_id not in self._due:
            self._due.add(session_id)
            asyncio.get_running_loop().call_soon(self.save, session_id)

    def save(self, session_id: str) -> None:
        self._due.discard(session_id)
        state, session = self._states.get(session_id), self._sessions.get(session_id)
        if state is not None and session is not None:
            state.write(terminal_state(session))

    def save_all(self) -> None:
        """Writes every state file, output held back stored first (a hand-over: keeper_protocol.HANDOVER_SIGNAL)."""
        for session_id, session in list(self._sessions.items()):
            settle = getattr(session, "settle", None)
            if settle is not None:
                settle()
            self.save(session_id)

    def ended(self, session_id: str, returncode: int) -> None:
        if session_id in self._states:
            self.save(session_id)
            self.link.send({"op": "ended", "id": session_id, "returncode": returncode})

    def release(self, session_id: str) -> None:
        state, session = self._states.pop(session_id, None), self._sessions.pop(session_id, None)
        if state is None:
            return
        self.link.send({"op": "release", "id": session_id})
        state.close()
        if session is not None and session.ring is not None:
            session.ring.close()
            session.ring = None
