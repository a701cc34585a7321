"""SessionManager: lookup, the session limit, idle expiry on an injected clock, exit reports and shutdown."""

from __future__ import annotations

import os
import time

import pytest

from terminals.runtime import processes
from terminals.runtime.errors import SessionLimitReached, SessionNotFound
from terminals.runtime.manager import Limits, SessionManager
from terminals.runtime.pty import ExitStatus, SpawnSpec

from .helpers import eventually
from .runtime_support import kill_all, run

PROMPT = "READY$ "
ENV = {"PATH": os.environ["PATH"], "PS1": PROMPT, "TERM": "xterm-256color", "HOME": "/tmp"}
BASH = ["bash", "--norc", "--noprofile"]


# Helpers


class Clock:
    """A clock that moves only when the test moves it."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def spec(argv: list[str]) -> SpawnSpec:
    return SpawnSpec(argv=argv, cwd="/tmp", env=dict(ENV))


def output_of(manager: SessionManager, session_id: str) -> str:
    session = manager.get(session_id)
    return session.buffer.read_bytes(0, session.buffer.end)[0].decode("utf-8", "replace")


def command_name(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as comm:
            return comm.read().strip()
    except OSError:
        return ""


def alive(pid: int) -> bool:
    """Whether pid is a running (not zombie) process."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


async def cleanup(manager: SessionManager, *session_pids: int) -> None:
    """Ends every terminal still hosted and anything left in the sessions the test started."""
    await manager.shutdown(grace=1.0)
    for pid in session_pids:
        kill_all(processes.session_members(pid))


# Creation and lookup


def test_manager_creates_and_finds_sessions():
    """create() starts a terminal that get() returns by id; an unknown id raises SessionNotFound."""

    async def scenario():
        manager = SessionManager()
        try:
            session = manager.create("t1", spec(["sleep", "600"]))
            assert manager.get("t1") is session
            assert "t1" in manager
            assert len(manager) == 1
            assert manager.active_count == 1
            assert manager.items() == [("t1", session)]
            assert session.is_alive is True
            assert session.buffer.max_lines == manager.limits.buffer_lines
            assert session.buffer.max_bytes == manager.limits.buffer_bytes

            with pytest.raises(SessionNotFound) as raised:
                manager.get("missing")
            assert raised.value.code == "TERMINAL_NOT_FOUND"
            assert raised.value.details == {"terminal_id": "missing"}
            assert "missing" not in manager
        finally:
            await cleanup(manager)

    run(scenario)


def test_manager_terminate_of_an_unknown_id_raises_session_not_found():
    """Ending a terminal the manager does not host raises SessionNotFound."""

    async def scenario():
        manager = SessionManager()
        with pytest.raises(SessionNotFound):
            await manager.terminate("missing")

    run(scenario)


def test_manager_refuses_sessions_beyond_max_sessions():
    """A create() past max_sessions live terminals raises SessionLimitReached; an ended one frees its place."""

    async def scenario():
        manager = SessionManager(limits=Limits(max_sessions=2))
        try:
            manager.create("a", spec(["sh", "-c", "read line; exit 0"]))
            manager.create("b", spec(["sleep", "600"]))
            with pytest.raises(SessionLimitReached) as raised:
                manager.create("c", spec(["sleep", "600"]))
            assert raised.value.code == "LIMIT_REACHED"
            assert raised.value.details == {"limit": 2}
            assert "c" not in manager
            assert len(manager) == 2

            manager.get("a").write(b"\n")
            assert await manager.get("a").wait_for_exit(timeout=10) == ExitStatus(exit_code=0, signal=None)
            assert manager.active_count == 1
            manager.create("c", spec(["sleep", "600"]))
            assert manager.active_count == 2
        finally:
            await cleanup(manager)

    run(scenario)


# Idle expiry


def test_manager_idle_sessions_follow_the_injected_clock():
    """A live terminal is idle once the clock passes its last input or output by more than idle_timeout."""

    async def scenario():
        clock = Clock(1000.0)
        manager = SessionManager(limits=Limits(idle_timeout=60.0), clock=clock)
        try:
            session = manager.create("quiet", spec(["cat"]))  # cat prints nothing until it gets input
            assert session.started_at == 1000.0
            clock.now = 1060.0
            assert manager.idle_sessions() == []  # exactly idle_timeout is not yet idle
            clock.now = 1060.5
            assert manager.idle_sessions() == ["quiet"]

            session.write(b"hello\n")  # input is activity
            assert session.last_activity == 1060.5
            assert manager.idle_sessions() == []
            await eventually(lambda: output_of(manager, "quiet").count("hello") == 2, what="the echo")
            clock.now = 1121.0
            assert manager.idle_sessions() == ["quiet"]
        finally:
            await cleanup(manager)

    run(scenario)


def test_manager_idle_sessions_count_output_as_activity(tmp_path):
    """Output from the terminal's process makes an idle terminal active again."""
    flag = tmp_path / "go"

    async def scenario():
        clock = Clock(1000.0)
        manager = SessionManager(limits=Limits(idle_timeout=60.0), clock=clock)
        try:
            manager.create(
                "waiting", spec(["sh", "-c", f"while [ ! -e {flag} ]; do sleep 0.02; done; echo woke; exec sleep 600"])
            )
            clock.now = 2000.0
            assert manager.idle_sessions() == ["waiting"]
            flag.touch()
            await eventually(lambda: "woke" in output_of(manager, "waiting"), what="the output")
            assert manager.get("waiting").last_activity == 2000.0
            assert manager.idle_sessions() == []
        finally:
            await cleanup(manager)

    run(scenario)


def test_manager_idle_sessions_leave_out_ended_terminals():
    """A terminal whose process has ended is never reported as idle."""

    async def scenario():
        clock = Clock(1000.0)
        manager = SessionManager(limits=Limits(idle_timeout=60.0), clock=clock)
        try:
            manager.create("ended", spec(["sh", "-c", "exit 0"]))
            manager.create("live", spec(["sleep", "600"]))
            assert await manager.get("ended").wait_for_exit(timeout=10) is not None
            clock.now = 5000.0
            assert manager.idle_sessions() == ["live"]
        finally:
            await cleanup(manager)

    run(scenario)


# Exit reports


def test_manager_reports_a_process_that_exits_by_itself():
    """on_exit gets the id and status of a terminal whose process ended on its own or was killed from outside."""

    async def scenario():
        reports: list[tuple[str, ExitStatus]] = []
        manager = SessionManager(on_exit=lambda session_id, status: reports.append((session_id, status)))
        try:
            manager.create("exits", spec(["sh", "-c", "exit 3"]))
            await eventually(lambda: len(reports) == 1, what="the first report")
            assert reports == [("exits", ExitStatus(exit_code=3, signal=None))]

            killed = manager.create("killed", spec(["sleep", "600"]))
            os.kill(killed.pid, 9)
            await eventually(lambda: len(reports) == 2, what="the second report")
            assert reports[1] == ("killed", ExitStatus(exit_code=None, signal="SIGKILL"))
            assert "exits" in manager  # an ended terminal stays until it is released
        finally:
            await cleanup(manager)
        assert len(reports) == 2

    run(scenario)


def test_manager_does_not_report_a_terminal_it_ends():
    """on_exit is not called for a terminal ended through terminate(); terminate() returns its status instead."""

    async def scenario():
        reports: list[tuple[str, ExitStatus]] = []
        manager = SessionManager(on_exit=lambda session_id, status: reports.append((session_id, status)))
        session = manager.create("ended", spec(BASH))
        try:
            await eventually(lambda: PROMPT in output_of(manager, "ended"), what="the prompt")
            status = await manager.terminate("ended", grace=5.0)
            assert status == ExitStatus(exit_code=None, signal="SIGHUP")
            assert "ended" not in manager
            with pytest.raises(SessionNotFound):
                manager.get("ended")
            assert processes.session_members(session.pid) == []
            assert reports == []
        finally:
            await cleanup(manager, session.pid)

    run(scenario)


# Shutdown


def test_manager_shutdown_ends_every_terminal():
    """shutdown() ends every terminal at once, frees them all and leaves no process of theirs."""

    async def scenario():
        reports: list[tuple[str, ExitStatus]] = []
        manager = SessionManager(on_exit=lambda session_id, status: reports.append((session_id, status)))
        shell = manager.create("bash", spec(BASH))
        dash = manager.create("dash", spec(["/bin/sh"]))
        program = manager.create("program", spec(["sleep", "600"]))
        pids = [shell.pid, dash.pid, program.pid]
        try:
            await eventually(lambda: PROMPT in output_of(manager, "bash"), what="the bash prompt")
            await eventually(lambda: PROMPT in output_of(manager, "dash"), what="the dash prompt")
            shell.write(b"sleep 300 &\n")
            await eventually(
                lambda: any(command_name(pid) == "sleep" for pid in processes.session_members(shell.pid)),
                what="the background job",
            )
            members = [pid for session_pid in pids for pid in processes.session_members(session_pid)]
            assert len(members) == 4

            started = time.monotonic()
            statuses = await manager.shutdown(grace=5.0)

            assert time.monotonic() - started < 5.0  # at once, and nobody needed the SIGKILL
            assert statuses == {
                "bash": ExitStatus(exit_code=None, signal="SIGHUP"),
                "dash": ExitStatus(exit_code=None, signal="SIGHUP"),
                "program": ExitStatus(exit_code=None, signal="SIGTERM"),
            }
            assert len(manager) == 0
            assert all(processes.session_members(pid) == [] for pid in pids)
            assert [pid for pid in members if alive(pid)] == []
            assert reports == []
        finally:
            await cleanup(manager, *pids)

    run(scenario)


def test_manager_shutdown_ends_the_jobs_of_a_shell_that_already_exited():
    """A background job outlives its shell's `exit`; shutdown() still ends it, since it is the terminal's process."""

    async def scenario():
        manager = SessionManager()
        shell = manager.create("bash", spec(BASH))
        try:
            await eventually(lambda: PROMPT in output_of(manager, "bash"), what="the prompt")
            shell.write(b"sleep 300 &\n")
            await eventually(
                lambda: any(command_name(pid) == "sleep" for pid in processes.session_members(shell.pid)),
                what="the background job",
            )
            shell.write(b"exit\n")
            assert await shell.wait_for_exit(timeout=10) == ExitStatus(exit_code=0, signal=None)
            job = processes.session_members(shell.pid)
            assert [command_name(pid) for pid in job] == ["sleep"]

            await manager.shutdown(grace=2.0)

            assert len(manager) == 0
            assert processes.session_members(shell.pid) == [], "the background job survived shutdown()"
        finally:
            await cleanup(manager, shell.pid)

    run(scenario)
