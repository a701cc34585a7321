"""One shell or program running on a pseudo-terminal, read and written by the event loop."""

from __future__ import annotations

import asyncio
import errno
import os
import re
import signal
import subprocess
import termios
from collections.abc import Callable
from typing import TYPE_CHECKING

from . import echo, processes, signals
from .child import EXIT_DRAIN_SECONDS, MARKER_VARIABLE, MEMBER_POLL_SECONDS, ChildProcess, ExitStatus, SpawnSpec
from .errors import LineTooLong, SessionInactive, SpawnFailed
from .flow_limits import (ECHO_BYTES_PER_INPUT_BYTE, ECHO_PATIENCE_SECONDS, ECHO_WINDOW_BYTES, FULL_READ,
                          READS_PER_WAKEUP, UNREAD_FLOOD_BYTES, UNREAD_REST_SECONDS)
from .launch import spawn_argv
from .serial_steps import SerialSteps, call_on_loop
from .tty_limits import MAX_CANONICAL_LINE, check_window_size, longest_line, set_window_size

if TYPE_CHECKING:
    from .screen import ScreenMirror

__all__ = ["EXIT_DRAIN_SECONDS", "MARKER_VARIABLE", "MEMBER_POLL_SECONDS", "ExitStatus", "PtySession", "SpawnSpec"]

# At most this much output is replayed to rebuild the screen (pyte takes about 0.1 s for it).
SCREEN_REPLAY_BYTES = 64 * 1024
QUERIES = re.compile(rb"\x1b\[(?:[56]n|0?c)")  # cursor position, device status, device attributes


class PtySession(ChildProcess):
    """A process on a PTY: its output buffer, its screen, its foreground.

    Reads happen on the event loop when the PTY is readable.
    """

    def __init__(self, spec: SpawnSpec, **kwargs) -> None:
        super().__init__(spec, **kwargs)
        self._fd = -1
        self._eof = False
        self.cols, self.rows = spec.cols, spec.rows
        # The mirror is only touched by steps on the screen threads (serial_steps.py); the event loop, which owns the
        # buffer, hands each step the output the mirror has not seen yet. None: no mirror made yet.
        self._screen: ScreenMirror | None = None
        self._screen_fed: int | None = None  # absolute byte up to which output was handed to the mirror
        self._screen_steps = SerialSteps()
        self._query_tail = b""
        self.emulator_attached = False  # a live client's terminal emulator answers queries itself
        self.unread: Callable[[], bool] = lambda: False  # whether nobody reads it now (the worker knows)
        self._resting: asyncio.TimerHandle | None = None
        self._unread_bytes = 0  # read since the last rest while nobody reads the terminal
        self._echo_owed = 0  # bytes read at the full rate for the echo of input written (see ECHO_BYTES_PER_INPUT_BYTE)
        self._echo_unread = 0  # input written and not yet matched by as many bytes read: its echo, at least
        self._echo_overdue: asyncio.TimerHandle | None = None  # input held back until then at the latest
        self.echoes = echo.EchoLedger(self._clock)  # the newest inputs, to tell their echo from what programs print

    # Starting

    def spawn(self, *, handover: int | None = None) -> None:
        """handover: the read end of a pipe the process finds as fd HANDOVER_FD, open
        in no other process of its account (the way a shell gets its secret)."""
        check_window_size(self.spec.cols, self.spec.rows)
        master, slave = os.openpty()
        try:
            set_window_size(master, self.spec.cols, self.spec.rows)
            argv, new_session = spawn_argv(self.spec, handover is not None, os.ttyname(slave))
            self._process = subprocess.Popen(
                argv,
                start_new_session=new_session,
                stdin=slave,
                stdout=slave,
                stderr=slave if handover is None else handover,
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
        self._spawned()

    def _watch_output(self) -> None:
        self._loop.add_reader(self._fd, self._on_readable)

    @property
    def master_fd(self) -> int:
        """The PTY's master (-1 once freed): what a keeper holds a copy of (keeping.py)."""
        return self._fd

    # Input

    def _check_lines(self, data: bytes) -> None:
        # Only when the program reads whole lines (ICANON): a line editor such as
        # bash's readline, or a full-screen program, reads key by key and takes any length.
        if len(data) <= MAX_CANONICAL_LINE or not self.canonical():
            return
        longest = longest_line(data)
        if longest > MAX_CANONICAL_LINE:
            raise LineTooLong(
                f"a line of {longest} bytes is longer than the {MAX_CANONICAL_LINE} bytes the terminal passes "
                "to a program reading whole lines; it would arrive cut short, so nothing was sent. "
                "Split it, or write it to a file and pass the file",
                line_bytes=longest, limit_bytes=MAX_CANONICAL_LINE,
            )

    def canonical(self) -> bool:
        """Whether the program reads whole lines now (ICANON), so lines are cut at MAX_CANONICAL_LINE."""
        if self._fd < 0:
            return False
        try:
            return bool(termios.tcgetattr(self._fd)[3] & termios.ICANON)
        except termios.error:
            return False

    # Output

    def _on_readable(self) -> None:
        chunks = []
        at_eof = False
        unread = self._echo_owed <= 0 and self.unread()
        for _ in range(1 if unread else READS_PER_WAKEUP):
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
            if len(chunk) < FULL_READ:
                break
        if chunks:
            self.last_activity = self._clock()
            self.buffer.mark_time(self.last_activity)
            data = b"".join(chunks) if len(chunks) > 1 else chunks[0]
            self._ingest(data)
            self._output_arrived()
            self._unread_bytes = self._unread_bytes + len(data) if unread else 0
            self._echo_owed = max(0, self._echo_owed - len(data))
            self._echo_unread = max(0, self._echo_unread - len(data))
            if self._echo_overdue is not None and self._echo_unread <= ECHO_WINDOW_BYTES // 2:
                self._echo_arrived()
            if self._unread_bytes >= UNREAD_FLOOD_BYTES and not at_eof:
                self._unread_bytes = 0
                self._rest(UNREAD_REST_SECONDS)
        if at_eof:
            self._on_eof()  # after storing what came with it, so an exit report sees all output

    def _rest(self, seconds: float) -> None:
        """Stops reading for a while; the PTY holds what comes meanwhile, then the program waits."""
        if self._fd >= 0 and self._loop is not None and self._resting is None:
            self._loop.remove_reader(self._fd)
            self._resting = self._loop.call_later(seconds, self._wake)

    def type_input(self, data: bytes) -> None:
        mode, stale_prompts = self._echo_mode()  # where the echo comes from is decided when the input arrives
        super().type_input(data)
        self.echoes.typed(self.last_input_byte, data, mode, stale_prompts)

    def _echo_mode(self) -> tuple[str, int]:
        """(echo.py's mode for input written now, prompts due before it is read)."""
        return self._terminal_echo_mode(), 0

    def _terminal_echo_mode(self) -> str:
        try:
            flags = termios.tcgetattr(self._fd)[3]
        except termios.error:
            return echo.NONE
        if flags & termios.ECHO:
            return echo.KERNEL
        return echo.NONE if flags & termios.ICANON else echo.EDITOR

    def answer_marks(self, offset: int) -> list[tuple[int, str]]:
        """The shell's command and prompt markers from offset on (a ShellSession's); none here."""
        return []

    def echo_ranges(self, end: int | None = None) -> tuple[list[tuple[int, int]], int]:
        """(the ranges of output that echo typed input; where the output stops being known for sure not to)."""
        end = self.buffer.end if end is None else end
        return self.echoes.echo(lambda start, count: self.buffer.read_bytes(start, count, complete=True)[0],
                                end, self.answer_marks)

    def _input_written(self, count: int) -> None:
        self._echo_owed += ECHO_BYTES_PER_INPUT_BYTE * count
        self._echo_unread += count
        if self._resting is not None:  # the echo must find room: read now
            self._resting.cancel()
            self._wake()

    def _input_room(self, pending: int) -> int:
        room = max(0, ECHO_WINDOW_BYTES - self._echo_unread)
        return pending if pending <= room or not self._echoes() else room

    def _echoes(self) -> bool:
        try:
            return bool(termios.tcgetattr(self._fd)[3] & termios.ECHO)
        except termios.error:
            return False

    def _input_held_back(self) -> None:
        if self._echo_overdue is None and self._loop is not None:
            self._echo_overdue = self._loop.call_later(ECHO_PATIENCE_SECONDS, self._echo_arrived, True)

    def _echo_arrived(self, overdue: bool = False) -> None:
        """Enough of the echo owed has been read (or it is overdue, and forgiven): the held-back input goes on."""
        if self._echo_overdue is not None:
            self._echo_overdue.cancel()
            self._echo_overdue = None
        if overdue:
            self._echo_unread = 0
        if self._fd >= 0 and self.is_alive:
            self._flush_queued_input()

    def _wake(self) -> None:
        self._resting = None
        if self._fd >= 0 and not self._eof and self._loop is not None:
            self._loop.add_reader(self._fd, self._on_readable)

    def _ingest(self, data: bytes) -> None:
        """Takes output in; subclasses look into it first."""
        self._keep(data)
        self._answer_queries(data)

    def _answer_queries(self, data: bytes) -> None:
        # A program asking where the cursor is (ESC[6n) waits for the answer; with
        # no terminal emulator attached, the service's own mirror gives it. The
        # previous read's last bytes are searched too: a query can be cut in two.
        seam, self._query_tail = self._query_tail + data[:3], data[-3:]
        if (QUERIES.search(data) or QUERIES.search(seam)) and self.is_alive and not self.emulator_attached:
            answered = self._on_screen(lambda mirror, output: mirror.feed_and_answer(output))
            loop = self._loop
            answered.add_done_callback(lambda done: call_on_loop(loop, self._send_replies, done))

    def _send_replies(self, answered) -> None:
        replies = answered.result() if answered.exception() is None else b""
        if replies and self.is_alive and self._fd >= 0:
            self.write(replies)

    def screen(self) -> dict:
        """The visible screen as a terminal emulator renders the output so far (waits for the screen thread)."""
        return self._on_screen(_snapshot).result()

    async def render_screen(self) -> dict:
        """screen(), with the event loop free meanwhile: a 1000 x 500 screen takes about 150 ms to render."""
        return await asyncio.wrap_future(self._on_screen(_snapshot))

    def _on_screen(self, then):
        """Runs then(mirror, output it has not seen) on the screen threads, after every step asked before it.

        Called on the event loop, which alone reads the buffer and advances _screen_fed; the mirror itself is made,
        fed and read only by the steps."""
        buffer = self.buffer
        fed = self._screen_fed
        rebuild = fed is None or fed < buffer.oldest_byte or buffer.end - fed > SCREEN_REPLAY_BYTES
        if rebuild:
            # Full-screen programs redraw often, so the newest output rebuilds the screen well enough.
            fed = max(buffer.oldest_byte, buffer.end - SCREEN_REPLAY_BYTES)
        data, _, _ = buffer.read_bytes(fed, buffer.end - fed, complete=True)
        self._screen_fed = buffer.end
        size = (self.cols, self.rows)

        def step():
            if rebuild:
                # pyte (with wcwidth's tables) is imported with the first screen mirror, not with the service:
                # 1.6 MB of every server's memory at start (bench figure 6), for a mirror most terminals never need.
                from .screen import ScreenMirror

                self._screen = ScreenMirror(*size)
            return then(self._screen, data)

        return self._screen_steps.submit(step)

    def _on_eof(self) -> None:
        self._eof = True
        self._stop_reading()
        if self.exit_status is not None:
            self._report_exit()

    def _output_done(self) -> bool:
        return self._eof

    def _stop_reading(self) -> None:
        if self._resting is not None:
            self._resting.cancel()
            self._resting = None
        if self._echo_overdue is not None:
            self._echo_overdue.cancel()
            self._echo_overdue = None
        if self._fd >= 0 and self._loop is not None:
            self._loop.remove_reader(self._fd)
            self._loop.remove_writer(self._fd)

    # Input

    def _input_fd(self) -> int | None:
        return self._fd if self._fd >= 0 else None

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
        """Sends signum to the foreground process group, as a key like Ctrl-C does; returns the group.

        Before the terminal's session exists the PTY has no foreground group (0): the signal then goes to the
        first process, the only one the terminal has, and its pid is returned.
        """
        group = self.foreground_group()
        if group is None:
            raise SessionInactive("the terminal's process has ended")
        if group > 0 and group != self.pid and self.has_session and not processes.group_members(group):
            # The foreground job has just ended and the shell has not taken the terminal back yet (a loop between
            # two commands): the signal goes to the shell, as the key pressed a moment later would, instead of
            # to a group that no longer exists, where it was lost and the loop ran on.
            group = self.pid
        return self._signal_group(group, signum)

    def resize(self, cols: int, rows: int) -> None:
        if not self.is_alive:
            raise SessionInactive("the terminal's process has ended")
        check_window_size(cols, rows)
        set_window_size(self._fd, cols, rows)
        self.cols, self.rows = cols, rows
        if self._screen_fed is not None:
            self._on_screen(lambda mirror, output: (mirror.feed(output), mirror.resize(cols, rows)))

    # Stopping

    def _after_signal(self, signum: int) -> None:
        # Interactive shells ignore SIGTERM: waiting for it to work is pointless, so the
        # terminal is hung up instead, as closing a terminal window does.
        if self.is_alive and processes.ignores_signal(self.pid, signum):
            signals.signal_first_process(self._pidfd, signal.SIGHUP)

    def close(self) -> None:
        """Frees the PTY; call once the process has ended."""
        self._stop_reading()
        self._reap()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def _snapshot(mirror: ScreenMirror, output: bytes) -> dict:
    mirror.feed(output)
    return mirror.snapshot()
