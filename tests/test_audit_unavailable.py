"""When the audit trail cannot be written, nothing is done: input and commands are refused with 503
AUDIT_UNAVAILABLE before a byte reaches the terminal, and create and delete before a process is started or ended.

The test holds SQLite's write lock itself (BEGIN EXCLUSIVE on the server's own database file), so the server's
writes fail after its short busy timeout, exactly as under a writer that never lets go.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import uuid
from contextlib import contextmanager

import pytest
import requests

from .client import Api
from .own_database import audit_rows, create_key, own_database, sqlite_path
from .servers import start_embedded, wait_for

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


def run(api: Api, terminal: str, command: str) -> dict:
    response = api.post(f"/api/terminals/{terminal}/commands", json={"command": command, "timeoutMs": 15000})
    assert response.status_code == 200, response.text
    return response.json()["data"]


def children(pid: int) -> set[int]:
    found = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True)
    return {int(child) for child in found.stdout.split()}


def test_input_and_command_are_refused_unsent_when_the_audit_cannot_be_written(service):
    """503 AUDIT_UNAVAILABLE for both; a later command in the same terminal proves neither was typed; health answers
    meanwhile; once the lock is gone the same input and command are audited and run."""
    server, settings, username, api = service
    terminal = api.create()["terminalId"]
    assert run(api, terminal, "true")["exitCode"] == 0  # the shell is up and reads its input
    typed, commanded = (f"/tmp/terminals-audit-{uuid.uuid4().hex}-{kind}" for kind in ("input", "command"))

    with audit_locked(settings):
        assert_audit_unavailable(api.post(f"/api/terminals/{terminal}/input", json={"input": f"touch {typed}"}))
        assert_audit_unavailable(api.post(f"/api/terminals/{terminal}/commands",
                                          json={"command": f"touch {commanded}"}))
        assert_healthy(api)

    # The shell runs what it is sent in order: had either touch been typed, it would have run before this.
    checked = run(api, terminal, f"ls {typed} {commanded} 2>/dev/null | wc -l")
    assert checked["exitCode"] == 0 and checked["output"].strip() == "0", checked
    assert not os.path.exists(typed) and not os.path.exists(commanded)
    rows = audit_rows(settings, username)
    assert not [row for row in rows if row["details"].get("input") == f"touch {typed}\n"
                or row["details"].get("command") == f"touch {commanded}"]

    # The service goes on: the same input and command now work, each with one audit row.
    assert api.post(f"/api/terminals/{terminal}/input", json={"input": f"touch {typed}"}).status_code == 200
    wait_for(lambda: os.path.exists(typed), 15, f"{typed} to be created")
    assert run(api, terminal, f"touch {commanded}")["exitCode"] == 0
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
    assert run(api, terminal, "true")["exitCode"] == 0
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
    assert run(api, terminal, "echo still-here")["output"].strip() == "still-here"
    assert [row for row in audit_rows(settings, username) if row["action"] == "create"] == created_before
    listed = api.get("/api/terminals").json()["data"]
    assert listed["count"] == len(created_before)  # no record of a terminal that never started

    assert api.delete(f"/api/terminals/{terminal}", json={"force": True}).status_code == 200
    assert api.create()["status"] == "active"
