"""The runtime's one way of signalling (runtime/signals.py): only a terminal's own processes, never the caller's.

Every test here has the test process itself catch SIGUSR1, so a signal that strays to the caller's own
process group is seen (and does not end the test run).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from terminals.runtime import launch, signals
from terminals.runtime.buffer import OutputBuffer
from terminals.runtime.pty import PtySession, SpawnSpec

from .runtime_support import cleaned_up, cleanup, run, wait_until

ENV = {"PATH": os.environ["PATH"], "HOME": "/tmp", "TERM": "xterm-256color"}
# A launcher that waits before exec'ing the rest (setsid --ctty ...): a wide, certain window in which the terminal's
# first process runs but its session does not exist yet, as in the first moments of every terminal.


@pytest.fixture
def before_setsid(monkeypatch, tmp_path):
    """Terminals started meanwhile stay before their session exists until the test lets them on: their first
    process is a stand-in for setsid that waits for a file before it runs the real one."""
    gate = tmp_path / "go"
    stand_in = tmp_path / "setsid"
    # Python, which leaves SIGUSR1 at its default action (a shell may catch it, and the runtime would then hang up).
    stand_in.write_text(f"#!{sys.executable}\nimport os, sys, time\n"
                        f"while not os.path.exists({str(gate)!r}):\n    time.sleep(0.01)\n"
                        f"os.execv({launch.SETSID!r}, [{launch.SETSID!r}, *sys.argv[1:]])\n")
    stand_in.chmod(0o755)
    monkeypatch.setattr(launch, "SETSID", str(stand_in))
    return gate


@pytest.fixture
def strays():
    """Counts the SIGUSR1s this process receives while the test runs."""
    received = []
    previous = signal.signal(signal.SIGUSR1, lambda signum, frame: received.append(signum))
    yield received
    signal.signal(signal.SIGUSR1, previous)


def spawn(argv: list[str], launch: tuple[str, ...] = ()) -> PtySession:
    spec = SpawnSpec(argv=argv, cwd="/tmp", env=dict(ENV), launch=launch)
    session = PtySession(spec, buffer=OutputBuffer(max_lines=1000, max_bytes=1 << 20))
    session.start()
    return session


def detached_sleeper(**env: str) -> subprocess.Popen:
    """A process in a session of its own that is no terminal's."""
    return subprocess.Popen(["sleep", "60"], start_new_session=True, env={**ENV, **env})


def stop(process: subprocess.Popen) -> None:
    process.kill()
    process.wait()


# Process groups


@pytest.mark.parametrize("group", [0, 1, -1], ids=["zero", "init", "minus-one"])
def test_signal_group_refuses_ids_that_stand_for_many_processes(strays, group):
    session_leader = detached_sleeper()
    try:
        # Refused for what the id is, before any lookup: the later checks must not be what saves the service.
        with pytest.raises(signals.SignalRefused, match=f"process group {group} is not the terminal's"):
            signals.signal_group(group, signal.SIGUSR1, session=session_leader.pid)
        assert session_leader.poll() is None
    finally:
        stop(session_leader)
    assert strays == []


def test_signal_group_refuses_the_callers_own_group_and_pid(strays):
    session_leader = detached_sleeper()
    try:
        for group in (os.getpgrp(), os.getpid()):
            with pytest.raises(signals.SignalRefused):
                signals.signal_group(group, signal.SIGUSR1, session=session_leader.pid)
        # Nor when the "terminal's session" named is the caller's own.
        with pytest.raises(signals.SignalRefused):
            signals.signal_group(os.getpgrp(), signal.SIGUSR1, session=os.getsid(0))
    finally:
        stop(session_leader)
    assert strays == []


def test_signal_group_refuses_a_group_of_another_session():
    terminal, other = detached_sleeper(), detached_sleeper()
    try:
        with pytest.raises(signals.SignalRefused):
            signals.signal_group(other.pid, signal.SIGTERM, session=terminal.pid)
        assert other.poll() is None
        signals.signal_group(terminal.pid, signal.SIGTERM, session=terminal.pid)  # its own group: sent
        assert terminal.wait(10) == -signal.SIGTERM
    finally:
        stop(terminal)
        stop(other)


# Single processes


def test_signal_owned_spares_the_caller_its_session_and_ancestors_whatever_owned_says(strays):
    beside = subprocess.Popen(["sleep", "60"], env=ENV)  # in the caller's session and group, like a web process
    try:
        sent = signals.signal_owned([0, 1, os.getpid(), os.getppid(), beside.pid], signal.SIGUSR1, lambda pid: True)
        assert sent.signalled == []
        assert set(sent.spared) == {0, 1, os.getpid(), os.getppid(), beside.pid}
        assert beside.poll() is None
    finally:
        stop(beside)
    assert strays == []


def test_signal_owned_sends_only_to_what_owned_accepts():
    mine, not_mine = detached_sleeper(), detached_sleeper()
    try:
        sent = signals.signal_owned([mine.pid, not_mine.pid], signal.SIGTERM, lambda pid: pid == mine.pid)
        assert sent.signalled == [mine.pid]
        assert mine.wait(10) == -signal.SIGTERM
        assert not_mine.poll() is None
    finally:
        stop(mine)
        stop(not_mine)


def test_kill_marked_spares_processes_started_together_with_the_service(monkeypatch):
    """A service started inside a terminal carries that terminal's marker, as do the processes started beside it;
    ending that terminal's processes by marker must not end the service's."""
    monkeypatch.setenv(signals.MARKER_VARIABLE, "outer-terminal")
    sibling = detached_sleeper(**{signals.MARKER_VARIABLE: "outer-terminal"})
    lost = detached_sleeper(**{signals.MARKER_VARIABLE: "lost-terminal"})
    try:
        killed = signals.kill_marked(signals.MARKER_VARIABLE, ["outer-terminal", "lost-terminal"])
        assert killed == [lost.pid]
        assert lost.wait(10) == -signal.SIGKILL
        assert sibling.poll() is None
    finally:
        stop(sibling)
        stop(lost)


# A terminal before and after its session exists


def test_signal_before_the_session_exists_goes_to_the_first_process_only(strays, before_setsid):
    """Right after the start the PTY has no foreground group (tcgetpgrp answers 0) and the first process is still
    in the caller's session and group: the signal goes to the first process, never to group 0 (the caller's)."""

    async def scenario():
        async with cleaned_up(spawn(["sleep", "100"])) as session:
            assert session.foreground_group() == 0
            assert not session.has_session
            assert session.signal_foreground(signal.SIGUSR1) == session.pid
            status = await session.wait_for_exit(10)
            assert status is not None and status.signal == "SIGUSR1"

    run(scenario)
    assert strays == []


def test_terminate_before_the_session_exists_ends_the_first_process_only(strays, before_setsid):
    async def scenario():
        async with cleaned_up(spawn(["sleep", "100"])) as session:
            assert not session.has_session
            status = await session.terminate(signal.SIGUSR1, grace=5.0)
            assert status is not None and status.signal == "SIGUSR1"

    run(scenario)
    assert strays == []


def test_signal_after_the_session_exists_goes_to_its_foreground_group(strays):
    async def scenario():
        async with cleaned_up(spawn(["sleep", "100"])) as session:
            await wait_until(lambda: session.foreground_group() == session.pid, what="the session to start")
            assert session.has_session
            assert session.signal_foreground(signal.SIGUSR1) == session.pid
            status = await session.wait_for_exit(10)
            assert status is not None and status.signal == "SIGUSR1"

    run(scenario)
    assert strays == []


def test_ending_a_terminal_spares_a_process_beside_the_service_that_carries_its_marker():
    """The marker finds what a terminal started, wherever it went; a process in the service's own session that
    carries it (as one started together with the service would) is not the terminal's, and its end waits for it
    neither."""

    async def scenario():
        spec = SpawnSpec(argv=["sleep", "100"], cwd="/tmp", env={**ENV, signals.MARKER_VARIABLE: "terminal-1"})
        session = PtySession(spec, buffer=OutputBuffer(max_lines=1000, max_bytes=1 << 20))
        session.start()
        beside = subprocess.Popen(["sleep", "60"], env={**ENV, signals.MARKER_VARIABLE: "terminal-1"})
        try:
            await wait_until(lambda: session.has_session, what="the session to start")
            assert beside.pid not in session.members()
            status = await session.terminate(signal.SIGTERM, grace=30.0)
            assert status is not None and status.signal == "SIGTERM"
            assert beside.poll() is None
        finally:
            stop(beside)
            await cleanup(session)

    run(scenario, timeout=20)
