"""One program running on pipes instead of a PTY, so that its stdout and stderr stay apart."""

from __future__ import annotations

import os
import subprocess
from typing import BinaryIO

from .buffer import OutputBuffer
from .child import ChildProcess, SpawnSpec
from .errors import SpawnFailed, TerminalError, WriteFailed

READS_PER_WAKEUP = 16  # a pipe read returns up to 64 KiB; batching saves loop iterations
INPUT_CLOSED = "input was closed"


class InputClosed(TerminalError):
    """The client already ended the program's input; sending more is the client's mistake."""

    code = "INVALID_INPUT"


class NoTerminal(TerminalError):
    """The program runs without a PTY, so it has no window size or screen."""

    code = "INVALID_INPUT"


class PipeSession(ChildProcess):
    """A program on three pipes, its output buffers and its input queue.

    Same interface as PtySession. `buffer` holds stdout and stderr interleaved
    in the order they were read; `stdout` and `stderr` hold each stream alone.
    """

    cols: int | None = None  # no terminal, no window size
    rows: int | None = None

    def __init__(self, spec: SpawnSpec, *, buffer: OutputBuffer, **kwargs) -> None:
        super().__init__(spec, buffer=buffer, **kwargs)
        self.stdout = OutputBuffer(max_lines=buffer.max_lines, max_bytes=buffer.max_bytes)
        self.stderr = OutputBuffer(max_lines=buffer.max_lines, max_bytes=buffer.max_bytes)
        self._input_end: str | None = None  # why no more input is taken, once that is so
        self._stdin: BinaryIO | None = None
        self._outputs: dict[str, BinaryIO] = {}  # the output pipes not at end of file yet

    def buffer_for(self, stream: str) -> OutputBuffer:
        """The buffer of "stdout", "stderr" or "both" (the interleaved one); ValueError for anything else."""
        buffers = {"stdout": self.stdout, "stderr": self.stderr, "both": self.buffer}
        if stream not in buffers:
            raise ValueError(f"unknown stream {stream!r}")
        return buffers[stream]

    # Starting

    def spawn(self) -> None:
        try:
            self._process = subprocess.Popen(
                [*self.spec.launch, *self.spec.argv],
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
        self._spawned()

    def _watch_output(self) -> None:
        for name, pipe in self._outputs.items():
            self._loop.add_reader(pipe.fileno(), self._on_readable, name)

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
        self._keep(data)
        self.buffer_for(name).append(data)
        self._output_arrived()

    def _on_eof(self, name: str) -> None:
        self._close_output(name)
        if not self._outputs and self.exit_status is not None:
            self._report_exit()

    def _close_output(self, name: str) -> None:
        pipe = self._outputs.pop(name)
        assert self._loop is not None
        self._loop.remove_reader(pipe.fileno())
        pipe.close()

    def _output_done(self) -> bool:
        return not self._outputs

    # Input

    def _check_input_open(self) -> None:
        if self._input_end == INPUT_CLOSED:
            raise InputClosed("input was closed (eof): the program takes no more input")
        if self._input_end is not None:
            raise WriteFailed(self._input_end)

    def close_input(self) -> None:
        """Ends the program's input once everything queued is written; later writes raise WriteFailed.

        Calling it again, or after the program has ended, does nothing more.
        """
        if self._input_end is None:
            self._input_end = INPUT_CLOSED
        if not self._input.data:
            self._close_stdin()

    def _input_fd(self) -> int | None:
        return self._stdin.fileno() if self._stdin is not None else None

    def _input_failed(self, error: OSError) -> None:
        # EPIPE: the program closed its stdin or ended.
        self._input_end = self._input_end or f"the program no longer reads its input: {error.strerror}"
        self._close_stdin()

    def _input_drained(self) -> None:
        if self._input_end is not None:
            self._close_stdin()  # close_input() came while input was still queued

    def _close_stdin(self) -> None:
        if self._stdin is None:
            return
        if self._loop is not None:
            self._loop.remove_writer(self._stdin.fileno())
        self._stdin.close()
        self._stdin = None

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
        return self._signal_group(self.pid, signum)

    def resize(self, cols: int, rows: int) -> None:
        raise NoTerminal("a terminal without a PTY has no size")

    def screen(self) -> dict:
        raise NoTerminal("a terminal without a PTY has no screen")

    async def render_screen(self) -> dict:
        return self.screen()

    # Stopping

    def close(self) -> None:
        """Frees the pipes; call once the program has ended."""
        self._input_end = self._input_end or "the terminal was closed"
        for name in list(self._outputs):
            self._close_output(name)
        self._close_stdin()
        self._reap()
