"""When the audit trail cannot be written, nothing is done: input and commands are refused with 503
AUDIT_UNAVAILABLE before a byte reaches the terminal, and create and delete before a process is started or ended.

The test holds SQLite's write lock itself (BEGIN EXCLUSIVE on the server's own database file), so the server's
writes fail after its short busy timeout, exactly as under a writer that never lets go.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import subprocess
import sys
import time
import uuid
from contextlib import contextmanager

import pytest
import requests

from .client import Api
from .own_database import audit_rows, create_key, own_database, sqlite_path
from .runtime_support import gone
from .servers import start_embedded, wait_for
from .test_live import Live
from .test_live import run as run_live

BUSY_TIMEOUT_MS = 300


@pytest.fixture(scope="module")
def service():
    """A server on an SQLite file of its own (also on a PostgreSQL run) that gives up on a lock after 0.3 s."""
    settings = own_database(sqlite=True, TERMINALS_DB_BUSY_TIMEOUT_MS=str(BUSY_TIMEOUT_MS))
    server = start_embedded(**settings)
    username, key = create_key(settings, "audit-lock")
    api = Api(server.url, key)
    yield server, settings, username, api
    api.cleanup()
    server.stop()


@contextmanager
def audit_locked(settings):
    """Holds the database's write lock, as a writer that never commits would."""
    database = sqlite3.connect(sqlite_path(settings), isolation_level=None, timeout=30)
    try:
        database.execute("BEGIN EXCLUSIVE")
        yield
    finally:
        database.close()  # rolls back and lets go


def assert_audit_unavailable(response: requests.Response) -> None:
    assert response.status_code == 503, response.text
    body = response.json()
    assert body["success"] is False
    assert set(body["error"]) == {"code", "message", "details"}
    assert body["error"]["code"] == "AUDIT_UNAVAILABLE"
    assert "audit" in body["error"]["message"].lower()


def assert_healthy(api: Api) -> None:
    health = api.get("/api/health")
    assert health.status_code == 200, health.text
    assert health.json()["data"]["database"]["ok"] is True




def children(pid: int) -> set[int]:
    found = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True)
    return {int(child) for child in found.stdout.split()}


def test_input_and_command_are_refused_unsent_when_the_audit_cannot_be_written(service):
    """503 AUDIT_UNAVAILABLE for both; a later command in the same terminal proves neither was typed; health answers
    meanwhile; once the lock is gone the same input and command are audited and run."""
    server, settings, username, api = service
    terminal = api.create()["terminalId"]
    assert api.command(terminal, "true", timeoutMs=15_000)["exitCode"] == 0  # the shell is up and reads its input
    typed, commanded = (f"/tmp/terminals-audit-{uuid.uuid4().hex}-{kind}" for kind in ("input", "command"))

    with audit_locked(settings):
        assert_audit_unavailable(api.post(f"/api/terminals/{terminal}/input", json={"input": f"touch {typed}"}))
        assert_audit_unavailable(api.post(f"/api/terminals/{terminal}/commands",
                                          json={"command": f"touch {commanded}"}))
        assert_healthy(api)

    # The shell runs what it is sent in order: had either touch been typed, it would have run before this.
    checked = api.command(terminal, f"ls {typed} {commanded} 2>/dev/null | wc -l", timeoutMs=15_000)
    assert checked["exitCode"] == 0 and checked["output"].strip() == "0", checked
    assert not os.path.exists(typed) and not os.path.exists(commanded)
    rows = audit_rows(settings, username)
    assert not [row for row in rows if row["details"].get("input") == f"touch {typed}\n"
                or row["details"].get("command") == f"touch {commanded}"]

    # The service goes on: the same input and command now work, each with one audit row.
    assert api.post(f"/api/terminals/{terminal}/input", json={"input": f"touch {typed}"}).status_code == 200
    wait_for(lambda: os.path.exists(typed), 15, f"{typed} to be created")
    # The typed line counts as running until the shell's next prompt, which may come a moment after the file.
    wait_for(lambda: not api.get(f"/api/terminals/{terminal}").json()["data"].get("busy"), 15, "the prompt")
    assert api.command(terminal, f"touch {commanded}", timeoutMs=15_000)["exitCode"] == 0
    assert os.path.exists(commanded)
    rows = wait_for(lambda: (lambda rows: rows if rows[-1]["action"] == "command_end" else None)(
        audit_rows(settings, username)), 15, "the command's end on record")
    assert [row["outcome"] for row in rows if row["details"].get("input") == f"touch {typed}\n"] == ["sent"]
    commanded_rows = [row["action"] for row in rows if row["details"].get("command") == f"touch {commanded}"]
    assert commanded_rows == ["command", "command_end"]
    log = server.processes[0].log()
    assert "could not be written: database is locked" in log  # the operator sees why
    for path in (typed, commanded):
        os.unlink(path)


def test_create_and_delete_are_refused_before_acting_when_the_audit_cannot_be_written(service):
    """503 AUDIT_UNAVAILABLE: the create starts no process and records no terminal, the delete ends nothing; both
    work once the lock is gone."""
    server, settings, username, api = service
    terminal = api.create()["terminalId"]
    assert api.command(terminal, "true", timeoutMs=15_000)["exitCode"] == 0
    before = children(server.processes[0].pid)
    created_before = [row for row in audit_rows(settings, username) if row["action"] == "create"]

    with audit_locked(settings):
        assert_audit_unavailable(api.post("/api/terminals", json={}))
        assert_audit_unavailable(api.delete(f"/api/terminals/{terminal}", json={"force": True}))
        assert children(server.processes[0].pid) == before  # nothing started, nothing ended
        listed = api.get("/api/terminals")  # reads go on
        assert listed.status_code == 200, listed.text
        assert [item["terminalId"] for item in listed.json()["data"]["terminals"]].count(terminal) == 1
        assert_healthy(api)

    assert children(server.processes[0].pid) == before
    assert api.command(terminal, "echo still-here", timeoutMs=15_000)["output"].strip() == "still-here"
    assert [row for row in audit_rows(settings, username) if row["action"] == "create"] == created_before
    listed = api.get("/api/terminals").json()["data"]
    assert listed["count"] == len(created_before)  # no record of a terminal that never started

    assert api.delete(f"/api/terminals/{terminal}", json={"force": True}).status_code == 200
    assert api.create()["status"] == "active"


# What the database refuses after the terminal's record is reserved and its shell started: the create's audit row,
# or the pid written into the record, in the same transaction.
REFUSALS = {
    "audit-row": "BEFORE INSERT ON terminals_auditevent WHEN NEW.action = 'create'",
    "pid": "BEFORE UPDATE OF pid ON terminals_terminalsession WHEN OLD.pid IS NULL",
}


@contextmanager
def create_step_refused(settings, refusal: str):
    database = sqlite3.connect(sqlite_path(settings), isolation_level=None, timeout=30)
    try:
        database.execute(f"CREATE TRIGGER refuse_create {REFUSALS[refusal]} "
                         "BEGIN SELECT RAISE(ABORT, 'refused by the test'); END")
        yield
    finally:
        database.execute("DROP TRIGGER refuse_create")
        database.close()


@pytest.mark.parametrize("refusal", sorted(REFUSALS))
def test_a_create_whose_audit_row_is_refused_ends_its_shell_and_leaves_no_record(service, refusal):
    """The worker writes the create's audit row with the pid, in one transaction, after the shell started. When the
    database refuses either, the create answers 503 AUDIT_UNAVAILABLE, the shell is already ended, and no record
    of it is left active to count against the owner's limit."""
    server, settings, username, api = service
    before = children(server.processes[0].pid)
    active_before = api.get("/api/terminals").json()["data"]["count"]
    created_before = [row for row in audit_rows(settings, username) if row["action"] == "create"]

    with create_step_refused(settings, refusal):
        assert_audit_unavailable(api.post("/api/terminals", json={}))
        assert children(server.processes[0].pid) == before  # ended before the answer
        assert api.get("/api/terminals").json()["data"]["count"] == active_before

    assert [row for row in audit_rows(settings, username) if row["action"] == "create"] == created_before
    created = api.create()
    assert created["status"] == "active"
    rows = [row for row in audit_rows(settings, username) if row["action"] == "create"]
    assert len(rows) == len(created_before) + 1
    newest = rows[-1]
    assert (newest["terminal"], newest["outcome"]) == (created["terminalId"].replace("-", ""), "ok")
    assert newest["details"]["pid"] == created["pid"]


# A program that says what reached it: each signal it gets, and for each line it reads the line and its window size.
WITNESS = """
import os, signal, sys
for name in ("SIGINT", "SIGWINCH", "SIGUSR1"):
    signal.signal(getattr(signal, name), lambda number, frame: print("GOT", signal.Signals(number).name, flush=True))
print("READY", flush=True)
while True:
    line = sys.stdin.readline()
    if not line:
        break
    size = os.get_terminal_size(sys.stdin.fileno())
    print("PONG", line.strip(), f"{size.columns}x{size.lines}", flush=True)
"""


def start_witness(api: Api) -> str:
    terminal = api.create(command=sys.executable, args=["-u", "-c", WITNESS], cols=80, rows=24)["terminalId"]
    api.wait_output(terminal, lambda out: "READY" in out, what="the witness to start")
    return terminal


def answer_to(api: Api, terminal: str, ping: str) -> str:
    """Everything the witness printed up to its answer to ping, sent now: what reached it before includes."""
    api.send(terminal, ping)
    return api.wait_output(terminal, lambda out: f"PONG {ping} " in out, what=f"the answer to {ping}")


def test_kill_signal_and_resize_are_refused_without_effect_when_the_audit_cannot_be_written(service):
    """503 AUDIT_UNAVAILABLE for each; the program got no signal, kept its size and runs on; no row records them; all
    three work once the lock is gone."""
    server, settings, username, api = service
    terminal = start_witness(api)
    pid = api.get(f"/api/terminals/{terminal}").json()["data"]["pid"]
    base = f"/api/terminals/{terminal}"

    with audit_locked(settings):
        assert_audit_unavailable(api.post(f"{base}/signal", json={"signal": "SIGINT"}))
        assert_audit_unavailable(api.post(f"{base}/resize", json={"cols": 100, "rows": 30}))
        assert_audit_unavailable(api.post(f"{base}/kill", json={}))
        assert_healthy(api)

    # A signal or a resize that went through would have been handled before the witness read this line.
    seen = answer_to(api, terminal, "after-lock")
    assert "GOT" not in seen, seen
    assert "PONG after-lock 80x24" in seen, seen
    assert not gone(pid)
    record = api.get(base).json()["data"]
    assert (record["status"], record["cols"], record["rows"]) == ("active", 80, 24), record
    actions = [row["action"] for row in audit_rows(settings, username) if row["terminal"] == terminal.replace("-", "")]
    assert not {"signal", "resize", "kill"} & set(actions), actions

    # Each works once the trail can be written again.
    assert api.post(f"{base}/signal", json={"signal": "SIGINT"}).status_code == 200
    api.wait_output(terminal, lambda out: "GOT SIGINT" in out, what="the signal")
    assert api.post(f"{base}/resize", json={"cols": 100, "rows": 30}).status_code == 200
    assert "PONG resized 100x30" in answer_to(api, terminal, "resized")
    assert api.post(f"{base}/kill", json={}).status_code == 200
    wait_for(lambda: gone(pid), 15, "the killed program to end")


def test_websocket_input_resize_and_signal_frames_are_refused_without_effect_when_the_audit_cannot_be_written(
        service):
    """Each frame gets an AUDIT_UNAVAILABLE error frame and the connection stays open; nothing reached the program;
    once the lock is gone the same frames work on the same connection."""
    server, settings, username, api = service
    terminal = start_witness(api)

    async def scenario():
        live = await Live.open(server.url, terminal, api.key)
        with audit_locked(settings):
            for frame in ({"type": "input", "data": "typed-while-locked\r"},
                          {"type": "resize", "cols": 100, "rows": 30},
                          {"type": "signal", "signal": "SIGINT"}):
                await live.send(**frame)
                error = await live.next_of("error")
                assert error["code"] == "AUDIT_UNAVAILABLE", (frame, error)
        await live.send(type="input", data="after-lock\r")
        await live.until_text("PONG after-lock ")
        before = live.text
        await live.send(type="resize", cols=100, rows=30)
        await live.send(type="signal", signal="SIGINT")
        await live.until_text("GOT SIGINT")
        await live.send(type="input", data="resized\r")
        await live.until_text("PONG resized 100x30")
        await live.close()
        return before

    seen = run_live(scenario())
    assert "typed-while-locked" not in seen and "GOT" not in seen, seen
    assert "PONG after-lock 80x24" in seen, seen
    inputs = [row["details"].get("input") for row in audit_rows(settings, username) if row["action"] == "input"
              and row["terminal"] == terminal.replace("-", "")]
    assert "typed-while-locked\r" not in inputs


def test_keys_typed_while_the_audit_is_locked_run_nothing_until_they_are_on_record(service):
    """Batched key audit (the default): printable keys go out at once and wait for their row; the Enter after them
    is refused while their row cannot be written, so the line never reaches the program; once the lock is gone
    the next Enter writes their row first, then its own, and only then runs the line."""
    server, settings, username, api = service
    terminal = start_witness(api)

    async def scenario():
        live = await Live.open(server.url, terminal, api.key)
        with audit_locked(settings):
            for key in "held-keys":
                await live.send(type="input", data=key)
            await live.until_text("held-keys")  # the terminal echoed them: they went out
            await live.send(type="input", data="\r")
            error = await live.next_of("error")
            assert error["code"] == "AUDIT_UNAVAILABLE", error
        refused_text = live.text
        await live.send(type="input", data="\r")
        await live.until_text("PONG held-keys ")
        await live.close()
        return refused_text

    refused_text = run_live(scenario())
    assert "PONG held-keys" not in refused_text, refused_text
    inputs = [row["details"] for row in audit_rows(settings, username) if row["action"] == "input"
              and row["terminal"] == terminal.replace("-", "") and row["outcome"] == "sent"]
    assert [row["input"] for row in inputs] == ["held-keys", "\r"], inputs
    assert inputs[0]["frames"] == len("held-keys")


def test_a_websocket_whose_attach_cannot_be_audited_is_refused_with_4503_before_any_byte(service):
    """The attach is on the audit trail before the client gets its first byte; with the trail locked the connection
    is closed with 4503 and no attached or output frame, and the worker keeps no subscriber for it: the next
    attach, once the lock is gone, works and is audited."""
    import websockets

    from .test_live import ws_url

    server, settings, username, api = service
    terminal = start_witness(api)

    async def refused():
        with audit_locked(settings):
            async with websockets.connect(ws_url(server.url, terminal), additional_headers={"X-API-Key": api.key}) as ws:
                frames = []
                try:
                    while True:
                        frames.append(await asyncio.wait_for(ws.recv(), 30))
                except websockets.ConnectionClosed as closed:
                    return frames, closed.rcvd.code if closed.rcvd else None

    async def accepted():
        live = await Live.open(server.url, terminal, api.key)
        await live.close()
        return live.attached

    frames, code = run_live(refused())
    assert (frames, code) == ([], 4503)
    assert run_live(accepted())["terminalId"] == terminal
    attaches = [row for row in audit_rows(settings, username) if row["action"] == "attach"
                and row["terminal"] == terminal.replace("-", "")]
    assert len(attaches) == 1


LONG_BUSY_TIMEOUT_MS = 3000  # longer than the worker's answer is waited for, as the defaults are (30 s and 5 s)


@pytest.fixture(scope="module")
def patient_service():
    """A server whose database waits longer for a lock (3 s) than its web side waits for a worker (1 s)."""
    settings = own_database(sqlite=True, TERMINALS_DB_BUSY_TIMEOUT_MS=str(LONG_BUSY_TIMEOUT_MS),
                            TERMINALS_WORKER_TIMEOUT_MS="1000")
    server = start_embedded(**settings)
    username, key = create_key(settings, "audit-patient")
    api = Api(server.url, key)
    yield server, settings, username, api
    api.cleanup()
    server.stop()


def test_a_create_while_the_database_is_locked_answers_audit_unavailable_within_the_busy_timeout(patient_service):
    """Not 503 WORKER_UNAVAILABLE once the worker's answer is given up on (after 35 s with the defaults): the create
    is an audit failure, told within the database's busy timeout plus a second, and no terminal starts later."""
    server, settings, username, api = patient_service
    assert api.create()["status"] == "active"  # the key's use is on record: the locked request writes nothing else
    before = children(server.processes[0].pid)
    listed_before = api.get("/api/terminals").json()["data"]["count"]

    with audit_locked(settings):
        started = time.monotonic()
        response = api.post("/api/terminals", json={})
        took = time.monotonic() - started
        assert_audit_unavailable(response)
        assert took < LONG_BUSY_TIMEOUT_MS / 1000 + 1, f"answered after {took:.1f} s"

    # Long enough for a create the worker had taken up to write its record and start its shell.
    deadline = time.monotonic() + LONG_BUSY_TIMEOUT_MS / 1000 + 2
    while time.monotonic() < deadline:
        assert children(server.processes[0].pid) == before, "a terminal started after its create was refused"
        time.sleep(0.2)
    assert api.get("/api/terminals").json()["data"]["count"] == listed_before
