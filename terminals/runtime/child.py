"""What a terminal on a PTY and a program on pipes share: the child process, its input queue, its exit and its end."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import replace

from . import processes, signals
from .buffer import OutputBuffer
from .errors import KillFailed, SessionInactive, WriteFailed
from .flag import Flag
from .spawn_spec import ExitStatus, InputQueue, SpawnSpec

EXIT_DRAIN_SECONDS = 0.25  # how long output may trail the exit while a process of the terminal may hold it open
EXIT_OUTPUT_WAIT_SECONDS = 5.0  # the same while none is left: the end of output is on its way, only slow
MEMBER_POLL_SECONDS = 0.02
MARKER_VARIABLE = signals.MARKER_VARIABLE  # set in every terminal's environment; marks what it started


class ChildProcess:
    """A started program, watched on the event loop: exit through a pidfd, input through a bounded queue.

    Subclasses say where output comes from and input goes to; writes never
    block: what the program has not read yet waits in the queue.
    """

    def __init__(
        self,
        spec: SpawnSpec,
        *,
        buffer: OutputBuffer,
        max_pending_input: int = 1 << 20,
        clock: Callable[[], float] = time.time,
        on_exit: Callable[[ChildProcess], None] | None = None,
    ) -> None:
        self.spec = spec
        self.buffer = buffer
        self._clock = clock
        self.last_input_byte = 0  # where the output stood when a client's input last arrived
        self._on_exit = on_exit
        self._input = InputQueue(limit=max_pending_input)
        self._process: subprocess.Popen[bytes] | None = None
        self._pidfd = -1
        self._loop: asyncio.AbstractEventLoop | None = None
        self._exit_reported = False
        self._exit_seen_at = 0.0
        self._exited = Flag()
        self._output_seen: asyncio.Event | None = None
        self.exit_status: ExitStatus | None = None
        self.terminating = False  # ended on request, so its exit is the requester's to record
        self.on_output: Callable[[], None] | None = None  # told of new output while clients watch
        self.recording = None  # a recording.Recording that gets what the buffer gets, when the terminal is recorded
        self.ring = None  # an output_ring.OutputRing that gets it first, when a keeper holds the terminal
        self.confined_members: Callable[[], list[int]] = list  # the processes in its control groups, if any
        self.confines: Callable[[int], bool] = lambda pid: False  # whether a process is in its control groups now
        self.started_at = clock()
        self.last_activity = self.started_at
        marker = spec.env.get(MARKER_VARIABLE)
        self._marker = f"{MARKER_VARIABLE}={marker}".encode() if marker else None

    @property
    def pid(self) -> int:
        assert self._process is not None
        return self._process.pid

    @property
    def pidfd(self) -> int:
        """The process's pidfd (-1 once it ended): what a keeper holds a copy of, so it names this process only."""
        return self._pidfd

    @property
    def is_alive(self) -> bool:
        return self.exit_status is None

    @property
    def finished(self) -> bool:
        """The process has ended and its last output has been read."""
        return self._exited.is_set()

    # Output

    def _keep(self, data: bytes) -> None:
        """Stores output as clients read it (shell markers already taken out), and records it when recorded. The
        ring first: what a client can read is in memory the keeper holds, should this process die right after."""
        if self.ring is not None:
            self.ring.append(data)
        self.buffer.append(data)
        if self.recording is not None:
            self.recording.output(data, self.last_activity)

    # Starting

    def start(self) -> None:
        """Spawns the program and starts watching it; raises SpawnFailed."""
        self.spawn()
        self.watch()

    def spawn(self) -> None:
        """Starts the program, from any thread: nothing here touches the event loop, so a worker can start a
        terminal between two database writes without a hop to the loop and back (bench/ANALYSIS.md). Raises
        SpawnFailed. Nothing is read, and no exit reported, until watch()."""
        raise NotImplementedError

    def watch(self) -> None:
        """On the event loop: reads the output and waits for the exit from now on (an exit that came first is
        seen at once: the pidfd was opened at the spawn)."""
        assert self._process is not None and self._pidfd >= 0
        self._loop = asyncio.get_running_loop()
        self._watch_output()
        self._loop.add_reader(self._pidfd, self._on_process_exit)

    def _watch_output(self) -> None:
        raise NotImplementedError

    def _spawned(self) -> None:
        """After the spawn, the environment and the launch steps are the child's: a terminal kept for days need not
        hold a copy of them (a few KB per terminal, bench figure 6)."""
        assert self._process is not None
        self._pidfd = os.pidfd_open(self._process.pid)
        self.spec = replace(self.spec, env={}, launch=())
        self._process.args = self.spec.argv  # not the whole launch line (Popen keeps it only to show it)

    def _output_arrived(self) -> None:
        if self._output_seen is not None:
            self._output_seen.set()
        if self.on_output is not None:
            self.on_output()

    async def wait_for_output(self, timeout: float) -> bool:
        """Waits until new output arrives; returns whether it did."""
        self._output_seen = self._output_seen or asyncio.Event()
        self._output_seen.clear()
        try:
            await asyncio.wait_for(self._output_seen.wait(), timeout)
        except TimeoutError:
            return False
        return True

    def _output_done(self) -> bool:
        """Whether every output channel has reached its end (so nothing can still arrive)."""
        raise NotImplementedError

    # Exit

    def _on_process_exit(self) -> None:
        assert self._loop is not None and self._process is not None
        returncode = self._process.poll()
        if returncode is None:
            if getattr(self._process, "reaped_elsewhere", False):  # adopted: the keeper reaps it and says how
                self._loop.remove_reader(self._pidfd)  # it ended (reaped()); the pidfd would wake the loop till then
            return
        self._close_pidfd()
        self.exit_status = ExitStatus.from_returncode(returncode)
        self.last_activity = self._clock()
        if self._output_done():
            self._report_exit()
        else:
            self._exit_seen_at = self._loop.time()
            self._loop.call_later(EXIT_DRAIN_SECONDS, self._report_exit_once_drained)

    def reaped(self, returncode: int) -> None:
        """The keeper collected the exit status of this adopted process (it is not this process's child)."""
        if self._process is not None and self._process.poll() is None:
            self._process.returncode = returncode
            if self._loop is not None and self.exit_status is None:
                self._on_process_exit()

    def _report_exit_once_drained(self) -> None:
        """Output written just before the exit may still be on its way, and a background process may hold the
        output open for good. While one of the terminal's processes lives, the exit is reported after
        EXIT_DRAIN_SECONDS. Once none does, the end of output is certain to come, only late on a busy machine:
        reported early, a command that ends its shell (`printf x; exit 3`) lost its output. So the report waits
        for it, up to EXIT_OUTPUT_WAIT_SECONDS (a process that left the terminal's session and marker can still
        hold the output; it is not waited for beyond that)."""
        assert self._loop is not None
        if self._exit_reported:
            return
        waited = self._loop.time() - self._exit_seen_at
        if waited < EXIT_OUTPUT_WAIT_SECONDS and not self.members():
            self._loop.call_later(EXIT_DRAIN_SECONDS, self._report_exit_once_drained)
            return
        self._report_exit()

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

    def _close_pidfd(self) -> None:
        if self._pidfd >= 0:
            if self._loop is not None:
                self._loop.remove_reader(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = -1

    # Input

    def write(self, data: bytes) -> None:
        """Queues data for the program; raises SessionInactive or WriteFailed, never blocks."""
        if not self.is_alive:
            raise SessionInactive("the terminal's process has ended")
        self._check_input_open()
        self._check_lines(data)
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

    def type_input(self, data: bytes) -> None:
        """Writes input a client sent: the output from here on is what answers it (last_input_byte)."""
        at = self.buffer.end
        self.write(data)
        self.last_input_byte = at

    def _check_input_open(self) -> None:
        """Raises when the input is closed."""

    def _check_lines(self, data: bytes) -> None:
        """Raises LineTooLong when data holds a line the program could not receive whole."""

    def _input_fd(self) -> int | None:
        raise NotImplementedError

    def _flush_input(self) -> None:
        assert self._loop is not None
        queue, fd = self._input.data, self._input_fd()
        if fd is None:
            return
        room = self._input_room(len(queue))
        try:
            written = os.write(fd, queue if room >= len(queue) else queue[:room]) if queue and room else 0
        except BlockingIOError:
            written = 0
        except OSError as error:  # EIO or EPIPE: nothing reads the other end any more
            queue.clear()
            self._loop.remove_writer(fd)
            self._input_failed(error)
            raise WriteFailed(f"writing to the program failed: {error.strerror}") from error
        del queue[:written]
        if written:
            self._input_written(written)
        if queue and written == room:  # held back, not refused by the kernel: the subclass flushes again
            self._loop.remove_writer(fd)
            self._input_held_back()
        elif queue:
            self._loop.add_writer(fd, self._flush_queued_input)
        else:
            self._loop.remove_writer(fd)
            self._input_drained()

    def _input_failed(self, error: OSError) -> None:
        """The program stopped taking input."""

    def _input_room(self, pending: int) -> int:
        """How many of the pending bytes of input may be written now (a subclass may pace them)."""
        return pending

    def _input_written(self, count: int) -> None:
        """count more bytes of input reached the program's side."""

    def _input_held_back(self) -> None:
        """_input_room held input back: the subclass calls _flush_queued_input when there is room again."""

    def _input_drained(self) -> None:
        """Everything queued has been written."""

    def _flush_queued_input(self) -> None:
        try:
            self._flush_input()
        except WriteFailed:
            pass  # the program stopped reading; its exit, or the next write(), reports it

    @property
    def pending_input(self) -> int:
        return len(self._input.data)

    @property
    def has_session(self) -> bool:
        """Whether the first process leads a session of its own yet (the spawn or setsid made it one); until then it
        is the only process the terminal has, and it is still in the service's session and process group."""
        try:
            return os.getsid(self.pid) == self.pid
        except ProcessLookupError:
            return False

    def _signal_group(self, group: int, signum: int) -> int:
        """Sends signum to group, a process group of the terminal's session; returns the group signalled.

        Before the terminal's session exists (right after the start), there is no group of its own to signal:
        the signal goes to the first process, the terminal's only process then, and its pid is returned.
        """
        if not self.is_alive:
            raise SessionInactive("the terminal's process has ended")
        try:
            if group <= 0 or not self.has_session:
                signals.signal_first_process(self._pidfd, signum)
                return self.pid
            signals.signal_group(group, signum, session=self.pid)
        except PermissionError as error:
            raise KillFailed(f"cannot signal the foreground processes: {error}") from error
        return group

    def _signal_members(self, pids: list[int], signum: int) -> None:
        """Sends signum to the first process (while it runs) and to each of pids that is still the terminal's."""
        if self.is_alive:
            signals.signal_first_process(self._pidfd, signum)
        sent = signals.signal_owned([pid for pid in pids if pid != self.pid], signum, self.owns)
        if sent.denied:
            raise KillFailed(f"cannot signal the terminal's processes {sent.denied}: permission denied")

    def owns(self, pid: int) -> bool:
        """Whether pid is one of the processes this terminal started: in its session, marked, or confined."""
        fields = processes.stat_fields(pid)
        if fields is None:
            return False
        # A session is named by the pid of its leader, and Linux hands out no pid a session still bears: whatever
        # is in session self.pid is the terminal's, even after its first process has ended.
        in_session = fields[3] == str(self.pid)
        return in_session or (self._marker is not None and processes.carries(pid, self._marker)) or self.confines(pid)

    # Stopping

    def members(self) -> list[int]:
        """The live processes this terminal started, wherever they went (its session, and its marker).

        Never a process of the service: one started together with the service inside a terminal carries that
        terminal's marker too. The first process is left out while it is still in the service's session (before
        setsid), as is_alive stands for it.
        """
        found = set(processes.terminal_members(self.pid, self._marker)).union(self.confined_members())
        service = signals.Service.now()
        return sorted(pid for pid in found if service.reason_to_spare(pid) is None)

    async def terminate(self, signum: int = signal.SIGTERM, grace: float = 3.0) -> ExitStatus | None:
        """Ends every process the terminal started; returns the exit status of its first process.

        signum goes to each of them; whatever survives grace seconds is killed with SIGKILL.
        """
        self.terminating = True
        try:
            self._signal_members(self.members(), signum)
            self._after_signal(signum)
        except PermissionError as error:
            raise KillFailed(f"cannot signal the terminal's processes: {error}") from error
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and (self.is_alive or self.members()):
            await asyncio.sleep(MEMBER_POLL_SECONDS)
        survivors = self.members()
        if survivors or self.is_alive:
            self._signal_members(survivors, signal.SIGKILL)
        return await self.wait_for_exit(timeout=5.0)

    def _after_signal(self, signum: int) -> None:
        """What to do right after the first signal went out."""

    def _reap(self) -> None:
        if self._process is not None and self._process.poll() is None:
            signals.signal_first_process(self._pidfd, signal.SIGKILL)
            self._process.wait()
        self._close_pidfd()
