"""A terminal carried from one worker process to the next: what is saved while it runs, and how it is taken back.

While a keeper holds a terminal (keeper.py), its worker keeps three things in memory the keeper holds too: the PTY
master, the output ring (output_ring.py: every byte a client could read) and a state file (a memfd holding this
module's JSON: what the terminal runs, its size, its commands and their exit codes, rewritten when they change).
adopt() rebuilds a hosted terminal from them in the next worker: the same process (its pidfd), the same byte
offsets and line numbers, the same commands; output the program printed meanwhile is read from the PTY as usual.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

from .asciicast import Recording
from .buffer import OutputBuffer
from .output_ring import OutputRing
from .pty import PtySession, SpawnSpec
from .shell import ShellSession

STATE_VERSION = 1
KINDS = {"pty": PtySession, "shell": ShellSession}
REQUIRED = {"pty": ("argv", "cwd", "cols", "rows", "startedAt", "lastActivity", "lastInputByte")}
REQUIRED["shell"] = (*REQUIRED["pty"], "commands", "marksCommands")
RECORDING_FIELDS = ("path", "cols", "rows", "started", "max_bytes", "record_input", "timestamp", "written", "capped")


class AdoptionFailed(RuntimeError):
    """A held terminal this code cannot take back (a state of another version, a ring it cannot read)."""


@dataclass
class HeldTerminal:
    """A terminal as the keeper hands it over."""

    id: str
    pid: int
    returncode: int | None
    master: int
    ring: int
    pidfd: int
    state: int

    def close(self) -> None:
        for fd in (self.master, self.ring, self.pidfd, self.state):
            os.close(fd)


class AdoptedProcess:
    """Stands in for the subprocess.Popen of a process this worker did not start: not its child, so its exit
    status comes from the keeper, which reaps it (ChildProcess.reaped), not from wait()."""

    reaped_elsewhere = True

    def __init__(self, pid: int, args: list[str], returncode: int | None) -> None:
        self.pid, self.args, self.returncode = pid, args, returncode

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int | None:
        return self.returncode  # the keeper reaps it; nothing to wait for here


class StateFile:
    """A terminal's saved state, in a memfd the keeper holds."""

    def __init__(self, fd: int | None = None) -> None:
        self.fd = os.memfd_create("terminal-state", os.MFD_CLOEXEC) if fd is None else fd

    def write(self, state: dict) -> None:
        data = json.dumps(state, separators=(",", ":")).encode()
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, data, 0)

    def read(self) -> dict:
        size = os.fstat(self.fd).st_size
        return json.loads(os.pread(self.fd, size, 0)) if size else {}

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def terminal_state(session: PtySession) -> dict:
    """What the next worker needs to go on with session (not its output: that is in the ring)."""
    state = {"version": STATE_VERSION, "kind": "shell" if isinstance(session, ShellSession) else "pty",
             "argv": list(session.spec.argv), "cwd": session.spec.cwd, "cols": session.cols, "rows": session.rows,
             "startedAt": session.started_at, "lastActivity": session.last_activity,
             "lastInputByte": session.last_input_byte}
    if isinstance(session, ShellSession):
        state["commands"] = session.commands.state()
        state["marksCommands"] = session._marks_commands
    recording = session.recording
    if recording is not None and not recording.finished:
        state["recording"] = {name: getattr(recording, name) for name in RECORDING_FIELDS}
    return state


def adopt(held: HeldTerminal, *, buffer: OutputBuffer, **options) -> PtySession:
    """A session for a held terminal, not watched yet (SessionManager.take_back watches it); options as for a
    new one (clock, max_pending_input, on_exit). The session takes the master, ring and pidfd (the state file
    stays the caller's); raises AdoptionFailed, or RingFormatError, closing none of them."""
    state = _readable_state(held)
    ring = OutputRing(held.ring)  # raises RingFormatError (a ValueError) for a ring of another version
    spec = SpawnSpec(argv=state["argv"], cwd=state["cwd"], env={}, cols=state["cols"], rows=state["rows"])
    session = KINDS[state["kind"]](spec, buffer=buffer, **options)
    buffer.resume(*ring.snapshot())
    if isinstance(session, ShellSession):
        session.commands.restore(state["commands"])
        session._marks_commands = state["marksCommands"]
    session.spec = spec  # a shell's integrated spec carries the hooks' environment: the running shell has it
    session.started_at, session.last_activity = state["startedAt"], state["lastActivity"]
    session.last_input_byte = state["lastInputByte"]
    session.ring = ring
    if "recording" in state:  # it goes on in the same file; the worker writes it (recording_files.py)
        session.recording = Recording(**state["recording"], resumed=True)
    _take_over(session, AdoptedProcess(held.pid, state["argv"], held.returncode), held.master, held.pidfd)
    return session


def check(held: HeldTerminal) -> None:
    """Raises what adopt() would for held (AdoptionFailed, RingFormatError), taking nothing: a rehearsal
    (keeping.rehearse_if_asked) runs it with the code now on disk before the running worker hands over."""
    _readable_state(held)
    ring_fd = os.dup(held.ring)  # the ring's close() closes its fd; held's stays for held.close()
    try:
        ring = OutputRing(ring_fd)
    except BaseException:
        os.close(ring_fd)
        raise
    ring.close()


def _readable_state(held: HeldTerminal) -> dict:
    state = StateFile(held.state).read()
    if state.get("version") != STATE_VERSION or state.get("kind") not in KINDS:
        raise AdoptionFailed(f"terminal {held.id}: a saved state of version {state.get('version')!r}, kind "
                             f"{state.get('kind')!r}; this worker reads version {STATE_VERSION}")
    missing = [name for name in REQUIRED[state["kind"]] if name not in state]
    if missing:
        raise AdoptionFailed(f"terminal {held.id}: its saved state has no {', '.join(missing)}")
    return state


def _take_over(session: PtySession, process: AdoptedProcess, master: int, pidfd: int) -> None:
    """What PtySession.spawn() sets, from a running process: here, so that the PTY's read path stays as it is."""
    session._process, session._pidfd, session._fd = process, pidfd, master
    os.set_blocking(master, False)
