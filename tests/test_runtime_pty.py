"""PtySession against real bash and dash processes on real pseudo-terminals."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import time
from collections.abc import Callable

import pytest

from terminals.runtime import processes, pty
from terminals.runtime.buffer import OutputBuffer
from terminals.runtime.errors import SessionInactive, SpawnFailed, WriteFailed
from terminals.runtime.pty import ExitStatus, PtySession, SpawnSpec

from . import runtime_support as support
from .runtime_support import cleaned_up, cleanup, gone, run, run_with_watchdog, start_heartbeat

PROMPT = "READY$ "
ENV = {"PATH": os.environ["PATH"], "PS1": PROMPT, "TERM": "xterm-256color", "HOME": "/tmp"}
BASH = ["bash", "--norc", "--noprofile"]
DASH = ["/bin/sh"]
SHELLS = pytest.mark.parametrize("shell", [BASH, DASH], ids=["bash", "dash"])
CSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")


# Helpers


def spawn(argv: list[str], *, max_lines: int = 10_000, max_bytes: int = 4 << 20, cols: int = 80, rows: int = 24,
          **options) -> PtySession:
    """Starts argv on a new PTY; call from inside the event loop."""
    spec = SpawnSpec(argv=argv, cwd="/tmp", env=dict(ENV), cols=cols, rows=rows)
    session = PtySession(spec, buffer=OutputBuffer(max_lines=max_lines, max_bytes=max_bytes), **options)
    session.start()
    return session


def screen_lines(session: PtySession) -> list[str]:
    """The buffered lines as a terminal would show them: escape sequences removed, carriage returns applied."""
    lines = session.buffer.read_lines(max_lines=10**9).lines
    return [CSI.sub("", line).rsplit("\r", 1)[-1] for line in lines]


def screen_text(session: PtySession) -> str:
    return "\n".join(screen_lines(session))


async def wait_until(predicate: Callable[[], bool], *, timeout: float = 10.0, session: PtySession | None = None,
                     what: str = "a condition") -> None:
    tail = (lambda: screen_lines(session)[-15:]) if session is not None else list
    await support.wait_until(predicate, timeout=timeout, session=session, what=what, tail=tail)


async def wait_for_line(session: PtySession, line: str, *, timeout: float = 10.0) -> None:
    await wait_until(lambda: line in screen_lines(session), timeout=timeout, session=session, what=repr(line))


async def wait_for_prompts(session: PtySession, count: int, *, timeout: float = 10.0) -> None:
    """Waits until the shell has printed its prompt count times."""
    await wait_until(
        lambda: screen_text(session).count(PROMPT) >= count, timeout=timeout, session=session,
        what=f"{count} prompts",
    )


def command_name(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as comm:
            return comm.read().strip()
    except OSError:
        return ""


def running(session: PtySession, name: str) -> bool:
    """Whether a live process called name is in the terminal's session."""
    return any(command_name(pid) == name for pid in processes.session_members(session.pid))


# Spawning, input and output


@SHELLS
def test_shell_shows_its_prompt(shell):
    """A shell started on the PTY prints the PS1 prompt it got from its environment."""

    async def scenario():
        async with cleaned_up(spawn(shell)) as session:
            await wait_for_prompts(session, 1)
            assert session.is_alive is True
            assert session.exit_status is None
            assert os.getsid(session.pid) == session.pid  # the shell leads its own session

    run(scenario)


@SHELLS
def test_shell_runs_a_written_command_and_its_output_is_buffered(shell):
    """A command written to the terminal runs, and its output lands in the buffer."""

    async def scenario():
        async with cleaned_up(spawn(shell)) as session:
            await wait_for_prompts(session, 1)
            session.write(b"echo $((6 * 7))\n")
            await wait_for_line(session, "42")
            await wait_for_prompts(session, 2)
            assert f"{PROMPT}echo $((6 * 7))" in screen_lines(session)  # the terminal echoed the input

    run(scenario)


def test_spawn_in_a_missing_directory_raises_spawn_failed():
    """A working directory that does not exist makes start() raise SpawnFailed."""

    async def scenario():
        spec = SpawnSpec(argv=BASH, cwd="/nonexistent/directory", env=dict(ENV))
        session = PtySession(spec, buffer=OutputBuffer(max_lines=10, max_bytes=1000))
        with pytest.raises(SpawnFailed) as raised:
            session.start()
        assert raised.value.code == "INVALID_INPUT"

    run(scenario)


# Controlling terminal and signals


@SHELLS
def test_ctrl_c_interrupts_the_foreground_program(shell):
    """Ctrl-C interrupts the foreground program, which proves the PTY is the controlling terminal."""

    async def scenario():
        async with cleaned_up(spawn(shell)) as session:
            await wait_for_prompts(session, 1)
            session.write(b"sleep 30\n")
            await wait_until(lambda: running(session, "sleep"), session=session, what="sleep to start")
            session.write(b"\x03")
            await wait_until(lambda: not running(session, "sleep"), timeout=5, what="sleep to be interrupted")
            await wait_for_prompts(session, 2)
            session.write(b"echo status=$?\n")
            await wait_for_line(session, "status=130")  # 128 + SIGINT
            assert session.is_alive is True  # only the foreground program was interrupted

    run(scenario)


def test_a_signal_for_a_foreground_job_that_just_ended_goes_to_the_shell():
    """Between two commands of a loop the terminal's foreground group can be a job that has ended, before the shell
    takes the terminal back. A signal for the foreground then goes to the shell, which ends the loop, instead of
    to the group that no longer exists, where it was lost and the loop ran on. The shell is held stopped to keep
    that moment still."""

    async def scenario():
        async with cleaned_up(spawn(BASH)) as session:
            await wait_for_prompts(session, 1)
            session.write(b"while :; do sleep 30; done\n")
            await wait_until(lambda: running(session, "sleep"), session=session, what="the loop's sleep to start")
            os.kill(session.pid, signal.SIGSTOP)
            sleeper = next(pid for pid in processes.session_members(session.pid) if command_name(pid) == "sleep")
            os.kill(sleeper, signal.SIGKILL)
            await wait_until(lambda: not processes.group_members(session.foreground_group()),
                             what="the foreground job to be gone while the shell is stopped")
            signalled = session.signal_foreground(signal.SIGINT)
            os.kill(session.pid, signal.SIGCONT)
            assert signalled == session.pid
            await wait_for_prompts(session, 2)  # the loop ended
            session.write(b"echo after-$((6*7))\n")
            await wait_for_line(session, "after-42")
            assert not running(session, "sleep")

    run(scenario)


@SHELLS
def test_exit_code_is_reported(shell):
    """`exit 7` ends the session with exit code 7, and wait_for_exit returns that status."""

    async def scenario():
        async with cleaned_up(spawn(shell)) as session:
            await wait_for_prompts(session, 1)
            session.write(b"exit 7\n")
            status = await session.wait_for_exit(timeout=10)
            assert status == ExitStatus(exit_code=7, signal=None)
            assert session.exit_status == status
            assert session.is_alive is False

    run(scenario)


def test_wait_for_exit_times_out_while_the_process_runs():
    """wait_for_exit returns None when the process is still running at the deadline."""

    async def scenario():
        async with cleaned_up(spawn(["sleep", "600"])) as session:
            assert await session.wait_for_exit(timeout=0.05) is None
            assert session.is_alive is True

    run(scenario)


@pytest.mark.parametrize(
    ("argv", "command", "name"),
    [
        (BASH, b"kill -KILL $$\n", "SIGKILL"),
        (["sh", "-c", "echo started; read line; kill -USR1 $$"], b"go\n", "SIGUSR1"),
    ],
    ids=["interactive-bash-SIGKILL", "sh-c-SIGUSR1"],
)
def test_signal_death_is_reported_by_name(argv, command, name):
    """A process killed by a signal reports no exit code and the signal's name."""

    async def scenario():
        async with cleaned_up(spawn(argv)) as session:
            await wait_until(lambda: session.buffer.end > 0, session=session, what="first output")
            session.write(command)
            status = await session.wait_for_exit(timeout=10)
            assert status == ExitStatus(exit_code=None, signal=name)

    run(scenario)


def test_sigpipe_is_at_its_default_in_children():
    """Children do not inherit Python's ignored SIGPIPE: `yes | head -1` ends quietly."""

    async def scenario():
        async with cleaned_up(spawn(BASH)) as session:
            await wait_for_prompts(session, 1)
            assert processes.ignores_signal(session.pid, signal.SIGPIPE) is False
            session.write(b"yes | head -1; echo pipe-$((40 + 2))\n")
            await wait_for_line(session, "pipe-42")
            lines = screen_lines(session)
            assert lines[lines.index("pipe-42") - 1] == "y"
            assert "Broken pipe" not in screen_text(session)

            await wait_for_prompts(session, 2)
            session.write(b"grep SigIgn /proc/self/status\n")
            await wait_until(lambda: any(line.startswith("SigIgn:") for line in screen_lines(session)),
                             session=session, what="SigIgn")
            mask = next(int(line.split()[1], 16) for line in screen_lines(session) if line.startswith("SigIgn:"))
            assert mask & (1 << (signal.SIGPIPE - 1)) == 0

    run(scenario)


# Exit and the output written just before it


@pytest.mark.parametrize(
    ("argv", "command"),
    [(BASH, b"seq 1 20000; exit 0\n"), (["sh", "-c", "seq 1 20000"], None)],
    ids=["interactive-bash", "sh-c"],
)
def test_output_written_right_before_exit_is_in_the_buffer(argv, command):
    """When wait_for_exit returns, everything the process wrote before exiting is in the buffer."""

    async def scenario():
        async with cleaned_up(spawn(argv, max_lines=100_000)) as session:
            if command is not None:
                await wait_for_prompts(session, 1)
                session.write(command)
            status = await session.wait_for_exit(timeout=20)
            assert status == ExitStatus(exit_code=0, signal=None)
            lines = [line for line in screen_lines(session) if line.isdigit()]
            assert lines[-1] == "20000"
            assert lines[-20000:] == [str(number) for number in range(1, 20001)]

    run(scenario)



def test_the_exit_waits_for_the_end_of_output_once_no_process_of_the_terminal_is_left():
    """Output that reaches the service after the exit is seen (as on a busy machine) is still reported with it,
    when nothing of the terminal is left to hold the output open. The late writer stands in for the kernel's slow
    delivery: it left the terminal's session, and carries no marker (the service cannot see it), so it writes
    "late" 1 s after the exit and then lets the output end. Before, the exit was reported 0.25 s after it, without
    "late": a command that ended its shell (`printf x; exit 3`) once returned no output on a loaded CI machine."""
    # Ignoring SIGHUP, it outlives the session leader's exit, which hangs up its process group.
    late_writer = "trap '' HUP; setsid sh -c 'sleep 1; printf late' &"

    async def scenario():
        seen_at_exit = []
        session = spawn(["sh", "-c", f"{late_writer} printf early; exit 3"],
                        on_exit=lambda ended: seen_at_exit.append(ended.buffer.read_bytes(0, ended.buffer.end)[0]))
        try:
            status = await session.wait_for_exit(timeout=10)
            assert status == ExitStatus(exit_code=3, signal=None)
            assert seen_at_exit == [b"earlylate"]
        finally:
            await cleanup(session)

    run(scenario)

# Ending sessions


def test_terminate_ends_the_whole_session_including_background_jobs():
    """terminate() ends the shell and its background jobs: no process of the session is left."""

    async def scenario():
        async with cleaned_up(spawn(BASH)) as session:
            await wait_for_prompts(session, 1)
            session.write(b"sleep 300 &\n")
            await wait_until(lambda: running(session, "sleep"), session=session, what="the background job")
            background = [pid for pid in processes.session_members(session.pid) if command_name(pid) == "sleep"]

            status = await session.terminate(grace=5.0)

            assert status == ExitStatus(exit_code=None, signal="SIGHUP")  # bash ignores SIGTERM, so it is hung up
            assert session.is_alive is False
            assert processes.session_members(session.pid) == []
            assert len(background) == 1
            assert gone(background[0]) is True

    run(scenario)


@pytest.mark.parametrize(
    "argv",
    [DASH, ["sh", "-c", "trap '' TERM; exec sleep 600"]],
    ids=["interactive-dash", "program-with-TERM-trapped"],
)
def test_terminate_hangs_up_a_shell_that_ignores_sigterm(argv):
    """A first process that ignores SIGTERM is hung up, long before the grace period runs out."""

    async def scenario():
        async with cleaned_up(spawn(argv)) as session:
            await wait_until(lambda: processes.ignores_signal(session.pid, signal.SIGTERM), session=session,
                             what="SIGTERM to be ignored")
            status = await session.terminate(grace=20.0)  # the scenario's own 30 s deadline would fail first
            assert status == ExitStatus(exit_code=None, signal="SIGHUP")
            assert processes.session_members(session.pid) == []

    run(scenario)


def test_terminate_kills_what_survives_the_grace_period():
    """A process that ignores both SIGTERM and SIGHUP is killed with SIGKILL after the grace period."""

    async def scenario():
        async with cleaned_up(spawn(["sh", "-c", "trap '' TERM HUP; exec sleep 600"])) as session:
            await wait_until(
                lambda: processes.ignores_signal(session.pid, signal.SIGHUP) and command_name(session.pid) == "sleep",
                session=session, what="the traps",
            )
            status = await session.terminate(grace=0.3)
            assert status == ExitStatus(exit_code=None, signal="SIGKILL")
            assert processes.session_members(session.pid) == []

    run(scenario)


def test_write_after_exit_raises_session_inactive():
    """Once the process has ended, write() and resize() raise SessionInactive."""

    async def scenario():
        async with cleaned_up(spawn(["sh", "-c", "exit 0"])) as session:
            assert await session.wait_for_exit(timeout=10) == ExitStatus(exit_code=0, signal=None)
            with pytest.raises(SessionInactive) as raised:
                session.write(b"echo too late\n")
            assert raised.value.code == "TERMINAL_INACTIVE"
            with pytest.raises(SessionInactive):
                session.resize(100, 40)

    run(scenario)


# Input that is not read





def test_large_input_to_a_program_that_never_reads_does_not_block():
    """2 MiB written to a program that never reads fills the bounded input queue, then raises WriteFailed.

    Regression test: no write() call and no flush may block the event loop.
    """
    sessions: list[PtySession] = []
    limit = 1 << 20

    async def scenario():
        session = spawn(BASH, max_pending_input=limit, max_bytes=256 << 10)
        sessions.append(session)
        beat, gaps = start_heartbeat()
        try:
            await wait_for_prompts(session, 1)
            session.write(b"sleep 600\n")
            await wait_until(lambda: running(session, "sleep"), session=session, what="sleep to start")

            chunk = (b"x" * 1023 + b"\n") * 64  # 64 KiB of complete lines, so the line discipline fills up
            written, slowest, failure = 0, 0.0, None
            while written < 2 * limit:
                started = time.monotonic()
                try:
                    session.write(chunk)
                except WriteFailed as error:
                    failure = error
                    break
                finally:
                    slowest = max(slowest, time.monotonic() - started)
                written += len(chunk)
                await asyncio.sleep(0)  # let queued input flush as far as the terminal takes it

            assert failure is not None, "2 MiB to a program that never reads must overflow a 1 MiB queue"
            assert failure.code == "WRITE_FAILED"
            assert failure.details["limit_bytes"] == limit
            assert session.pending_input <= limit
            assert slowest < 1.0

            # The loop keeps running: output still arrives and timers still fire.
            ticks = len(gaps)
            await wait_until(lambda: len(gaps) >= ticks + 5, timeout=5, what="heartbeats")
            assert max(gaps) < 1.0
            assert session.is_alive is True
        finally:
            beat.cancel()
            await cleanup(session)

    run_with_watchdog(scenario, sessions, timeout=30)


# Window size


@SHELLS
def test_resize_changes_what_stty_size_prints(shell):
    """The spawn size is the terminal's size, and resize() changes it."""

    async def scenario():
        async with cleaned_up(spawn(shell, cols=100, rows=30)) as session:
            await wait_for_prompts(session, 1)
            session.write(b"stty size\n")
            await wait_for_line(session, "30 100")
            await wait_for_prompts(session, 2)
            session.resize(132, 40)
            session.write(b"stty size\n")
            await wait_for_line(session, "40 132")

    run(scenario)


# Floods


def test_flood_keeps_the_buffer_bounded():
    """A flood from `yes` keeps the buffer within its byte limit, and the shell stays usable.

    20 MB rather than 50 MB: this machine's PTYs move about 7 MB/s whoever reads them, and 20 MB is
    still over 300 times the buffer's limit.
    """
    max_bytes = 64 << 10

    async def scenario():
        async with cleaned_up(spawn(BASH, max_lines=1000, max_bytes=max_bytes)) as session:
            await wait_for_prompts(session, 1)
            session.write(b"yes | head -c 20000000; echo flood-$((1 + 1))\n")
            largest = 0

            def done() -> bool:
                nonlocal largest
                largest = max(largest, len(session.buffer._data))
                # A byte read of the newest output: a line read would index every line of the flood.
                return b"flood-2" in session.buffer.read_bytes(session.buffer.end - 100, 100)[0]

            await wait_until(done, timeout=30, session=session, what="the flood to end")
            assert largest <= max_bytes + session.buffer._slack
            stats = session.buffer.stats()
            assert stats.total_bytes > 30_000_000  # the PTY turns each "y\n" into "y\r\n"
            assert stats.buffer_bytes <= max_bytes + session.buffer._slack
            assert stats.buffer_lines <= 1001

    run(scenario, timeout=40)


def test_a_flood_nobody_reads_is_read_at_a_bounded_rate_and_at_full_speed_once_read():
    """`yes` in a terminal its worker calls unread is read at a bounded rate (its program waits on the full PTY):
    over a window of the loop's time, at most UNREAD_FLOOD_BYTES (and the last read's size) per rest of
    UNREAD_REST_SECONDS, where unbounded it is read at tens of MB a second even on a loaded machine; once someone
    reads it, it is read at full speed again, as fast as a terminal read all along."""
    window = 2.0

    async def scenario():
        unread = spawn(["yes"])
        unread.unread = lambda: True
        loop = asyncio.get_running_loop()
        try:
            started = loop.time()
            await wait_until(lambda: loop.time() - started >= window, timeout=window + 5, what="the window")
            rests = (loop.time() - started) / pty.UNREAD_REST_SECONDS + 1
            assert unread.buffer.end <= rests * (pty.UNREAD_FLOOD_BYTES + 16384), unread.buffer.end
            unread.unread = lambda: False
            start = unread.buffer.end
            await wait_until(lambda: unread.buffer.end - start >= 20 << 20, timeout=60,
                             what="20 MB once the terminal is read")
        finally:
            await cleanup(unread)

    run(scenario, timeout=120)


def test_a_paste_is_written_no_faster_than_its_echo_is_read_and_never_waits_on_echo_that_does_not_come():
    """Input goes to the program no faster than its echo is read, so a loop that reads slowly delays the echo
    instead of the kernel dropping it, and a program that turned echo off, whose input earns no echo to wait for,
    still gets every byte. (Input to a program that never reads, whose echo stops with its full line discipline,
    is the test above: its queue still fills and refuses, the loop never blocks.)"""

    lines = (b"y" * 1023 + b"\n") * 512  # 512 KiB

    async def scenario():
        echoing, silent = spawn(["wc", "-c"], max_bytes=2 << 20), spawn(["sh", "-c", "stty -echo; echo off; exec wc -c"])
        try:
            await wait_for_line(silent, "off")
            # The echoing one is read one read a wake-up, as an unread flood is; the rests are lifted for echo.
            echoing.unread = lambda: True
            for session in (echoing, silent):
                session.write(lines)
                session.write(b"\x04")
            await wait_until(lambda: echoing.exit_status is not None and silent.exit_status is not None,
                             timeout=30, what="both to count and exit")
            await wait_until(lambda: b"524288" in silent.buffer.read_bytes(0, 1 << 20)[0],
                             session=silent, what="the silent one's count")
            echoed = echoing.buffer.read_bytes(0, 4 << 20)[0]
            assert echoed.startswith((b"y" * 1023 + b"\r\n") * 512), len(echoed)
            assert echoed[len(lines) + 512:].split() == [b"524288"]
        finally:
            await cleanup(echoing)
            await cleanup(silent)

    run(scenario, timeout=60)
