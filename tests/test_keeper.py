"""Terminals outlive their worker (issue 33), at the runtime's level: a worker under the keeper
(terminals/runtime/keeper.py) is killed with SIGKILL, or restarted with SIGHUP to the keeper, and the next worker
hosts the same terminals: the same pids, every byte from offset 0 as it was, a counter's lines going on with none
lost or repeated, a program that exited meanwhile reported with its exit code, a command in flight finishing with
its own. SIGTERM still ends the terminals. The worker here is tests/keeper_worker.py: the runtime without Django."""

from __future__ import annotations

import base64
import json
import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from .runtime_support import gone
from .servers import wait_for

ROOT = Path(__file__).resolve().parent.parent
COUNTER = ["sh", "-c", "i=0; while :; do i=$((i+1)); echo n=$i; sleep 0.02; done"]
SLOW_COUNTER = ["sh", "-c", "i=0; while :; do i=$((i+1)); echo n=$i; sleep 0.25; done"]


class KeptWorker:
    """The keeper, running tests/keeper_worker.py, and a way to ask that worker things."""

    def __init__(self, tmp_path: Path, *options: str) -> None:
        self.control = str(tmp_path / "control.sock")
        # Append-only: the processes share this file's offset with the test, so the test reads it by its path
        # and never moves where they write (a seek here once made a worker write over the keeper's line).
        self.log_path = tmp_path / "keeper.log"
        self.log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        env = {**os.environ, "HOME": str(tmp_path), "PYTHONUNBUFFERED": "1"}
        self.keeper = subprocess.Popen([sys.executable, "-m", "terminals.runtime.keeper", *options, "--",
                                        sys.executable, str(ROOT / "tests" / "keeper_worker.py"), self.control],
                                       cwd=ROOT, env=env, stdout=self.log, stderr=subprocess.STDOUT)
        self.ready = self.wait_ready(0)

    def readies(self) -> list[dict]:
        return [json.loads(line) for line in self.text().splitlines()
                if line.startswith('{"ready"')]

    def wait_ready(self, seen: int) -> dict:
        """The worker's announcement after the first seen ones: its pid, and how many terminals it adopted."""
        readies = wait_for(lambda: (lambda found: found if len(found) > seen else None)(self.readies()), 30,
                           "the worker to be ready")
        return readies[seen]

    def ask(self, **request) -> dict:
        with socket.socket(socket.AF_UNIX) as sock:
            sock.settimeout(10)
            sock.connect(self.control)
            sock.sendall(json.dumps(request).encode() + b"\n")
            answer = json.loads(sock.makefile().readline())
        assert answer.pop("ok"), answer
        return answer

    def output(self, terminal: str) -> bytes:
        return base64.b64decode(self.ask(op="read", id=terminal)["data"])

    def restart(self, how: str) -> dict:
        """SIGKILL to the worker, or SIGHUP to the keeper; the next worker's announcement."""
        seen = len(self.readies())
        if how == "kill":
            os.kill(self.ready["ready"], signal.SIGKILL)
        else:
            os.kill(self.keeper.pid, signal.SIGHUP)
        self.ready = self.wait_ready(seen)
        return self.ready

    def text(self) -> str:
        return self.log_path.read_bytes().decode(errors="replace")

    def stop(self) -> int:
        if self.keeper.poll() is None:
            self.keeper.send_signal(signal.SIGTERM)
        code = self.keeper.wait(30)
        self.log.close()
        return code


@pytest.fixture
def kept(tmp_path):
    worker = KeptWorker(tmp_path)
    yield worker
    if worker.keeper.poll() is None:
        worker.keeper.kill()
        worker.keeper.wait()
    if not worker.log.closed:
        worker.log.close()


def counts(output: bytes) -> list[int]:
    return [int(number) for number in re.findall(rb"n=(\d+)\r\n", output)]


@pytest.mark.parametrize("how", ["kill", "hup"])
def test_terminals_outlive_their_worker(kept, how):
    first_worker = kept.ready["ready"]
    pids = {terminal: kept.ask(op="create", id=terminal, argv=argv)["pid"] for terminal, argv in (
        ("counter", COUNTER), ("sleeper", ["sleep", "100"]), ("nine", ["sh", "-c", "sleep 1.5; exit 9"]))}
    pids["shell"] = kept.ask(op="create", id="shell", argv=["bash"], shell=True)["pid"]
    wait_for(lambda: len(counts(kept.output("counter"))) >= 20, 30, "the counter to count")
    wait_for(lambda: re.search(rb"[$#] $", kept.output("shell")), 30, "the shell's prompt")
    command = kept.ask(op="run", id="shell", command="sleep 2; (exit 7)")["commandId"]
    before = {terminal: kept.output(terminal) for terminal in ("counter", "shell")}

    ready = kept.restart(how)
    assert ready["ready"] != first_worker and ready["adopted"] == 4 and not ready["failed"], ready

    listed = kept.ask(op="list")["terminals"]
    assert {terminal: entry["pid"] for terminal, entry in listed.items()} == pids
    for terminal, output in before.items():  # every byte held before, at the same offsets
        assert kept.output(terminal)[: len(output)] == output, terminal
    wait_for(lambda: len(counts(kept.output("counter"))) > len(counts(before["counter"])) + 20, 30,
             "the counter to go on")
    numbers = counts(kept.output("counter"))
    assert numbers == list(range(numbers[0], numbers[0] + len(numbers))), "a line lost or repeated"
    assert wait_for(lambda: kept.ask(op="list")["terminals"]["nine"]["exit"], 30, "the exit of nine") == 9
    finished = wait_for(lambda: (lambda c: c if c["status"] == "completed" else None)(
        kept.ask(op="command", id="shell", commandId=command)), 30, "the command to finish")
    assert finished["exitCode"] == 7
    assert not gone(pids["sleeper"])

    assert kept.stop() == 0  # SIGTERM: the worker ends its terminals, then the keeper exits
    for pid in (pids["counter"], pids["sleeper"], pids["shell"]):
        wait_for(lambda pid=pid: gone(pid), 10, f"process {pid} to end")


def test_twenty_restarts_and_five_kills_lose_nothing(kept):
    """50 counters across 20 SIGHUP restarts and 5 SIGKILLs in a row: each one process all along, every line once."""
    pids = {f"t{n}": kept.ask(op="create", id=f"t{n}", argv=COUNTER if n == 0 else SLOW_COUNTER)["pid"]
            for n in range(50)}
    for round_number in range(25):
        ready = kept.restart("kill" if round_number % 5 == 4 else "hup")
        assert ready["adopted"] == 50 and not ready["failed"], ready
        assert {terminal: entry["pid"] for terminal, entry in kept.ask(op="list")["terminals"].items()} == pids
    wait_for(lambda: len(counts(kept.output("t0"))) >= 50, 30, "the counter to count")
    for terminal in pids:
        numbers = counts(kept.output(terminal))
        assert numbers and numbers == list(range(1, len(numbers) + 1)), f"{terminal}: a line lost or repeated"
    assert kept.stop() == 0


def test_a_worker_that_keeps_dying_is_started_again_and_says_so(kept):
    """Each death of the worker is logged by the keeper with how it ended, and the worker comes back each time."""
    for _ in range(3):
        kept.restart("kill")
    assert kept.text().count("ended (killed by SIGKILL)") == 3, kept.text()
    assert kept.stop() == 0


@pytest.mark.parametrize("upgrade, why", [
    ("2", "a saved state of version 1, kind 'pty'; this worker reads version 2"),  # reads no older state
    ("not a number", "ended (exit status 1) before answering"),  # code that does not even start
])
def test_code_that_cannot_take_the_terminals_over_leaves_them_to_the_running_worker(kept, upgrade, why):
    """SIGHUP rehearses the code on disk first: when it cannot take the terminals back, the worker that runs them
    keeps them (no hand-over, no restart), the keeper says why, and a reload once the code is fixed goes through."""
    worker = kept.ready["ready"]
    pid = kept.ask(op="create", id="counter", argv=COUNTER)["pid"]
    upgraded = Path(kept.control + ".state-version")  # read by tests/keeper_worker.py as it starts
    upgraded.write_text(upgrade)
    os.kill(kept.keeper.pid, signal.SIGHUP)
    wait_for(lambda: "SIGHUP refused" in kept.text(), 30, "the keeper to refuse the restart")
    assert why in kept.text() and f"Worker {worker} keeps running its terminals" in kept.text(), kept.text()
    assert len(kept.readies()) == 1 and not gone(worker)  # no worker started, none stopped
    seen = len(counts(kept.output("counter")))
    wait_for(lambda: len(counts(kept.output("counter"))) > seen + 10, 30, "the running worker to go on reading")

    upgraded.unlink()
    ready = kept.restart("hup")
    assert ready["ready"] != worker and ready["adopted"] == 1 and not ready["failed"], ready
    assert kept.ask(op="list")["terminals"]["counter"]["pid"] == pid
    numbers = counts(kept.output("counter"))
    assert numbers[0] == 1 and numbers == list(range(1, len(numbers) + 1)), "a line lost or repeated"
    assert kept.stop() == 0


def test_a_worker_that_does_not_hand_over_is_killed_and_its_terminals_taken_back(tmp_path):
    """A worker that hangs as it hands over (told by SIGUSR1, it never exits) does not hold the restart up for
    ever: past the keeper's hand-over time it is killed, and the next worker takes the terminals back as after a
    crash, every line kept."""
    kept = KeptWorker(tmp_path, "--handover-seconds", "2")
    try:
        worker = kept.ready["ready"]
        pid = kept.ask(op="create", id="counter", argv=COUNTER)["pid"]
        Path(kept.control + ".stuck").touch()  # read as SIGUSR1 comes: this worker ignores it
        ready = kept.restart("hup")
        assert "has not handed over within 2 s: killed" in kept.text(), kept.text()
        assert ready["ready"] != worker and ready["adopted"] == 1 and gone(worker), ready
        assert kept.ask(op="list")["terminals"]["counter"]["pid"] == pid
        wait_for(lambda: len(counts(kept.output("counter"))) >= 50, 30, "the counter to count")
        numbers = counts(kept.output("counter"))
        assert numbers[0] == 1 and numbers == list(range(1, len(numbers) + 1)), "a line lost or repeated"
        Path(kept.control + ".stuck").unlink()
        assert kept.stop() == 0
    finally:
        if kept.keeper.poll() is None:
            kept.keeper.kill()
            kept.keeper.wait()
