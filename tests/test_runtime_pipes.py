"""PipeSession against real programs on real pipes: separate streams, input, exit and ending."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Callable

import pytest

from terminals.runtime import processes
from terminals.runtime.buffer import OutputBuffer
from terminals.runtime.errors import SessionInactive, SpawnFailed, WriteFailed
from terminals.runtime.pipes import InputClosed, NoTerminal, PipeSession
from terminals.runtime.pty import ExitStatus, SpawnSpec

from . import runtime_support as support
from .runtime_support import cleaned_up, cleanup, gone, run, run_with_watchdog, start_heartbeat

ENV = {"PATH": os.environ["PATH"], "HOME": "/tmp", "LC_ALL": "C"}


# Helpers


def spawn(argv: list[str], *, max_lines: int = 100_000, max_bytes: int = 4 << 20, **options) -> PipeSession:
    """Starts argv on pipes; call from inside the event loop."""
    spec = SpawnSpec(argv=argv, cwd="/tmp", env=dict(ENV))
    session = PipeSession(spec, buffer=OutputBuffer(max_lines=max_lines, max_bytes=max_bytes), **options)
    session.start()
    return session


def lines(buffer: OutputBuffer) -> list[str]:
    return buffer.read_lines(max_lines=10**9).lines


async def wait_until(predicate: Callable[[], bool], *, session: PipeSession, timeout: float = 10.0,
                     what: str = "a condition") -> None:
    await support.wait_until(predicate, timeout=timeout, session=session, what=what,
                             tail=lambda: lines(session.buffer)[-10:])


def recording_loop_errors() -> list[dict]:
    """Collects what the running loop reports as unhandled errors (callbacks that raised)."""
    errors: list[dict] = []
    asyncio.get_running_loop().set_exception_handler(lambda loop, context: errors.append(context))
    return errors


def commands(session: PipeSession) -> list[str]:
    """The command lines of the live processes in the session's process session."""
    return [processes.command_line(pid) for pid in processes.session_members(session.pid)]





# Output streams


def test_stdout_and_stderr_stay_apart():
    """stdout and stderr each land in their own buffer, and the combined buffer holds both."""

    async def scenario():
        async with cleaned_up(spawn(["sh", "-c", "echo out; echo err >&2"])) as session:
            assert await session.wait_for_exit(timeout=10) == ExitStatus(exit_code=0, signal=None)
            assert lines(session.stdout) == ["out"]
            assert lines(session.stderr) == ["err"]
            assert sorted(lines(session.buffer)) == ["err", "out"]
            assert session.buffer_for("stdout") is session.stdout
            assert session.buffer_for("stderr") is session.stderr
            assert session.buffer_for("both") is session.buffer

    run(scenario)


def test_stream_buffers_share_the_limits_of_the_combined_buffer():
    """The per-stream buffers get the combined buffer's line and byte limits; unknown streams are refused."""
    spec = SpawnSpec(argv=["true"], cwd="/tmp", env=dict(ENV))
    session = PipeSession(spec, buffer=OutputBuffer(max_lines=7, max_bytes=1234))
    for stream in ("stdout", "stderr"):
        assert (session.buffer_for(stream).max_lines, session.buffer_for(stream).max_bytes) == (7, 1234)
    with pytest.raises(ValueError):
        session.buffer_for("stdin")


def test_output_is_stamped_with_the_injected_clock():
    """Output moves last_activity to the clock's time, and each buffer can find it by that time."""
    now = [1000.0]

    async def scenario():
        async with cleaned_up(spawn(["sh", "-c", "echo early; read go; echo late >&2"], clock=lambda: now[0])) as session:
            assert session.started_at == 1000.0
            await wait_until(lambda: lines(session.stdout) == ["early"], session=session, what="early")
            now[0] = 2000.0
            session.write(b"go\n")
            assert session.last_activity == 2000.0
            now[0] = 3000.0
            await wait_until(lambda: lines(session.stderr) == ["late"], session=session, what="late")
            assert session.last_activity >= 3000.0
            assert session.buffer.line_since_time(3000.0) == 1  # "early" came before
            assert session.stderr.line_since_time(3000.0) == 0

    run(scenario)


# Exit


def test_exit_code_is_reported():
    """A program's exit code is its exit status, and is_alive turns false."""

    async def scenario():
        async with cleaned_up(spawn(["sh", "-c", "exit 7"])) as session:
            assert await session.wait_for_exit(timeout=10) == ExitStatus(exit_code=7, signal=None)
            assert session.exit_status == ExitStatus(exit_code=7, signal=None)
            assert session.is_alive is False

    run(scenario)


def test_signal_death_is_reported_by_name():
    """A program killed by a signal reports no exit code and the signal's name."""

    async def scenario():
        async with cleaned_up(spawn(["sh", "-c", "kill -USR1 $$"])) as session:
            assert await session.wait_for_exit(timeout=10) == ExitStatus(exit_code=None, signal="SIGUSR1")

    run(scenario)


def test_output_written_right_before_exit_is_all_there():
    """When wait_for_exit returns, and when on_exit is called, all of the program's output is buffered."""
    expected = [str(number) for number in range(1, 20001)]
    seen_at_exit: list[list[str]] = []

    async def scenario():
        async with cleaned_up(spawn(["seq", "1", "20000"], on_exit=lambda ended: seen_at_exit.append(lines(ended.stdout)))) as session:
            assert await session.wait_for_exit(timeout=10) == ExitStatus(exit_code=0, signal=None)
            assert lines(session.stdout) == expected
            assert lines(session.buffer) == expected
            assert seen_at_exit == [expected]  # called once, with the output complete

    run(scenario)


def test_exit_is_reported_while_a_background_child_holds_the_pipes():
    """A background child that keeps stdout open delays the exit report only briefly."""

    async def scenario():
        async with cleaned_up(spawn(["sh", "-c", "sleep 300 & echo started"])) as session:
            status = await session.wait_for_exit(timeout=5)
            assert status == ExitStatus(exit_code=0, signal=None)
            assert lines(session.stdout) == ["started"]
            assert len(processes.session_members(session.pid)) == 1  # the sleep is still there
        assert processes.session_members(session.pid) == []

    run(scenario)


def test_sigpipe_is_at_its_default_in_children():
    """Children do not inherit Python's ignored SIGPIPE: `yes | head -1` ends quietly."""

    async def scenario():
        async with cleaned_up(spawn(["sh", "-c", "yes | head -n 1"])) as session:
            assert await session.wait_for_exit(timeout=10) == ExitStatus(exit_code=0, signal=None)
            assert lines(session.stdout) == ["y"]
            assert lines(session.stderr) == []  # an ignored SIGPIPE makes yes complain of a broken pipe

    run(scenario)


# Input


def test_written_input_reaches_the_program():
    """Bytes written reach the program's stdin, and close_input() ends `cat` with exit code 0."""

    async def scenario():
        async with cleaned_up(spawn(["cat"])) as session:
            session.write(b"hello\n")
            await wait_until(lambda: lines(session.stdout) == ["hello"], session=session, what="the echo")
            assert session.pending_input == 0
            session.close_input()
            assert await session.wait_for_exit(timeout=10) == ExitStatus(exit_code=0, signal=None)
            assert lines(session.stderr) == []

    run(scenario)


def test_close_input_waits_for_queued_input_to_be_written():
    """close_input() with input still queued closes stdin only after all of it: `wc -c` counts every byte."""
    size = 3 << 20  # far more than a pipe holds, so most of it is still queued at close_input()

    async def scenario():
        async with cleaned_up(spawn(["wc", "-c"], max_pending_input=4 << 20)) as session:
            session.write(b"z" * size)
            assert session.pending_input > 0
            session.close_input()
            assert await session.wait_for_exit(timeout=10) == ExitStatus(exit_code=0, signal=None)
            assert lines(session.stdout) == [str(size)]
            assert session.pending_input == 0

    run(scenario)


def test_write_after_close_input_raises_input_closed():
    """Once input is closed, write() raises InputClosed (the client's mistake), and closing again is harmless."""

    async def scenario():
        async with cleaned_up(spawn(["sleep", "600"])) as session:
            session.close_input()
            session.close_input()
            with pytest.raises(InputClosed) as raised:
                session.write(b"too late\n")
            assert raised.value.code == "INVALID_INPUT"
            assert raised.value.message.startswith("input was closed")
            assert session.is_alive is True

    run(scenario)


def test_write_after_exit_raises_session_inactive():
    """Once the program has ended, write() raises SessionInactive."""

    async def scenario():
        async with cleaned_up(spawn(["true"])) as session:
            assert await session.wait_for_exit(timeout=10) == ExitStatus(exit_code=0, signal=None)
            with pytest.raises(SessionInactive) as raised:
                session.write(b"anyone?\n")
            assert raised.value.code == "TERMINAL_INACTIVE"

    run(scenario)


def test_write_to_a_program_that_closed_its_stdin_raises_write_failed():
    """A program that closed its stdin makes write() raise WriteFailed (EPIPE), and it keeps running."""

    async def scenario():
        errors = recording_loop_errors()
        async with cleaned_up(spawn(["sh", "-c", "exec 0<&-; echo closed; exec sleep 600"])) as session:
            await wait_until(lambda: lines(session.stdout) == ["closed"], session=session, what="stdin to close")
            with pytest.raises(WriteFailed) as raised:
                session.write(b"hello\n")
            assert "Broken pipe" in raised.value.message
            with pytest.raises(WriteFailed):
                session.write(b"again\n")
            assert session.pending_input == 0
            assert session.is_alive is True
            assert errors == []

    run(scenario)


def test_program_that_exits_with_input_queued_does_not_break_the_loop():
    """A program that ends while input is queued drops the queue quietly: no error reaches the loop."""

    async def scenario():
        errors = recording_loop_errors()
        async with cleaned_up(spawn(["head", "-c", "1"])) as session:
            session.write(b"q" * (512 << 10))
            assert session.pending_input > 0
            assert await session.wait_for_exit(timeout=10) == ExitStatus(exit_code=0, signal=None)
            await wait_until(lambda: session.pending_input == 0, session=session, what="the queue to be dropped")
            assert lines(session.stdout) == ["q"]
            assert errors == []

    run(scenario)


def test_large_input_to_a_program_that_never_reads_does_not_block():
    """2 MiB written to a program that never reads fills the 1 MiB input queue, then raises WriteFailed.

    Regression test: no write() call and no flush may block the event loop.
    """
    sessions: list[PipeSession] = []
    limit = 1 << 20

    async def scenario():
        session = spawn(["sleep", "600"], max_pending_input=limit)
        sessions.append(session)
        beat, gaps = start_heartbeat()
        try:
            chunk = b"x" * (64 << 10)
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
                await asyncio.sleep(0)

            assert failure is not None, "2 MiB to a program that never reads must overflow a 1 MiB queue"
            assert failure.details["limit_bytes"] == limit
            assert session.pending_input <= limit
            assert slowest < 1.0

            ticks = len(gaps)
            deadline = time.monotonic() + 5
            while len(gaps) < ticks + 5 and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            assert len(gaps) >= ticks + 5
            assert max(gaps) < 1.0
            assert session.is_alive is True
        finally:
            beat.cancel()
            await cleanup(session)

    run_with_watchdog(scenario, sessions, timeout=20)


# Signals and ending


def test_terminate_ends_the_process_group_including_a_background_child():
    """terminate() ends the program and its background child: no process of its session is left."""

    async def scenario():
        async with cleaned_up(spawn(["sh", "-c", "sleep 300 & sleep 301"])) as session:
            await wait_until(lambda: {"sleep 300", "sleep 301"} <= set(commands(session)), session=session,
                             what="both sleeps")
            members = processes.session_members(session.pid)

            status = await session.terminate(grace=5.0)

            assert status == ExitStatus(exit_code=None, signal="SIGTERM")
            assert session.terminating is True
            assert processes.session_members(session.pid) == []
            assert all(gone(pid) for pid in members)

    run(scenario)


def test_terminate_kills_what_survives_the_grace_period():
    """A program that ignores SIGTERM is killed with SIGKILL after the grace period."""

    async def scenario():
        async with cleaned_up(spawn(["sh", "-c", "trap '' TERM; echo trapped; exec sleep 600"])) as session:
            await wait_until(lambda: lines(session.stdout) == ["trapped"], session=session, what="the trap")
            status = await session.terminate(grace=0.2)
            assert status == ExitStatus(exit_code=None, signal="SIGKILL")
            assert processes.session_members(session.pid) == []

    run(scenario)


def test_signal_foreground_signals_the_program_group():
    """signal_foreground() signals the program's process group and returns the program's pid."""

    async def scenario():
        async with cleaned_up(spawn(["sleep", "600"])) as session:
            assert session.signal_foreground(signal.SIGINT) == session.pid
            assert await session.wait_for_exit(timeout=10) == ExitStatus(exit_code=None, signal="SIGINT")
            with pytest.raises(SessionInactive):
                session.signal_foreground(signal.SIGINT)

    run(scenario)


# No terminal


def test_session_without_a_pty_has_no_terminal():
    """resize() raises NoTerminal, and there is no foreground program or pending read to report."""

    async def scenario():
        async with cleaned_up(spawn(["sleep", "600"])) as session:
            with pytest.raises(NoTerminal) as raised:
                session.resize(100, 40)
            assert raised.value.code == "INVALID_INPUT"
            assert session.foreground_process() is None
            assert session.busy is False
            assert session.waiting_for_input() is False

    run(scenario)


def test_spawn_of_a_missing_program_raises_spawn_failed():
    """A program that is not on the PATH makes start() raise SpawnFailed with the system's reason."""

    async def scenario():
        spec = SpawnSpec(argv=["no-such-program-here"], cwd="/tmp", env=dict(ENV))
        session = PipeSession(spec, buffer=OutputBuffer(max_lines=10, max_bytes=1000))
        with pytest.raises(SpawnFailed) as raised:
            session.start()
        assert raised.value.code == "INVALID_INPUT"
        assert raised.value.message == "cannot start no-such-program-here: No such file or directory"

    run(scenario)
