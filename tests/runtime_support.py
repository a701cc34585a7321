"""Helpers shared by the runtime tests: running a scenario with a deadline or a watchdog, polling, ending sessions."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable

from terminals.runtime import processes


def run(scenario: Callable[[], object], timeout: float = 30.0) -> None:
    """Runs an async scenario with an overall deadline; its finally blocks still run on timeout."""

    async def bounded():
        await asyncio.wait_for(scenario(), timeout)

    asyncio.run(bounded())


def run_with_watchdog(scenario: Callable[[], object], sessions: list, timeout: float) -> None:
    """Runs the scenario in a thread, so a blocked event loop fails the test instead of hanging it."""
    outcome: dict[str, BaseException] = {}

    def target():
        try:
            asyncio.run(scenario())
        except BaseException as error:  # noqa: BLE001 - handed to the test thread
            outcome["error"] = error

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        for session in sessions:  # unblock the stuck thread by taking the session's processes away
            kill_all(processes.session_members(session.pid))
        thread.join(5)
        raise AssertionError(f"the event loop was blocked for more than {timeout}s")
    if "error" in outcome:
        raise outcome["error"]


async def wait_until(predicate: Callable[[], bool], *, timeout: float = 10.0, session=None,
                     what: str = "a condition", tail: Callable[[], list[str]] = list) -> None:
    """Polls predicate until it holds; wakes up early on new output of session; tail() explains a timeout."""
    deadline = time.monotonic() + timeout
    while not predicate():
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}; last lines: {tail()!r}")
        if session is not None:
            await session.wait_for_output(min(remaining, 0.05))
        else:
            await asyncio.sleep(min(remaining, 0.01))


@contextlib.asynccontextmanager
async def cleaned_up(session):
    """`async with cleaned_up(spawn(...)) as session:` the session, ended and freed however the block ends."""
    try:
        yield session
    finally:
        await cleanup(session)


async def cleanup(session) -> None:
    """Ends whatever is left of the session and frees it."""
    if session.is_alive or processes.session_members(session.pid):
        await session.terminate(grace=1.0)
    session.close()


def kill_all(pids: list[int]) -> None:
    """SIGKILLs pids the test started itself (test cleanup; the service signals through runtime/signals.py)."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def gone(pid: int) -> bool:
    """Whether pid has ended (exited, or a zombie waiting to be reaped)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True  # gone entirely


def start_heartbeat() -> tuple[asyncio.Task, list[float]]:
    """A task ticking every 10 ms; the gaps between its ticks show whether the event loop was ever blocked."""
    gaps: list[float] = []

    async def heartbeat():
        last = time.monotonic()
        while True:
            await asyncio.sleep(0.01)  # the tick being measured, not a wait for a condition
            now = time.monotonic()
            gaps.append(now - last)
            last = now

    return asyncio.create_task(heartbeat()), gaps
