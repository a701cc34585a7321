"""One program running on pipes instead of a PTY, so that its stdout and stderr stay apart."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from collections.abc import Callable
from typing import BinaryIO

from . import processes
from .buffer import OutputBuffer
from .errors import KillFailed, SessionInactive, SpawnFailed, TerminalError, WriteFailed
from .pty import EXIT_DRAIN_SECONDS, MARKER_VARIABLE, MEMBER_POLL_SECONDS, ExitStatus, SpawnSpec, _InputQueue

READS_PER_WAKEUP = 16  # a pipe read returns up to 64 KiB; batching saves loop iterations
INPUT_CLOSED = "input was closed"


class InputClosed(TerminalError):
    """The client already ended the program's input; sending more is the client's mistake."""

    code = "INVALID_INPUT"


class NoTerminal(TerminalError):
    """The program runs without a PTY, so it has no window size or screen."""

    code = "INVALID_INPUT"


class PipeSession:
    """A program on three pipes, its output buffers and its input queue.

    Same interface as PtySession. `buffer` holds stdout and stderr interleaved
    in the order they were read; `stdout` and `stderr` hold each stream alone.
    Writes never block: what the program has not read yet waits in a bounded
    queue.
    """

    cols: int | None = None  # no terminal, no window size
    rows: int | None = None

    def __init__(
        self,
        spec: SpawnSpec,
        *,
        buffer: OutputBuffer,
        max_pending_input: int = 1 << 20,
        clock: Callable[[], float] = time.time,
        on_exit: Callable[[PipeSession], None] | None = None,
    ) -> None:
        self.spec = spec
        self.buffer = buffer
        self.stdout = OutputBuffer(max_lines=buffer.max_lines, max_bytes=buffer.max_bytes)
        self.stderr = OutputBuffer(max_lines=buffer.max_lines, max_bytes=buffer.max_bytes)
        self._clock = clock
        self._on_exit = on_exit
        self._input = _InputQueue(limit=max_pending_input)
        self._input_end: str | None = None  # why no more input is taken, once that is so
        self._process: subprocess.Popen[bytes] | None = None
        self._stdin: BinaryIO | None = None
        self._outputs: dict[str, BinaryIO] = {}  # the output pipes not at end of file yet
        self._pidfd = -1
        self._loop: asyncio.AbstractEventLoop | None = None
        self._exit_reported = False
        self._exited = asyncio.Event()
        self._output_seen: asyncio.Event | None = None
        self.exit_status: ExitStatus | None = None
        self.terminating = False  # ended on request, so its exit is the requester's to record
        self.started_at = clock()
        self.last_activity = self.started_at
        marker = spec.env.get(MARKER_VARIABLE)
        self._marker = f"{MARKER_VARIABLE}={marker}".encode() if marker else None

    def buffer_for(self, stream: str) -> OutputBuffer:
        """The buffer of "stdout", "stderr" or "both" (the interleaved one); ValueError for anything else."""
        buffers = {"stdout": self.stdout, "stderr": self.stderr, "both": self.buffer}
        if stream not in buffers:
            raise ValueError(f"unknown stream {stream!r}")
        return buffers[stream]

    # Starting

    def start(self) -> None:
        """Spawns the program and starts watching it; raises SpawnFailed."""
        self._loop = asyncio.get_running_loop()
        try:
            self._process = subprocess.Popen(
                self.spec.argv,
                bufsize=0,  # raw pipes: closing one never flushes
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=self.spec.cwd,
                env=self.spec.env,
                close_fds=True,
                restore_signals=True,  # children must not inherit Python's ignored SIGPIPE
                start_new_session=True,  # its own session and group, so terminate() reaches its children
            )
        except OSError as error:
            raise SpawnFailed(f"cannot start {self.spec.argv[0]}: {error.strerror}") from error
        process = self._process
        self._stdin = process.stdin
        self._outputs = {"stdout": process.stdout, "stderr": process.stderr}
        for pipe in (process.stdin, process.stdout, process.stderr):
            os.set_blocking(pipe.fileno(), False)
        for name, pipe in self._outputs.items():
            self._loop.add_reader(pipe.fileno(), self._on_readable, name)
        self._pidfd = os.pidfd_open(process.pid)
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

    def _on_readable(self, name: str) -> None:
        fd = self._outputs[name].fileno()
        chunks, ended = [], False
        for _ in range(READS_PER_WAKEUP):
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                break
            except OSError:
                chunk = b""  # not expected from a pipe; ending the stream keeps the loop from spinning on it
            if not chunk:
                ended = True
                break
            chunks.append(chunk)
        if chunks:
            self._ingest(name, b"".join(chunks) if len(chunks) > 1 else chunks[0])
        if ended:
            self._on_eof(name)

    def _ingest(self, name: str, data: bytes) -> None:
        self.last_activity = self._clock()
        for buffer in (self.buffer, self.buffer_for(name)):
            buffer.mark_time(self.last_activity)
            buffer.append(data)
        if self._output_seen is not None:
            self._output_seen.set()

    def _on_eof(self, name: str) -> None:
        self._close_output(name)
        if not self._outputs and self.exit_status is not None:
            self._report_exit()

    def _close_output(self, name: str) -> None:
        pipe = self._outputs.pop(name)
        assert self._loop is not None
        self._loop.remove_reader(pipe.fileno())
        pipe.close()

    async def wait_for_output(self, timeout: float) -> bool:
        """Waits until new output arrives on either stream; returns whether it did."""
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
        if not self._outputs:
            self._report_exit()
        else:
            # Output may still be in the pipes, and a background child may hold them open for good.
            self._loop.call_later(EXIT_DRAIN_SECONDS, self._report_exit)

    def _report_exit(self) -> None:
        if self._exit_reported:
            return
        self._exit_reported = True
        self._exited.set()
        if self._on_exit is not None:
            self._on_exit(self)

    async def wait_for_exit(self, timeout: float | None = None) -> ExitStatus | None:
        """Returns the exit status once the program has ended and its output is read, or None on timeout."""
        if self._exited.is_set():
            return self.exit_status  # at once, even with a zero timeout
        try:
            await asyncio.wait_for(self._exited.wait(), timeout)
        except TimeoutError:
            return None
        return self.exit_status

    # Input

    def write(self, data: bytes) -> None:
        """Queues data for the program's stdin; raises SessionInactive or WriteFailed, never blocks."""
        if not self.is_alive:
            raise SessionInactive("the terminal's process has ended")
        if self._input_end == INPUT_CLOSED:
            raise InputClosed("input was closed (eof): the program takes no more input")
        if self._input_end is not None:
            raise WriteFailed(self._input_end)
        queue = self._input
        if len(queue.data) + len(data) > queue.limit:
            raise WriteFailed(
                "the program is not reading its input; the input queue is full",
                pending_bytes=len(queue.data),
                limit_bytes=queue.limit,
            )
        queue.data += data
        self.last_activity = self._clock()
        self._flush_input()

    def close_input(self) -> None:
        """Ends the program's input once everything queued is written; later writes raise WriteFailed.

        Calling it again, or after the program has ended, does nothing more.
        """
        if self._input_end is None:
            self._input_end = INPUT_CLOSED
        if not self._input.data:
            self._close_stdin()

    def _flush_input(self) -> None:
        assert self._loop is not None
        queue = self._input.data
        if self._stdin is None:
            return
        fd = self._stdin.fileno()
        try:
            written = os.write(fd, queue) if queue else 0
        except BlockingIOError:
            written = 0
        except OSError as error:  # EPIPE: the program closed its stdin or ended
            queue.clear()
            self._input_end = self._input_end or f"the program no longer reads its input: {error.strerror}"
            self._close_stdin()
            raise WriteFailed(f"writing to the program failed: {error.strerror}") from error
        del queue[:written]
        if queue:
            self._loop.add_writer(fd, self._flush_queued_input)
        else:
            self._loop.remove_writer(fd)
            if self._input_end is not None:
                self._close_stdin()  # close_input() came while input was still queued

    def _flush_queued_input(self) -> None:
        try:
            self._flush_input()
        except WriteFailed:
            pass  # the program stopped reading; the next write() reports it

    def _close_stdin(self) -> None:
        if self._stdin is None:
            return
        if self._loop is not None:
            self._loop.remove_writer(self._stdin.fileno())
        self._stdin.close()
        self._stdin = None

    @property
    def pending_input(self) -> int:
        return len(self._input.data)

    # No terminal: no foreground, no size, no screen

    def foreground_process(self) -> dict | None:
        return None

    @property
    def busy(self) -> bool:
        return False

    def waiting_for_input(self) -> bool:
        return False

    def signal_foreground(self, signum: int) -> int:
        """Sends signum to the program's process group, which it leads; returns the group."""
        if not self.is_alive:
            raise SessionInactive("the terminal's process has ended")
        try:
            os.killpg(self.pid, signum)
        except ProcessLookupError:
            pass  # the group ended meanwhile
        except PermissionError as error:
            raise KillFailed(f"cannot signal the program's processes: {error}") from error
        return self.pid

    def resize(self, cols: int, rows: int) -> None:
        raise NoTerminal("a terminal without a PTY has no size")

    def screen(self) -> dict:
        raise NoTerminal("a terminal without a PTY has no screen")

    # Stopping

    async def terminate(self, signum: int = signal.SIGTERM, grace: float = 3.0) -> ExitStatus | None:
        """Ends every process of the program's session; returns the exit status of the program.

        signum goes to each process of the session; whatever survives grace
        seconds is killed with SIGKILL.
        """
        self.terminating = True
        try:
            processes.signal_processes(self.members(), signum)
        except PermissionError as error:
            raise KillFailed(f"cannot signal the program's processes: {error}") from error
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and (self.is_alive or self.members()):
            await asyncio.sleep(MEMBER_POLL_SECONDS)
        processes.signal_processes(self.members(), signal.SIGKILL)
        return await self.wait_for_exit(timeout=5.0)

    def members(self) -> list[int]:
        """The live processes this program started, wherever they went."""
        return processes.terminal_members(self.pid, self._marker)

    def close(self) -> None:
        """Frees the pipes; call once the program has ended."""
        self._input_end = self._input_end or "the terminal was closed"
        for name in list(self._outputs):
            self._close_output(name)
        self._close_stdin()
        if self._pidfd >= 0 and self._loop is not None:
            self._loop.remove_reader(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = -1
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            self._process.wait()
