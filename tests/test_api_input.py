"""Sending input: the automatic Enter, raw control keys, appendNewline, the size limit and the audit trail."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import uuid

import pytest

from terminals.models import AuditEvent

from .client import Api
from .helpers import names_field, printed
from .own_database import create_key, own_database, sqlite_path
from .servers import start_embedded, wait_for


def audited_inputs(terminal: str) -> list[dict]:
    return [
        {"input": event.details.get("input"), "outcome": event.outcome}
        for event in AuditEvent.objects.filter(terminal_id=terminal, action="input").order_by("id")
    ]


def children_named(pid: int, name: str) -> list[int]:
    result = subprocess.run(["pgrep", "-P", str(pid), "-x", name], capture_output=True, text=True)
    return [int(found) for found in result.stdout.split()]


def test_input_without_newline_gets_one(alice):
    """Input without a line end is sent with "\\n" added, so the command runs."""
    terminal = alice.create(shell="/bin/bash")["terminalId"]
    sent = alice.send(terminal, "echo auto-$((20+22))").json()
    assert sent["success"] is True
    assert sent["message"] == "Input sent successfully"
    assert sent["data"]["terminalId"] == terminal
    assert sent["data"]["bytesWritten"] == len("echo auto-$((20+22))\n")
    alice.wait_output(terminal, lambda out: printed(out, "auto-42"), what="auto-42")


def test_input_line_end_is_not_doubled(orm, alice):
    """Input already ending in "\\n" or "\\r" is sent as is: one command, one new prompt."""
    terminal = alice.create(shell="/bin/bash")["terminalId"]
    alice.run(terminal, "PROMPT_COMMAND='prompts=$((prompts+1))'")

    def prompts_after(text: str) -> int:
        alice.run(terminal, "prompts=0")  # its own prompt makes it 1
        alice.send(terminal, text)
        return int(alice.run(terminal, "echo $prompts")) - 1

    assert prompts_after("echo plain") == 1
    assert prompts_after("echo lf\n") == 1
    assert prompts_after("echo cr\r") == 1
    # The counter does see a second Enter when one is really sent.
    assert prompts_after("echo twice\n\n") == 2
    texts = [event["input"] for event in audited_inputs(terminal)]
    assert "echo lf\n" in texts
    assert "echo cr\r" in texts
    assert "echo plain\n" in texts
    assert [text for text in texts if text.endswith(("\n\n", "\r\n"))] == ["echo twice\n\n"]


def test_input_ctrl_c_passes_raw_and_interrupts(orm, alice):
    """"\\x03" is sent without a newline and interrupts the foreground command at once."""
    created = alice.create(shell="/bin/bash")
    terminal = created["terminalId"]
    alice.run(terminal, "true")
    alice.send(terminal, "sleep 30")
    sleeper = wait_for(lambda: children_named(created["pid"], "sleep"), 10, "sleep to start")
    started = time.monotonic()
    sent = alice.send(terminal, "\x03").json()["data"]
    assert sent["bytesWritten"] == 1
    assert alice.run(terminal, "echo back-$((1+1))") == "back-2"
    assert time.monotonic() - started < 10
    wait_for(lambda: not children_named(created["pid"], "sleep"), 10, f"sleep {sleeper} to end")
    assert "^C" in alice.full_output(terminal)
    assert {"input": "\x03", "outcome": "sent"} in audited_inputs(terminal)


@pytest.mark.parametrize("shell", ["/bin/bash", "/usr/bin/zsh", "/bin/dash"])
def test_each_shell_has_its_terminal_as_controlling_terminal(alice, shell):
    """Every shell leads a session of its own with its PTY as its controlling terminal, whether or not it takes one
    itself at its start (bash does; zsh and dash do not), so a typed Ctrl-C reaches its foreground command."""
    created = alice.create(shell=shell)
    terminal, pid = created["terminalId"], created["pid"]
    alice.run(terminal, "true")
    # /proc/PID/stat after the name: state, ppid, pgrp, session, tty_nr, tpgid
    fields = alice.run(terminal, "cat /proc/$$/stat").rsplit(")", 1)[1].split()
    assert int(fields[3]) == pid
    assert int(fields[4]) == os.stat(f"/proc/{pid}/fd/0").st_rdev
    alice.send(terminal, "sleep 31")
    wait_for(lambda: children_named(pid, "sleep"), 10, "sleep to start")
    alice.send(terminal, "\x03")
    wait_for(lambda: not children_named(pid, "sleep"), 10, "Ctrl-C to end sleep")
    assert alice.run(terminal, "echo back-$((1+2))") == "back-3"


def test_input_append_newline_false_sends_text_as_is(orm, alice):
    """With appendNewline false the text is typed without Enter, so the next input completes the same line."""
    terminal = alice.create(shell="/bin/bash")["terminalId"]
    alice.run(terminal, "true")
    first = alice.send(terminal, "echo par", appendNewline=False).json()["data"]
    assert first["bytesWritten"] == len("echo par")
    alice.send(terminal, "tial-$((6*7))")
    alice.wait_output(terminal, lambda out: printed(out, "partial-42"), what="partial-42")
    texts = [event["input"] for event in audited_inputs(terminal)]
    assert texts[-2:] == ["echo par", "tial-$((6*7))\n"]


def test_input_over_limit_is_refused(orm, alice):
    """Input over TERMINALS_MAX_INPUT_BYTES (65536 by default, counted in bytes) is refused with 400 INVALID_INPUT."""
    terminal = alice.create(shell="/bin/bash")["terminalId"]
    for text in ("x" * 65537, "€" * 21846):  # 65537 characters; 21846 characters but 65538 bytes
        response = alice.post(f"/api/terminals/{terminal}/input", json={"input": text})
        assert response.status_code == 400, response.text
        body = response.json()
        assert body["success"] is False
        assert body["error"]["code"] == "INVALID_INPUT"
        assert names_field(body["error"], "input"), body
        assert "input" in body["error"]["message"]
    events = audited_inputs(terminal)
    assert [event["outcome"] for event in events] == ["INVALID_INPUT", "INVALID_INPUT"]
    assert alice.run(terminal, "echo usable") == "usable"
    assert "xxxxxxxx" not in alice.full_output(terminal)


def test_input_is_audited_before_its_output_shows(orm, alice):
    """Every input leaves an audit row with the text sent, including the added newline, before its output is visible."""
    terminal = alice.create(shell="/bin/bash")["terminalId"]
    texts = ["echo audit-$((1+1))", "echo audit-$((2+2))\n", "echo audit-$((3+3))"]
    for number, text in zip((2, 4, 6), texts):
        alice.send(terminal, text)
        alice.wait_output(terminal, lambda out, line=f"audit-{number}": printed(out, line), what=f"audit-{number}")
        # No waiting: the row must already be there.
        last = AuditEvent.objects.filter(terminal_id=terminal, action="input").order_by("-id").first()
        assert last is not None
        assert last.details["input"] == (text if text.endswith("\n") else text + "\n")
        assert last.outcome == "sent"
        assert last.username.startswith("alice-")
        assert last.key_prefix == alice.key.split(".")[0]
    assert [event["input"] for event in audited_inputs(terminal)] == [
        "echo audit-$((1+1))\n", "echo audit-$((2+2))\n", "echo audit-$((3+3))\n",
    ]


# The audit order, seen from inside the terminal: the program that receives the bytes looks for their audit row the
# moment it reads them. The terminals of the tests run as the service's account, so they may open its database.
AUDIT_CHECKER = """
import sqlite3, sys

database, action = sys.argv[1], sys.argv[2]


def on_record(marker):
    connection = sqlite3.connect(f"file:{database}?mode=ro", uri=True)
    try:
        query = "SELECT count(*) FROM terminals_auditevent WHERE action = ? AND details LIKE ?"
        return connection.execute(query, (action, f"%{marker}%")).fetchone()[0] > 0
    finally:
        connection.close()


def report(marker):
    print(("FOUND " if on_record(marker) else "MISSING ") + marker, flush=True)


if len(sys.argv) > 3:
    report(sys.argv[3])  # a command: the marker is an argument
else:
    print("READY", flush=True)
    while True:  # input: each line read is a marker
        line = sys.stdin.readline()
        if not line:
            break
        if line.strip():
            report(line.strip())
"""


@pytest.fixture(scope="module")
def own_sqlite_service(tmp_path_factory):
    """A server on an SQLite file of its own, whose path the program in the terminal is given."""
    settings = own_database(sqlite=True)
    server = start_embedded(**settings)
    _, key = create_key(settings, "audit-order")
    api = Api(server.url, key)
    checker = tmp_path_factory.mktemp("audit-order") / "checker.py"
    checker.write_text(AUDIT_CHECKER)
    yield api, str(sqlite_path(settings)), str(checker)
    api.cleanup()
    server.stop()


def verdict(api: Api, terminal: str, marker: str) -> str:
    """FOUND or MISSING, as the program printed it for this marker."""
    said = re.compile(rf"^(FOUND|MISSING) {marker}\r?$", re.MULTILINE)
    output = api.wait_output(terminal, lambda out: said.search(out) is not None, what=f"the verdict on {marker}")
    return said.search(output)[1]


def test_an_inputs_audit_row_is_committed_before_the_program_reads_it(own_sqlite_service):
    """A program reading the terminal looks for each line's audit row as soon as it reads the line: always there."""
    api, database, checker = own_sqlite_service
    terminal = api.create(command=sys.executable, args=["-u", checker, database, "input"])["terminalId"]
    api.wait_output(terminal, lambda out: "READY" in out, what="the checker to start")
    markers = [f"order-{uuid.uuid4().hex[:12]}" for _ in range(20)]
    verdicts = {}
    for marker in markers:
        api.send(terminal, marker)
        verdicts[marker] = verdict(api, terminal, marker)
    assert set(verdicts.values()) == {"FOUND"}, verdicts


def test_a_commands_audit_row_is_committed_before_the_command_runs(own_sqlite_service):
    """A command that looks for its own audit row as it starts always finds it."""
    api, database, checker = own_sqlite_service
    terminal = api.create(shell="/bin/bash")["terminalId"]
    verdicts = {}
    for _ in range(4):
        marker = f"order-{uuid.uuid4().hex[:12]}"
        response = api.post(f"/api/terminals/{terminal}/commands",
                            json={"command": f"{sys.executable} {checker} {database} command {marker}",
                                  "timeoutMs": 15000})
        assert response.status_code == 200, response.text
        ran = response.json()["data"]
        assert ran["exitCode"] == 0, ran
        verdicts[marker] = ran["output"].strip()
    assert set(verdicts.values()) == {f"FOUND {marker}" for marker in verdicts}, verdicts


def _every_byte(api, terminal: str) -> bytes:
    """The terminal's whole output, read by byte offset in slices."""
    chunks, position = [], 0
    while True:
        data = api.output(terminal, fromByte=position, maxBytes=65536)
        chunks.append(data["chunk"])
        if data["nextByte"] == position or data["nextByte"] >= data["totalBytes"]:
            return "".join(chunks).encode("utf-8")
        position = data["nextByte"]


def test_a_paste_into_a_terminal_nobody_reads_keeps_all_its_echo(alice):
    """256 KiB typed into `wc -c` in 64 KiB requests, with nobody reading the terminal (its output read at the
    bounded rate of a flood): the program gets every byte and the output holds every echoed line, as a terminal
    window would show them, then the count on a line of its own."""
    line = "x" * 1023 + "\n"  # a canonical line the kernel takes whole
    request = line * 64  # 64 KiB, the input limit
    terminal = alice.create(command="wc", args=["-c"])["terminalId"]
    for _ in range(4):
        alice.send(terminal, request, appendNewline=False)
    alice.send(terminal, "\x04", appendNewline=False)
    alice.wait_status(terminal, "exited", timeout=30)
    output = _every_byte(alice, terminal)
    echoed = ("x" * 1023 + "\r\n").encode() * 256
    assert output.startswith(echoed), f"{len(output)} bytes of output; the echo alone is {len(echoed)}"
    assert output[len(echoed):].split() == [b"262144"], output[len(echoed):][:200]
