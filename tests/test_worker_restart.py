"""The terminals' process under its keeper (TERMINALS_KEEPER=true, issue 33), in both deployments: SIGHUP to
`manage.py serve` or `manage.py terminal_worker` restarts it in place, and SIGKILL of the process it runs is
survived; either way every
terminal goes on with the same id and pid, the bytes held before are the first bytes after, a counter's lines go on
with none lost or repeated, a command in flight gets its exit code, a program that exited meanwhile is reported
with its own, a live WebSocket is told where to reattach (4012 with fromByte) and gets every line once from there,
and each adoption is audited. SIGTERM still ends the terminals."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import uuid

import pytest
import requests

from terminals.models import AuditEvent

from .client import Api
from .runtime_support import gone
from .servers import start_embedded, start_split, wait_for
from .test_live import Live

COUNTER = ["-c", "i=0; while :; do i=$((i+1)); echo n=$i; sleep 0.02; done"]


@pytest.fixture(params=["embedded", "split"])
def kept(request, django_db_setup):
    """The deployment with its terminals' process under a keeper: `manage.py serve`, or a split worker."""
    if request.param == "embedded":
        server = start_embedded(TERMINALS_KEEPER="true")
    else:
        server = start_split(webs=1, workers=1, TERMINALS_KEEPER="true")
    yield server
    server.stop()


def keeper_of(server):
    """The process the deployment started for its terminals: the keeper, which execs in its place."""
    return server.processes[0] if server.mode == "embedded" else server.process("worker0")


def worker_child(server) -> int:
    """The process the keeper runs: the embedded server, or the worker."""
    keeper = keeper_of(server).pid
    with open(f"/proc/{keeper}/task/{keeper}/children") as children:
        pids = children.read().split()
    # After a restart the terminals' processes are the keeper's children too (it is their subreaper).
    [child] = [int(pid) for pid in pids if b"manage.py" in open(f"/proc/{pid}/cmdline", "rb").read()]
    return child


def counts(text: str) -> list[int]:
    return [int(number) for number in re.findall(r"n=(\d+)\r\n", text)]


def read_all(api: Api, terminal: str) -> str:
    """Every byte the terminal holds, from offset 0, in reads of the largest size."""
    text, position = "", 0
    while True:
        response = api.get(f"/api/terminals/{terminal}/output", params={"fromByte": position, "maxBytes": 1 << 20})
        assert response.status_code == 200, response.text
        data = response.json()["data"]
        text += data["chunk"]
        if data["nextByte"] == position:
            return text
        position = data["nextByte"]


def answers(api: Api, terminal: str) -> dict | None:
    try:
        response = api.get(f"/api/terminals/{terminal}")
    except requests.RequestException:  # the embedded server, killed, dropped the connection
        return None
    return response.json()["data"] if response.status_code == 200 else None


@pytest.mark.parametrize("how", ["hup", "kill"])
def test_terminals_outlive_a_restart_or_a_crash_of_their_worker(kept, keys, orm, how):
    api = Api(kept.url, keys["alice"])
    counter = api.create(command="sh", args=COUNTER)
    sleeper = api.create(command="sleep", args=["300"])
    shell = api.create(shell="/bin/bash")
    wait_for(lambda: len(counts(read_all(api, counter["terminalId"]))) >= 20, 30, "the counter to count")
    api.run(shell["terminalId"], "echo ready")
    command = api.post(f"/api/terminals/{shell['terminalId']}/commands",
                       json={"command": "sleep 3; (exit 7)", "wait": False}).json()["data"]["commandId"]
    nine = api.create(command="sh", args=["-c", "sleep 3; exit 9"])

    async def scenario():
        live = await Live.open(kept.url, counter["terminalId"], keys["alice"], fromByte=0)
        await live.until(lambda live: len(counts(live.text)) >= 30, "lines on the WebSocket")
        before = read_all(api, counter["terminalId"])
        if how == "hup":
            keeper_of(kept).process.send_signal(signal.SIGHUP)
            code = await live.closed()
            error = next(frame for frame in live.frames if frame["type"] == "error")
            # Embedded, the web side stops too: the worker's notice, or the server's own, both with fromByte.
            assert code == 4012 and error["code"] in ("WORKER_RESTARTING", "SERVER_STOPPING"), (code, error)
            resume_from = error["fromByte"]
            assert resume_from == live.next
        else:
            old = worker_child(kept)
            os.kill(old, signal.SIGKILL)
            await live.closed(timeout=60)  # told (4012), or cut (embedded): reconnect from where it stands
            resume_from = live.next
        again = await _reattach(kept.url, counter["terminalId"], keys["alice"], resume_from)
        await again.until(lambda again: len(counts(again.text)) >= 30, "lines after the restart")
        await again.close()
        return before, live.text + again.text

    before, watched = asyncio.run(scenario())

    for created in (counter, sleeper, shell):
        record = wait_for(lambda created=created: answers(api, created["terminalId"]), 30, "the terminal to answer")
        assert (record["status"], record["pid"]) == ("active", created["pid"]), record
    after = read_all(api, counter["terminalId"])
    assert after.startswith(before)  # every byte held before, at the same offsets
    numbers = counts(after)
    assert numbers == list(range(1, len(numbers) + 1)), "a line lost or repeated in the terminal's output"
    seen = counts(watched)
    assert seen == list(range(1, len(seen) + 1)), "a line lost or repeated on the WebSocket across the restart"
    finished = wait_for(lambda: (lambda data: data if data["status"] == "completed" else None)(
        api.get(f"/api/terminals/{shell['terminalId']}/commands/{command}").json()["data"]), 30, "the command")
    assert finished["exitCode"] == 7
    exited = wait_for(lambda: (lambda data: data if data and data["status"] == "exited" else None)(
        answers(api, nine["terminalId"])), 30, "the program that exits 9")
    assert exited["exitCode"] == 9, exited
    assert not gone(sleeper["pid"])
    adopted = AuditEvent.objects.filter(action="adopt", terminal_id=uuid.UUID(counter["terminalId"]))
    assert adopted.count() == 1

    assert keeper_of(kept).stop(signal.SIGTERM) == 0  # SIGTERM ends them, as it always did
    for created in (counter, sleeper, shell):
        wait_for(lambda created=created: gone(created["pid"]), 15, "the terminal's process to end")


async def _reattach(url: str, terminal: str, key: str, from_byte: int) -> Live:
    """Attaches from from_byte once the new worker answers (4503 while it starts)."""
    deadline = asyncio.get_running_loop().time() + 30
    while True:
        try:
            return await Live.open(url, terminal, key, fromByte=from_byte)
        except Exception:  # noqa: BLE001 - refused while the worker starts
            if asyncio.get_running_loop().time() > deadline:
                raise
            await asyncio.sleep(0.2)


def test_sighup_without_a_keeper_changes_nothing(split_server, keys, orm):
    """A worker that runs without a keeper ignores SIGUSR1 (the keeper's hand-over signal) and keeps serving."""
    api = Api(split_server.url, keys["bob"])
    terminal = api.create(shell="/bin/sh")["terminalId"]
    worker = split_server.process("worker0")
    worker.process.send_signal(signal.SIGUSR1)
    assert api.run(terminal, "echo still-here") == "still-here"
    assert worker.alive()
    requests.get(f"{split_server.url}/api/health", timeout=10).raise_for_status()
