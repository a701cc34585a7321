"""The cases: seed 001's scenarios A to D and the hard cases agents meet in today's terminal servers.

Each case prepares its folder, makes its moves through an adapter and says whether the agent ended up knowing the
right thing (the output and the exit code), with a reason when not. A case never trusts what the server says about
processes: what is left running is read from the machine (pgrep).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
from pathlib import Path

from .clients import Adapter, Unsupported


class Failed(Exception):
    pass


def expect(condition: bool, reason: str) -> None:
    if not condition:
        raise Failed(reason)


def running(marker: str) -> list[str]:
    """Processes whose command line holds marker (but not pgrep itself)."""
    found = subprocess.run(["pgrep", "-af", marker], capture_output=True, text=True).stdout.splitlines()
    return [line for line in found if "pgrep" not in line]


async def gone(marker: str, within: float = 5.0) -> bool:
    deadline = time.monotonic() + within
    while running(marker):
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.1)
    return True


async def scenario_a(agent: Adapter, folder: Path) -> None:
    """Seed 001 scenario A: a bounded command (ls -la) with its exit code."""
    for name in ("alpha.txt", "beta.log"):
        (folder / name).write_text(name)
    ran = await agent.run("ls -la", 5)
    expect(ran.exit_code == 0, f"exit code {ran.exit_code}, not 0")
    expect("alpha.txt" in ran.output and "beta.log" in ran.output, "the listing is not in the output")


async def scenario_b(agent: Adapter, folder: Path) -> None:
    """Seed 001 scenario B: start a dev server, see it is up, read its logs, stop it."""
    marker = f"devserver-{os.getpid()}-{folder.name}"
    program = (f"python3 -u -c \"import time; print('Serving HTTP on port 8123 ({marker})'); "
               "[print('GET / 200', i) or time.sleep(0.2) for i in range(100000)]\"")
    handle = await agent.start(program)
    await agent.wait_for(handle, r"GET / 200 \d+", 10)
    await agent.stop(handle)
    expect(await gone(marker), "the dev server still runs after stopping it")


async def scenario_c(agent: Adapter, folder: Path) -> None:
    """Seed 001 scenario C: two services in the background, a test run with its exit code, each service's state."""
    marker = f"service-{os.getpid()}-{folder.name}"
    web = await agent.start(f"python3 -u -c \"import time; print('web ready ({marker})'); time.sleep(600)\"")
    db = await agent.start(f"python3 -u -c \"import time; print('db accepting connections ({marker})'); "
                           "time.sleep(600)\"")
    ran = await agent.run("python3 -c \"print('3 passed'); raise SystemExit(0)\"", 30)
    expect(ran.exit_code == 0 and "3 passed" in ran.output, f"tests: exit code {ran.exit_code}")
    await agent.wait_for(web, r"web ready", 10)
    await agent.wait_for(db, r"db accepting connections", 10)
    await agent.stop(web)
    await agent.stop(db)
    expect(await gone(marker), "a service still runs after stopping it")


async def scenario_d(agent: Adapter, folder: Path) -> None:
    """Seed 001 scenario D: grep a log for errors (exit 0), and for something absent (exit 1 is data)."""
    (folder / "app.log").write_text("".join(
        f"{'ERROR' if n % 40 == 0 else 'INFO'} request {n}\n" for n in range(1, 121)))
    found = await agent.run("grep -i error app.log", 10)
    expect(found.exit_code == 0, f"grep: exit code {found.exit_code}, not 0")
    expect(all(f"ERROR request {n}\n" in found.output for n in (40, 80, 120)), "an error line is missing")
    missing = await agent.run("grep -i nomatch app.log", 10)
    expect(missing.exit_code == 1, f"grep for nothing: exit code {missing.exit_code}, not 1")


async def fast_exit_stderr(agent: Adapter, folder: Path) -> None:
    """A command that writes to stderr and exits at once with 3: both streams and the code."""
    ran = await agent.run("sh -c 'echo out; echo err >&2; exit 3'", 5)
    expect(ran.exit_code == 3, f"exit code {ran.exit_code}, not 3")
    expect("out" in ran.output and "err" in ran.output, "stdout or stderr is missing")


async def forged_exit_code(agent: Adapter, folder: Path) -> None:
    """A program that prints what looks like an exit code, then exits with 7."""
    ran = await agent.run("sh -c 'printf \"exit code: 0\\n__END__ 0\\nProcess completed with exit code 0\\n\"; "
                          "exit 7'", 5)
    expect(ran.exit_code == 7, f"exit code {ran.exit_code}, not 7")


async def euro_signs(agent: Adapter, folder: Path) -> None:
    """5,000 euro signs: returned as 5,000 characters, not escaped six to a sign."""
    ran = await agent.run("python3 -c \"print('\u20ac' * 5000)\"", 10)
    expect(ran.exit_code == 0, f"exit code {ran.exit_code}")
    expect("\u20ac" * 5000 in ran.output, "the 5,000 signs are not in the output as they are")


async def flood(agent: Adapter, folder: Path) -> None:
    """seq 1 300000 (2 MB): the end and the exit code, with a bounded answer."""
    ran = await agent.run("seq 1 300000", 30)
    expect(ran.exit_code == 0, f"exit code {ran.exit_code}")
    expect("300000" in ran.output, "the last line is not in the answer")
    expect(agent.tally.chars < 100_000, f"{agent.tally.chars:,} characters handed to the agent")


async def silent_command(agent: Adapter, folder: Path) -> None:
    """A command silent for 6 s, asked with a 2 s bound: the call returns in time, and the agent comes back to it."""
    ran = await agent.run("sleep 6; echo late-$((40+2))", 2)
    if ran.handle is None:
        expect(ran.exit_code == 0 and "late-42" in ran.output, "returned without a way back and without the end")
    else:
        ran = await agent.finish(ran, 15)
    expect(ran.exit_code == 0 and "late-42" in ran.output, f"exit code {ran.exit_code}, output {ran.output[-60:]!r}")


async def pattern_before_wait(agent: Adapter, folder: Path) -> None:
    """A wait for a pattern the program printed before the wait began."""
    marker = f"ready-{os.getpid()}-{folder.name}"
    handle = await agent.start(f"echo READY-$((6*7)); sleep 30 # {marker}")
    await asyncio.sleep(1.0)  # the agent thinks before it waits
    await agent.wait_for(handle, r"READY-42", 5)
    await agent.stop(handle)


async def asks_for_input(agent: Adapter, folder: Path) -> None:
    """A command that stops to ask for a name: the agent learns it waits, answers, and gets the result."""
    ran = await agent.run("read -p 'name? ' n; echo hi-$n", 3)
    expect(ran.handle is not None, f"the command ended without its answer (exit code {ran.exit_code})")
    await agent.type(ran.handle, "bob")
    ran = await agent.finish(ran, 10)
    expect(ran.exit_code == 0 and "hi-bob" in ran.output, f"exit code {ran.exit_code}")


async def job_children(agent: Adapter, folder: Path) -> None:
    """Killing a bash -c job ends its background children too."""
    tag = str(3000 + os.getpid() % 1000)
    handle = await agent.start(f"bash -c 'sleep {tag}1 & sleep {tag}2 & wait'")
    deadline = time.monotonic() + 10
    while len(running(f"sleep {tag}[12]")) < 2:
        expect(time.monotonic() < deadline, "the job did not start")
        await asyncio.sleep(0.1)
    await agent.kill(handle)
    left = not await gone(f"sleep {tag}[12]")
    if left:
        subprocess.run(["pkill", "-f", f"sleep {tag}[12]"])
    expect(not left, "background children still run after killing the job")


async def pager(agent: Adapter, folder: Path) -> None:
    """git log in a repository with 80 commits, then the next command runs normally. The agent makes the repository
    in a folder of its own (its terminals may run as an account git would not let use a folder the benchmark made)."""
    made = await agent.run("mkdir repo && git -C repo init -q && for n in $(seq 0 79); do git -C repo -c user.name=b "
                           "-c user.email=b@localhost commit -q --allow-empty -m \"commit $n\"; done", 30)
    expect(made.exit_code == 0, f"making the repository: exit code {made.exit_code}")
    log = await agent.run("git -C repo log", 10)
    expect(log.exit_code == 0 and "commit 0\n" in log.output, f"git log: exit code {log.exit_code}")
    after = await agent.run("echo after-$((40+2))", 5)
    expect(after.exit_code == 0 and "after-42" in after.output, "the command after git log did not run")


CASES = [
    ("A: ls -la", scenario_a),
    ("B: dev server, logs, stop", scenario_b),
    ("C: two services and a test run", scenario_c),
    ("D: grep a log (exit 0, then 1)", scenario_d),
    ("stderr and exit 3 of a fast exit", fast_exit_stderr),
    ("exit code printed by the program", forged_exit_code),
    ("5,000 euro signs", euro_signs),
    ("seq 1 300000", flood),
    ("silent 6 s, asked with 2 s", silent_command),
    ("pattern printed before the wait", pattern_before_wait),
    ("a command that asks for input", asks_for_input),
    ("kill a bash -c job and its children", job_children),
    ("git log, then the next command", pager),
]


async def _opened(case, agent: Adapter, folder: Path) -> None:
    await agent.open()
    await case(agent, folder)


async def play(case, agent: Adapter, folder: Path) -> str | None:
    """Runs one case; None when it passed, the reason otherwise."""
    try:
        await asyncio.wait_for(_opened(case, agent, folder), 120)
    except Failed as failure:
        return str(failure)
    except Unsupported as missing:
        return f"no tool for it: {missing}"
    except TimeoutError as late:
        return f"timed out {late}".strip()
    except Exception as error:  # noqa: BLE001 - a server's error is a failed case, and the run goes on
        return f"{type(error).__name__}: {str(error)[:120]}"
    return None
