"""The terminal runtime's own memory, without Django or the service around it: python -m bench.runtime_memory

Starts 5 bash terminals, then 100 more, each until its first output, and prints the RSS they added per terminal
(VmRSS of this process); then the memory a shell terminal's command history holds per command, traced, over 1000
commands (the history keeps the last 1000). Figure 6 measures the whole service, where this part is small."""

from __future__ import annotations

import asyncio
import gc
import os
import tempfile
import tracemalloc


def rss_kib() -> int:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))


async def per_terminal(count: int = 100) -> float:
    from terminals.runtime.manager import SessionManager
    from terminals.runtime.pty import SpawnSpec

    home = tempfile.mkdtemp(prefix="bench-home-")  # empty: no dotfiles change what bash does
    env = {"PATH": os.environ["PATH"], "TERM": "xterm-256color", "HOME": home, "PS1": "$ "}
    manager = SessionManager()

    async def start(name: str):
        session = manager.create(name, SpawnSpec(argv=["bash"], cwd="/tmp", env=dict(env)))
        for _ in range(1000):  # at most 10 s
            if session.buffer.end:
                return
            await asyncio.sleep(0.01)
        raise TimeoutError(f"{name} showed no output within 10 s")

    try:
        for number in range(5):
            await start(f"warm-up-{number}")
        gc.collect()
        before = rss_kib()
        for number in range(count):
            await start(f"terminal-{number}")
        gc.collect()
        return (rss_kib() - before) / count
    finally:
        await manager.shutdown(grace=1.0)
        os.rmdir(home)


async def per_command(count: int = 1000) -> float:
    from terminals.runtime.commands import CommandTracker

    tracker = CommandTracker()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for number in range(count):
        record, _ = tracker.begin(f"echo {number}")
        record.finish(exit_code=0, at_byte=number, when=0.0)
        tracker.current = None
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    return held / count


def main() -> None:
    print(f"RSS per idle terminal, runtime alone: {asyncio.run(per_terminal()):.2f} KiB")
    print(f"memory per command in a terminal's history: {asyncio.run(per_command()):.0f} bytes")


if __name__ == "__main__":
    main()
