"""One shell or program running on a pseudo-terminal, read and written by the event loop."""

from __future__ import annotations

import asyncio
import errno
import fcntl
import os
import re
import shutil
import signal
import struct
import subprocess
import termios
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from . import processes
from .buffer import OutputBuffer
from .errors import KillFailed, SessionInactive, SpawnFailed, WriteFailed
from .screen import ScreenMirror

# util-linux setsid(1) makes the child a session leader and takes the PTY as its
# controlling terminal (TIOCSCTTY), so Ctrl-C and job control work. Spawning
# through subprocess (vfork) instead of ptyprocess (fork) keeps spawning fast
# however large the worker grows: 0.3 ms against 8 ms from a 150 MB process.
SETSID = shutil.which("setsid") or "/usr/bin/setsid"

READS_PER_WAKEUP = 16  # a PTY read returns about 4 KiB; batching saves loop iterations
EXIT_DRAIN_SECONDS = 0.25  # how long output may trail the process's exit before exit is reported
MEMBER_POLL_SECONDS = 0.02
MARKER_VARIABLE = "TERMINALS_TERMINAL_ID"  # set in every terminal's environment; marks what it started
# At most this much output is replayed to rebuild the screen (pyte takes about 0.1 s for it).
SCREEN_REPLAY_BYTES = 64 * 1024
QUERIES = re.compile(rb"\x1b\[(?:[56]n|0?c)")  # cursor position, device status, device attributes


@dataclass(frozen=True)
class SpawnSpec:
    """What to run: argv[0] is looked up on the PATH of env."""

    argv: list[str]
    cwd: str
    env: dict[str, str]
    cols: int = 80
    rows: int = 24


@dataclass(frozen=True)
class ExitStatus:
    exit_code: int | None
    signal: str | None

    @classmethod
    def from_returncode(cls, returncode: int) -> ExitStatus:
        if returncode < 0:
            return cls(exit_code=None, signal=processes.signal_name(-returncode))
        return cls(exit_code=returncode, signal=None)


@dataclass
class _InputQueue:
    data: bytearray = field(default_factory=bytearray)
    limit: int = 1 << 20


class PtySession:
    """A process on a PTY, its output buffer and its input queue.

    Reads happen on the event loop when the PTY is readable; writes never
    block: what the terminal cannot take yet waits in a bounded queue.
    """

    def __init__(
        self,
        spec: SpawnSpec,
        *,
        buffer: OutputBuffer,
        max_pending_input: int = 1 << 20,
        clock: Callable[[], float] = time.time,
        on_exit: Callable[[PtySession], None] | None = None,
    ) -> None:
        self.spec = spec
        self.buffer = buffer
        self._clock = clock
        self._on_exit = on_exit
        self._input = _InputQueue(limit=max_pending_input)
        self._process: subprocess.Popen[bytes] | None = None
        self._fd = -1
        self._pidfd = -1
        self._loop: asyncio.AbstractEventLoop | None = None
        self._eof = False
        self._exit_reported = False
        self._exited = asyncio.Event()
        self._output_seen: asyncio.Event | None = None
        self.exit_status: ExitStatus | None = None
        self.cols, self.rows = spec.cols, spec.rows
        marker = spec.env.get(MARKER_VARIABLE)
        self._marker = f"{MARKER_VARIABLE}={marker}".encode() if marker else None
        self._screen: ScreenMirror | None = None
        self._screen_fed = 0  # absolute byte up to which the screen mirror has seen the output
        self._query_tail = b""
        self.terminating = False  # ended on request, so its exit is the requester's to record
        self.on_output: Callable[[], None] | None = None  # told of new output while clients watch
        self.started_at = clock()
        self.last_activity = self.started_at

    # Starting

    def start(self) -> None:
        """Spawns the process and starts watching it; raises SpawnFailed."""
        self._loop = asyncio.get_running_loop()
        master, slave = os.openpty()
        try:
            _set_window_size(master, self.spec.cols, self.spec.rows)
            self._process = subprocess.Popen(
                [SETSID, "--ctty", *self.spec.argv],
                stdin=slave,
                stdout=slave,
                stderr=slave,
                cwd=self.spec.cwd,
                env=self.spec.env,
                close_fds=True,
                restore_signals=True,  # children must not inherit Python's ignored SIGPIPE
            )
        except OSError as error:
            os.close(master)
            raise SpawnFailed(f"cannot start {self.spec.argv[0]}: {error.strerror}") from error
        finally:
            os.close(slave)
        self._fd = master
        os.set_blocking(master, False)
        self._pidfd = os.pidfd_open(self._process.pid)
        self._loop.add_reader(self._fd, self._on_readable)
        self._loop.add_reader(self._pidfd, self._on_process_exit)

    @property
    def pid(self) -> int:
        assert self._process is not None
        return self._process.pid

    @property
    def is_alive(self) -> bool:
        return self.exit_status is None

    @property
    def finished(self) -> bool:
        """The process has ended and its last output has been read."""
        return self._exited.is_set()

    # Output

    def _on_readable(self) -> None:
        chunks = []
        at_eof = False
        for _ in range(READS_PER_WAKEUP):
            try:
                chunk = os.read(self._fd, 65536)
            except BlockingIOError:
                break
            except OSError as error:  # EIO: every holder of the PTY's other side has closed it
                if error.errno != errno.EIO:
                    raise
                chunk = b""
            if not chunk:
                at_eof = True
                break
            chunks.append(chunk)
        if chunks:
            self.last_activity = self._clock()
            self.buffer.mark_time(self.last_activity)
            self._ingest(b"".join(chunks) if len(chunks) > 1 else chunks[0])
            if self.on_output is not None:
                self.on_output()
        if at_eof:
            self._on_eof()  # after storing what came with it, so an exit report sees all output
            if self._output_seen is not None:
                self._output_seen.set()

    def _ingest(self, data: bytes) -> None:
        """Takes output in; subclasses look into it first."""
        self.buffer.append(data)
        self._answer_queries(data)

    def _answer_queries(self, data: bytes) -> None:
        # A program asking where the cursor is (ESC[6n) waits for the answer; with
        # no terminal emulator attached, the service's own mirror gives it. The
        # previous read's last bytes are searched too: a query can be cut in two.
        seen, self._query_tail = self._query_tail + data, data[-3:]
        if QUERIES.search(seen) and self.is_alive:
            replies = self._screen_mirror(answer=True)[1]
            if replies:
                self.write(replies)

    def screen(self) -> dict:
        """The visible screen as a terminal emulator renders the output so far."""
        return self._screen_mirror()[0].snapshot()

    def _screen_mirror(self, answer: bool = False) -> tuple[ScreenMirror, bytes]:
        buffer = self.buffer
        if self._screen is None or self._screen_fed < buffer.oldest_byte or buffer.end - self._screen_fed > SCREEN_REPLAY_BYTES:
            # Full-screen programs redraw often, so the newest output rebuilds the screen well enough.
            self._screen = ScreenMirror(self.cols, self.rows)
            self._screen_fed = max(buffer.oldest_byte, buffer.end - SCREEN_REPLAY_BYTES)
        data, _, _ = buffer.read_bytes(self._screen_fed, buffer.end - self._screen_fed, complete=True)
        self._screen_fed = buffer.end
        replies = self._screen.feed_and_answer(data) if answer else (self._screen.feed(data) or b"")
        return self._screen, replies

    def _on_eof(self) -> None:
        self._eof = True
        self._stop_reading()
        if self.exit_status is not None:
            self._report_exit()

    def _stop_reading(self) -> None:
        if self._fd >= 0 and self._loop is not None:
            self._loop.remove_reader(self._fd)
            self._loop.remove_writer(self._fd)

    async def wait_for_output(self, timeout: float) -> bool:
        """Waits until new output arrives; returns whether it did."""
        self._output_seen = self._output_seen or asyncio.Event()
        self._output_seen.clear()
        try:
            await asyncio.wait_for(self._output_seen.wait(), timeout)
        except TimeoutError:
            return False
        return True

    # Exit

    def _on_process_exit(self) -> None:
        assert self._loop is not None and self._process is not None
        returncode = self._process.poll()
        if returncode is None:
            return
        self._loop.remove_reader(self._pidfd)
        os.close(self._pidfd)
        self._pidfd = -1
        self.exit_status = ExitStatus.from_returncode(returncode)
        self.last_activity = self._clock()
        if self._eof:
            self._report_exit()
        else:
            # Output written just before the exit may still be on its way through the PTY.
            self._loop.call_later(EXIT_DRAIN_SECONDS, self._report_exit)

    def _report_exit(self) -> None:
        if self._exit_reported:
            return
        self._exit_reported = True
        self._exited.set()
        if self._on_exit is not None:
            self._on_exit(self)

    async def wait_for_exit(self, timeout: float | None = None) -> ExitStatus | None:
        """Returns the exit status once the process has ended and its output is read, or None on timeout."""
        if self._exited.is_set():
            return self.exit_status  # at once, even with a zero timeout
        try:
            await asyncio.wait_for(self._exited.wait(), timeout)
        except TimeoutError:
            return None
        return self.exit_status

    # Input

    def write(self, data: bytes) -> None:
        """Queues data for the terminal; raises SessionInactive or WriteFailed, never blocks."""
        if not self.is_alive:
            raise SessionInactive("the terminal's process has ended")
        queue = self._input
        if len(queue.data) + len(data) > queue.limit:
            raise WriteFailed(
                "the terminal is not reading its input; the input queue is full",
                pending_bytes=len(queue.data),
                limit_bytes=queue.limit,
            )
        queue.data += data
        self.last_activity = self._clock()
        self._flush_input()

    def _flush_input(self) -> None:
        assert self._loop is not None
        queue = self._input.data
        try:
            written = os.write(self._fd, queue) if queue else 0
        except BlockingIOError:
            written = 0
        except OSError as error:
            queue.clear()
            self._loop.remove_writer(self._fd)
            raise WriteFailed(f"writing to the terminal failed: {error.strerror}") from error
        del queue[:written]
        if queue:
            self._loop.add_writer(self._fd, self._flush_queued_input)
        else:
            self._loop.remove_writer(self._fd)

    def _flush_queued_input(self) -> None:
        try:
            self._flush_input()
        except WriteFailed:
            pass  # the process is gone; its exit is reported on its own

    @property
    def pending_input(self) -> int:
        return len(self._input.data)

    # The foreground

    def foreground_group(self) -> int | None:
        """The process group the terminal's keyboard belongs to, or None once the PTY is gone."""
        try:
            return os.tcgetpgrp(self._fd)
        except OSError:
            return None

    def foreground_process(self) -> dict | None:
        group = self.foreground_group()
        if group is None or not self.is_alive:
            return None
        return {"pid": group, "command": processes.command_line(group)}

    @property
    def busy(self) -> bool:
        """Whether a program other than the first process holds the foreground (a shell is not at its prompt)."""
        group = self.foreground_group()
        if not self.is_alive or group in (None, self.pid):
            return False
        # A foreground group that just ended leaves 0 or a dead id until the shell takes the terminal back.
        return group > 0 and bool(processes.group_members(group))

    def waiting_for_input(self) -> bool:
        """Whether a foreground process is blocked reading the terminal."""
        group = self.foreground_group()
        if group is None or not self.is_alive:
            return False
        return any(processes.is_reading_terminal(pid) for pid in processes.group_members(group))

    def signal_foreground(self, signum: int) -> int:
        """Sends signum to the foreground process group, as a key like Ctrl-C does; returns the group."""
        group = self.foreground_group()
        if group is None or not self.is_alive:
            raise SessionInactive("the terminal's process has ended")
        try:
            os.killpg(group, signum)
        except ProcessLookupError:
            pass  # the group ended meanwhile
        except PermissionError as error:
            raise KillFailed(f"cannot signal the foreground processes: {error}") from error
        return group

    def resize(self, cols: int, rows: int) -> None:
        if not self.is_alive:
            raise SessionInactive("the terminal's process has ended")
        _set_window_size(self._fd, cols, rows)
        self.cols, self.rows = cols, rows
        if self._screen is not None:
            self._screen_mirror()
            self._screen.resize(cols, rows)

    # Stopping

    async def terminate(self, signum: int = signal.SIGTERM, grace: float = 3.0) -> ExitStatus | None:
        """Ends every process of the terminal's session; returns the exit status of its first process.

        signum goes to each process of the session; a first process that
        ignores it (interactive shells ignore SIGTERM) is hung up instead, as
        closing a terminal window does. Whatever survives grace seconds is
        killed with SIGKILL.
        """
        self.terminating = True
        members = self.members()
        try:
            processes.signal_processes(members, signum)
            if self.is_alive and processes.ignores_signal(self.pid, signum):
                processes.signal_processes([self.pid], signal.SIGHUP)
        except PermissionError as error:
            raise KillFailed(f"cannot signal the terminal's processes: {error}") from error
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and (self.is_alive or self.members()):
            await asyncio.sleep(MEMBER_POLL_SECONDS)
        survivors = self.members()
        if survivors or self.is_alive:
            processes.signal_processes(survivors + [self.pid], signal.SIGKILL)
        return await self.wait_for_exit(timeout=5.0)

    def members(self) -> list[int]:
        """The live processes this terminal started, wherever they went."""
        return processes.terminal_members(self.pid, self._marker)

    def close(self) -> None:
        """Frees the PTY; call once the process has ended."""
        self._stop_reading()
        if self._pidfd >= 0 and self._loop is not None:
            self._loop.remove_reader(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = -1
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            self._process.wait()


def _set_window_size(fd: int, cols: int, rows: int) -> None:
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
