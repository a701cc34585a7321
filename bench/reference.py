"""The limit: minimal asyncio programs (`python -m bench.reference KIND`) on the same PTY as the service's."""

from __future__ import annotations

import argparse
import asyncio
import errno
import fcntl
import json
import os
import signal
import struct
import subprocess
import sys
import termios
import time

class Pty:
    """A process on a new PTY, read by the event loop into a bytearray.

    The spawn makes it a session leader; bash takes the PTY as its controlling terminal itself at its start (the
    service's launch shell opens it for any program; cat and seq need none for what is measured here)."""

    def __init__(self, argv: list[str]) -> None:
        master, slave = os.openpty()
        fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": os.environ.get("HOME", "/"),
            "TERM": "xterm-256color",
            "LANG": "C.UTF-8",
        }
        self.process = subprocess.Popen(
            argv,
            start_new_session=True,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=env,
            close_fds=True,
            restore_signals=True,
        )
        os.close(slave)
        os.set_blocking(master, False)
        self.fd = master
        self.data = bytearray()
        self.eof = False
        self.changed = asyncio.Event()
        asyncio.get_running_loop().add_reader(master, self._on_readable)

    def _on_readable(self) -> None:
        try:
            chunk = os.read(self.fd, 65536)
        except BlockingIOError:
            return
        except OSError as error:
            if error.errno != errno.EIO:
                raise
            chunk = b""
        if chunk:
            self.data += chunk
        else:
            self.eof = True
            asyncio.get_running_loop().remove_reader(self.fd)
        self.changed.set()

    async def until(self, done, timeout: float = 60.0) -> None:
        async def wait() -> None:
            while not done(self):
                if self.eof:
                    raise EOFError(f"the process ended first; last output {bytes(self.data[-80:])!r}")
                self.changed.clear()
                await self.changed.wait()

        await asyncio.wait_for(wait(), timeout)

    def write(self, data: bytes) -> None:
        os.write(self.fd, data)

    def close(self) -> None:
        if not self.eof:
            asyncio.get_running_loop().remove_reader(self.fd)
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()
        os.close(self.fd)


def at_prompt(pty: Pty, since: int = 0) -> bool:
    return pty.data.endswith((b"$ ", b"# ")) and len(pty.data) > since


async def ingest(command: str, expected: int) -> dict:
    """Seconds from spawning `bash -c command` until expected bytes of its output were read."""
    started = time.perf_counter()
    pty = Pty(["bash", "-c", command])
    try:
        await pty.until(lambda p: len(p.data) >= expected or p.eof, timeout=600)
        seconds = time.perf_counter() - started
        return {"seconds": seconds, "bytes": len(pty.data)}
    finally:
        pty.close()


async def echo(count: int) -> dict:
    """Seconds from writing one key to reading its echo, with `cat` on the PTY."""
    pty = Pty(["cat"])
    try:
        await asyncio.sleep(0.2)
        pty.write(b"probe\r")
        await pty.until(lambda p: p.data.count(b"probe") >= 2)
        latencies = []
        for _ in range(count):
            seen = len(pty.data)
            started = time.perf_counter()
            pty.write(b"x")
            await pty.until(lambda p, seen=seen: b"x" in p.data[seen:])
            latencies.append(time.perf_counter() - started)
        return {"latencies": latencies}
    finally:
        pty.close()


async def first_prompt(count: int) -> dict:
    """Seconds from spawning an interactive bash until its first prompt, count times."""
    latencies = []
    for _ in range(count):
        started = time.perf_counter()
        pty = Pty(["bash"])
        try:
            await pty.until(at_prompt, timeout=30)
            latencies.append(time.perf_counter() - started)
        finally:
            pty.close()
    return {"latencies": latencies}


async def command(count: int, line: str, rcfile: str | None = None) -> dict:
    """Seconds from typing a command line at bash's prompt until the next prompt, count times. With rcfile (the
    service's terminals/runtime/shell_integration/bashrc), what the service's own shell hooks add to each line."""
    pty = Pty(["bash", "--rcfile", rcfile] if rcfile else ["bash"])
    try:
        await pty.until(at_prompt, timeout=30)
        latencies = []
        for _ in range(count):
            seen = len(pty.data)
            started = time.perf_counter()
            pty.write(line.encode() + b"\r")
            await pty.until(lambda p, seen=seen: at_prompt(p, seen) and b"\n" in p.data[seen:], timeout=60)
            latencies.append(time.perf_counter() - started)
        return {"latencies": latencies}
    finally:
        pty.close()


async def run(*args: str, home: str) -> dict:
    """Runs one limit program in its own process (a loop to itself); returns the JSON object it printed.

    These are the fastest a Python service could ingest output, echo a key, show a first prompt or run a
    command, on this machine in this run.
    """
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bench.reference",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "HOME": home},
    )
    stdout, stderr = await process.communicate()
    if process.returncode != 0:
        raise RuntimeError(f"bench.reference {args[0]} exited with {process.returncode}: {stderr.decode()[-300:]}")
    return json.loads(stdout)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.reference")
    kinds = parser.add_subparsers(dest="kind", required=True)
    ingest_parser = kinds.add_parser("ingest")
    ingest_parser.add_argument("--command", required=True)
    ingest_parser.add_argument("--bytes", type=int, required=True)
    for name in ("echo", "prompt", "command"):
        kind = kinds.add_parser(name)
        kind.add_argument("--count", type=int, required=True)
        if name == "command":
            kind.add_argument("--line", required=True)
            kind.add_argument("--rcfile", help="bash's startup file, e.g. terminals/runtime/shell_integration/bashrc")
    options = parser.parse_args()
    if options.kind == "ingest":
        report = asyncio.run(ingest(options.command, options.bytes))
    elif options.kind == "echo":
        report = asyncio.run(echo(options.count))
    elif options.kind == "prompt":
        report = asyncio.run(first_prompt(options.count))
    else:
        report = asyncio.run(command(options.count, options.line, options.rcfile))
    json.dump(report, sys.stdout)


if __name__ == "__main__":
    main()
