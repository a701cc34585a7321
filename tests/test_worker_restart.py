"""The terminals' process under its keeper (TERMINALS_KEEPER=true, issue 33), in both deployments: SIGHUP to
`manage.py serve` or `manage.py terminal_worker` restarts it in place, and SIGKILL of the process it runs is
survived; either way every
terminal goes on with the same id and pid, the bytes held before are the first bytes after, a counter's lines go on
with none lost or repeated, a command in flight gets its exit code, a program that exited meanwhile is reported
with its own, a live WebSocket is told where to reattach (4012 with fromByte) and gets every line once from there,
and each adoption is audited. SIGTERM still ends the terminals."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime

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

    health = requests.get(f"{kept.url}/api/health", timeout=10).json()["data"]
    health_asked = time.monotonic()

    following = threading.Event()  # the event stream has output: it is attached before the restart
    follower = ThreadPoolExecutor(1).submit(follow, kept.url, keys["alice"], counter["terminalId"], 0, following)

    async def scenario():
        live = await Live.open(kept.url, counter["terminalId"], keys["alice"], fromByte=0)
        await live.until(lambda live: len(counts(live.text)) >= 30, "lines on the WebSocket")
        await asyncio.to_thread(following.wait, 30)
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
    # The event stream ends with the restart (WORKER_RESTARTING, SERVER_STOPPING, or cut when the embedded server
    # is killed); resumed with Last-Event-ID it goes on with every line once.
    streamed, resume, ended = follower.result(timeout=60)
    assert ended in ("WORKER_RESTARTING", "SERVER_STOPPING", "cut"), ended
    more = wait_for(lambda: follow(kept.url, keys["alice"], counter["terminalId"], resume, threading.Event(), 20),
                    60, "the event stream to resume")
    seen = counts(streamed + more[0])
    assert len(seen) >= 20 + len(counts(streamed)) and seen == list(range(1, len(seen) + 1)), "a line lost or repeated"

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
    # /api/health shows the restart: the worker answering (same id) has started again, and its row says when.
    again = wait_for(lambda: (lambda data: data if data["worker"]["ok"] else None)(
        requests.get(f"{kept.url}/api/health", timeout=10).json()["data"]), 30, "a worker to answer the ping")
    assert again["worker"]["id"] == health["worker"]["id"]
    assert again["worker"]["uptime"] < health["worker"]["uptime"] + (time.monotonic() - health_asked), again
    [row], [row_before] = ([w for w in data["workers"] if w["id"] == health["worker"]["id"]] for data in (again, health))
    started = [datetime.fromisoformat(r["started"]) for r in (row, row_before)]
    assert started[0] > started[1] and row["alive"], (row, row_before)
    adopted = AuditEvent.objects.filter(action="adopt", terminal_id=uuid.UUID(counter["terminalId"]))
    assert [event.outcome for event in adopted] == ["ok"]
    restart = AuditEvent.objects.filter(action="worker_restart", details__worker=adopted[0].details["worker"])
    assert restart.count() == 1 and restart[0].details["adopted"] >= 4, list(restart.values())

    assert keeper_of(kept).stop(signal.SIGTERM) == 0  # SIGTERM ends them, as it always did
    for created in (counter, sleeper, shell):
        wait_for(lambda created=created: gone(created["pid"]), 15, "the terminal's process to end")


def follow(url: str, key: str, terminal: str, from_byte: int, following: threading.Event, lines: int | None = None):
    """Reads the terminal's event stream from from_byte (Last-Event-ID) until it ends, or until it has that many
    lines; (its text, the byte to resume from, how it ended: an error's code, "cut" or "enough"), or None when the
    server refused it (while it restarts)."""
    text, resume = "", from_byte
    try:
        with requests.get(f"{url}/api/terminals/{terminal}/output", params={"follow": "true"}, stream=True,
                          headers={"X-API-Key": key, "Last-Event-ID": str(from_byte)}, timeout=60) as response:
            if response.status_code != 200:
                return None
            event: dict = {}
            for line in response.iter_lines(decode_unicode=True):
                if line.startswith(("id: ", "event: ", "data: ")):
                    name, value = line.split(": ", 1)
                    event[name] = value
                    continue
                if line or "event" not in event:
                    continue
                data = json.loads(event["data"])
                if event["event"] == "error":
                    return text, resume, data["code"]
                if event["event"] == "output":
                    text, resume = text + data["data"], int(event["id"])
                    following.set()
                    if lines is not None and len(counts(text)) >= lines:
                        return text, resume, "enough"
                event = {}
    except requests.RequestException:
        if lines is not None and not text:
            return None
        return text, resume, "cut"
    return text, resume, "cut"


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


def test_a_reload_with_a_request_waiting_on_the_worker_goes_through(kept, keys):
    """Requests waiting on the worker as it hands over (a command's wait, reads) neither keep the old process from
    exiting nor get a false answer. A request's thread once waited for an event loop that had stopped, the
    embedded server's exit joined that thread for ever, and nobody served the port again; and a command's wait
    was left to run out its timeout."""
    api = Api(kept.url, keys["alice"])
    terminal = api.create(shell="/bin/bash")["terminalId"]
    api.command(terminal, "true")
    waiting = ThreadPoolExecutor(1).submit(
        requests.post, f"{kept.url}/api/terminals/{terminal}/commands", timeout=120,
        json={"command": "sleep 100", "timeoutMs": 90000}, headers={"X-API-Key": keys["alice"]})
    wait_for(lambda: any(command["status"] == "running" for command in
                         api.get(f"/api/terminals/{terminal}/commands").json()["data"]["commands"]),
             30, "the command to run")
    polling = threading.Event()  # and requests that ask the worker, in flight the whole time
    refused = []  # 503s the pollers got that do not say the worker restarted: a request lost, waited out

    def poll():
        with requests.Session() as session:
            while not polling.is_set():
                try:
                    response = session.get(f"{kept.url}/api/terminals/{terminal}",
                                           headers={"X-API-Key": keys["alice"]}, timeout=120)
                except requests.RequestException:
                    continue  # the embedded server closing its connections
                if response.status_code != 200 and not response.json()["error"]["details"].get("restarting"):
                    refused.append(response.json())

    pollers = [threading.Thread(target=poll) for _ in range(4)]
    for poller in pollers:
        poller.start()
    try:
        old = worker_child(kept)
        keeper_of(kept).process.send_signal(signal.SIGHUP)
        wait_for(lambda: gone(old), 60, "the old process to exit")
        record = wait_for(lambda: answers(api, terminal), 60, "the new process to answer")
        assert record["status"] == "active"
    finally:
        polling.set()
        for poller in pollers:
            poller.join()
    assert refused == []
    try:
        response = waiting.result(timeout=60)
    except requests.ConnectionError:
        return  # cut as the embedded server went: to be sent again
    # Answered at once that the worker restarted, and when to come back: not left to its timeout (90 s here).
    assert response.status_code == 503, response.text
    error = response.json()["error"]
    assert error["code"] == "WORKER_UNAVAILABLE" and error["details"]["restarting"] is True, error
    assert "GET /api/terminals/{id}/commands" in error["message"] and response.headers["Retry-After"] == "1"
    assert any(command["status"] == "running" for command in  # the command goes on, under the new process
               api.get(f"/api/terminals/{terminal}/commands").json()["data"]["commands"])
