"""Small helpers many test modules share: reading terminal text as a person sees it, and finding processes."""

from __future__ import annotations

import asyncio
import inspect
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable

from .servers import ROOT, service_env

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


LEFTOVER_SECONDS = 10.0


def run(coroutine, timeout: float = 120.0):
    """Runs one test's client side to its end with an overall deadline: a hang fails the test, not the run. So
    does a task it leaves behind that does not end once cancelled (asyncio.run would wait on it for ever, as
    closing a loop waits on every task): the test fails naming it and where it waits."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        return loop.run_until_complete(_bounded(coroutine, timeout))
    finally:
        try:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            asyncio.set_event_loop(None)
            loop.close()


async def _bounded(coroutine, timeout: float):
    try:
        return await asyncio.wait_for(coroutine, timeout)
    finally:
        leftovers = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for task in leftovers:
            task.cancel()
        stuck = (await asyncio.wait(leftovers, timeout=LEFTOVER_SECONDS))[1] if leftovers else set()
        if stuck:
            where = "\n".join(f"{task!r} at {task.get_stack()[-1:] or 'its start'}" for task in stuck)
            raise AssertionError(f"{len(stuck)} tasks left behind did not end once cancelled:\n{where}")


async def eventually(probe, what: str = "a condition", timeout: float = 10.0, interval: float = 0.02):
    """Awaits until probe() (plain or async) answers something true, which it returns; fails naming what once
    timeout seconds have passed. The probes are interval seconds apart, within the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        found = probe()
        if inspect.isawaitable(found):
            found = await found
        if found:
            return found
        assert time.monotonic() < deadline, f"timed out after {timeout:g} s waiting for {what}"
        await asyncio.sleep(interval)


def clean(line: str) -> str:
    """A line as a person sees it: without escape sequences or what a carriage return wrote over."""
    return ANSI.sub("", line).rsplit("\r", 1)[-1]


def printed(output: str, line: str) -> bool:
    """Whether the output contains exactly this line (the echoed command line does not count)."""
    return line in [clean(text) for text in output.split("\n")]


def state(pid: int) -> str | None:
    """The process's state letter (R, S, Z, ...), or None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def command_line(pid: int) -> str:
    """The process's command line, its arguments joined by spaces ("" once it is gone or a zombie)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            return cmdline.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def environment(pid: int) -> list[bytes]:
    """The process's environment as it started, one b"NAME=value" each ([] when it cannot be read)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as environ:
            return environ.read().split(b"\0")
    except OSError:
        return []


def live_processes(matches: Callable[[int], bool]) -> list[int]:
    """Pids of the processes, zombies left out, for which matches(pid) holds."""
    found = []
    for name in filter(str.isdigit, os.listdir("/proc")):
        pid = int(name)
        if matches(pid) and state(pid) not in (None, "Z"):
            found.append(pid)
    return found


def marked(terminal_id: str) -> list[int]:
    """Live processes carrying the terminal's environment marker."""
    marker = f"TERMINALS_TERMINAL_ID={terminal_id}".encode()
    return live_processes(lambda pid: marker in environment(pid))


def manage(*args: str, timeout: float = 60, **env: str) -> subprocess.CompletedProcess:
    """Runs `manage.py ARGS` as an operator would, against the tests' database; returns the finished process."""
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=service_env(**env),
                          capture_output=True, text=True, timeout=timeout)


def names_field(error: dict, field: str) -> bool:
    """The error envelope names field: as its one field, or among the fields a validation refused."""
    details = error.get("details") or {}
    return details.get("field") == field or field in (details.get("fields") or {})
