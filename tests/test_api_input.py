"""Sending input: the automatic Enter, raw control keys, appendNewline, the size limit and the audit trail."""

from __future__ import annotations

import re
import subprocess
import time

from terminals.models import AuditEvent

from .servers import wait_for

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def clean(line: str) -> str:
    """A line as a person sees it: without escape sequences or what a carriage return wrote over."""
    return ANSI.sub("", line).rsplit("\r", 1)[-1]


def printed(output: str, line: str) -> bool:
    """Whether the command output contains exactly this line (the echoed command line does not count)."""
    return line in [clean(text) for text in output.split("\n")]


def audited_inputs(terminal: str) -> list[dict]:
    return [
        {"input": event.details.get("input"), "outcome": event.outcome}
        for event in AuditEvent.objects.filter(terminal_id=terminal, action="input").order_by("id")
    ]


def names_field(error: dict, field: str) -> bool:
    details = error.get("details") or {}
    return details.get("field") == field or field in (details.get("fields") or {})


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
