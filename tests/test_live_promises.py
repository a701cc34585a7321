"""Promises of the live terminal and the idle sweep that SECURITY.md and the README make, each checked against a
real server: WebSocket input under the input endpoint's limits and audit, a disabled user's connections closed,
the details of a follow stream, and idle terminals ended by the worker's own sweep."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from django.contrib.auth import get_user_model

from terminals.models import AuditEvent

from .client import Api
from .conftest import make_key
from .servers import start_embedded, wait_for
from .test_live import Live, run, sse_events, stats

LONG_LINE = 5000  # past the 4095 bytes the kernel passes to a program reading whole lines
MAX_INPUT_BYTES = 64 * 1024  # TERMINALS_MAX_INPUT_BYTES, the default
MAX_PENDING_INPUT_BYTES = 1 << 20  # TERMINALS_MAX_PENDING_INPUT_BYTES, the default


def input_rows(terminal: str) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(terminal_id=uuid.UUID(terminal), action="input").order_by("id"))


# WebSocket input: the limits and the audit of POST .../input


def test_websocket_input_is_audited_like_rest_input_before_its_bytes_reach_the_terminal(embedded_server, keys, orm):
    """An input frame leaves the row the input endpoint leaves (action, outcome, user, key, the text as sent), and
    the row is there as soon as the output the input caused is."""
    api = Api(embedded_server.url, keys["alice"])
    try:
        terminal = api.create(shell="/bin/bash")["terminalId"]
        api.send(terminal, "echo rest-$((1+1))")
        api.wait_output(terminal, lambda out: "rest-2" in out)
        rest_row = input_rows(terminal)[-1]

        async def scenario():
            live = await Live.open(embedded_server.url, terminal, keys["alice"])
            await live.send(type="input", data="echo ws-$((2+3))\r")
            await live.until_text("ws-5")
            rows = await asyncio.to_thread(input_rows, terminal)  # no waiting: the row must already be there
            await live.close()
            return rows

        rows = run(scenario())
        ws_row = rows[-1]
        assert ws_row.id > rest_row.id and ws_row.details["input"] == "echo ws-$((2+3))\r"
        for field in ("action", "outcome", "username", "key_prefix"):
            assert getattr(ws_row, field) == getattr(rest_row, field), field
        assert ws_row.outcome == "sent" and ws_row.key_prefix == keys["alice"].split(".")[0]
        assert set(ws_row.details) == set(rest_row.details)
    finally:
        api.cleanup()


def test_typed_keys_go_out_at_once_and_are_on_record_before_the_key_that_runs_them(embedded_server, keys, orm):
    """Batched key audit (the default, terminals/keystrokes.py): keys typed one frame each reach the shell's line at
    once; when the command's output shows, the rows of every key of its line, Enter last, are already committed;
    keys never followed by Enter are on record within the batch delay too."""
    api = Api(embedded_server.url, keys["alice"])
    try:
        terminal = api.create(shell="/bin/bash", cols=300)["terminalId"]  # no line wrapping in the echo
        line = "echo batched-$((3+4))"

        async def scenario():
            live = await Live.open(embedded_server.url, terminal, keys["alice"])
            for key in line:
                await live.send(type="input", data=key)
            await live.send(type="input", data="\r")
            await live.until_text("batched-7\r\n")
            rows = await asyncio.to_thread(input_rows, terminal)  # no waiting: they must already be there
            for key in "left-unentered":
                await live.send(type="input", data=key)
            await live.until_text("left-unentered")
            await live.close()
            return rows

        rows = run(scenario())
        texts = [row.details["input"] for row in rows]
        assert "".join(texts) == line + "\r" and texts[-1] == "\r", texts
        assert all(row.outcome == "sent" for row in rows)
        assert sum(row.details.get("frames", 1) for row in rows[:-1]) == len(line)
        wait_for(lambda: [row.details["input"] for row in input_rows(terminal)][-1] == "left-unentered", 10,
                 "the row of keys typed without Enter")
    finally:
        api.cleanup()


def test_strict_key_audit_commits_a_row_before_every_frame(django_db_setup, keys, orm):
    """TERMINALS_KEY_AUDIT=strict: each frame has its own row before its bytes go out, as POST .../input."""
    server = start_embedded(TERMINALS_KEY_AUDIT="strict")
    api = Api(server.url, keys["alice"])
    try:
        terminal = api.create(command="cat")["terminalId"]

        async def scenario():
            live = await Live.open(server.url, terminal, keys["alice"])
            seen = []
            for key in "xyz":
                await live.send(type="input", data=key)
                await live.until_text(key)
                seen.append([row.details["input"] for row in await asyncio.to_thread(input_rows, terminal)])
            await live.close()
            return seen

        assert run(scenario()) == [["x"], ["x", "y"], ["x", "y", "z"]]
    finally:
        api.cleanup()
        server.stop()


def test_websocket_input_over_the_limits_gets_error_frames_audited_and_the_socket_stays_open(embedded_server, keys,
                                                                                            orm, tmp_path):
    """Over-long input and a line too long for a line-reading program get INVALID_INPUT error frames, each refusal
    is audited as the input endpoint audits its own, nothing of them reaches the program, and the same connection
    then sends a line that fits."""
    api = Api(embedded_server.url, keys["alice"])
    target = tmp_path / "lines"
    try:
        terminal = api.create(command="sh", args=["-c", f"cat > {target}"], cwd="/tmp")["terminalId"]

        async def scenario():
            live = await Live.open(embedded_server.url, terminal, keys["alice"])
            await live.send(type="input", data="o" * (MAX_INPUT_BYTES + 1))
            too_long = await live.next_of("error")
            await live.send(type="input", data="a" * LONG_LINE + "\n")
            too_long_line = await live.next_of("error")
            await live.send(type="input", data="b" * 4095 + "\n")
            await live.send(type="input", data="\x04")
            await live.until(lambda it: any(frame["type"] == "exit" for frame in it.frames), "the exit frame")
            return too_long, too_long_line

        too_long, too_long_line = run(scenario())
        assert too_long["code"] == "INVALID_INPUT" and str(MAX_INPUT_BYTES) in too_long["message"], too_long
        assert too_long_line["code"] == "INVALID_INPUT" and "4095" in too_long_line["message"], too_long_line
        assert target.read_bytes() == b"b" * 4095 + b"\n"
        refusals = [row.outcome for row in input_rows(terminal) if row.outcome != "sent"]
        assert refusals == ["INVALID_INPUT", "INVALID_INPUT"], refusals
    finally:
        api.cleanup()


def test_websocket_input_to_a_full_queue_gets_write_failed_and_the_socket_stays_open(embedded_server, keys, orm):
    """Input to a program that never reads fills the bounded queue: the frame that overflows it gets a
    WRITE_FAILED error frame (audited), and the connection keeps answering frames."""
    api = Api(embedded_server.url, keys["alice"])
    try:
        terminal = api.create(command="sleep", args=["600"], cwd="/tmp")["terminalId"]
        chunk = ("z" * 4000 + "\n") * 4  # lines that fit; 16 KiB frames until the 1 MiB queue is full

        async def scenario():
            live = await Live.open(embedded_server.url, terminal, keys["alice"])
            for _ in range(2 * MAX_PENDING_INPUT_BYTES // len(chunk)):
                await live.send(type="input", data=chunk)
                if any(frame["type"] == "error" for frame in live.frames):
                    break
                try:  # an error frame, if the queue is full, comes before the next frame is read
                    await live.frame(timeout=0.05)
                except TimeoutError:
                    pass
            if not any(frame["type"] == "error" for frame in live.frames):
                await live.next_of("error")
            refused = next(frame for frame in live.frames if frame["type"] == "error")
            await live.send(type="paste", data="x")  # still open: this frame gets its own answer
            await live.until(lambda it: "paste" in it.frames[-1].get("message", ""), "the answer to the paste frame")
            still_open = live.frames[-1]
            await live.close()
            return refused, still_open

        refused, still_open = run(scenario(), timeout=90)
        assert refused["code"] == "WRITE_FAILED", refused
        assert still_open["code"] == "INVALID_INPUT" and "paste" in still_open["message"]
        assert "WRITE_FAILED" in [row.outcome for row in input_rows(terminal)]
        assert api.delete(f"/api/terminals/{terminal}").status_code == 200
    finally:
        api.cleanup()


# Disabling a user closes their connections


def test_disabling_a_user_closes_their_open_connection_with_4401(embedded_server, keys, orm):
    """An open connection of a user set inactive is closed with 4401 within about 2 seconds (checked at most 5)."""
    user, key = make_key(name="disabled")
    api = Api(embedded_server.url, key)
    try:
        terminal = api.create(shell="/bin/bash")["terminalId"]

        async def scenario():
            live = await Live.open(embedded_server.url, terminal, key)
            await asyncio.to_thread(lambda: get_user_model().objects.filter(pk=user.pk).update(is_active=False))
            started = time.monotonic()
            code = await live.closed(timeout=8)
            return code, time.monotonic() - started

        code, took = run(scenario())
        assert code == 4401
        assert took < 5, f"closed only after {took:.1f} s"
    finally:
        staff_api = Api(embedded_server.url, keys["staff"])  # the owner is disabled: clean up as staff
        staff_api.created = api.created
        staff_api.cleanup()


# Following over HTTP


def raw_follow(api: Api, terminal: str, until: str, params: dict | None = None) -> str:
    """The raw text of a follow stream, read until `until` appears in it."""
    text = ""
    with api.get(f"/api/terminals/{terminal}/output", params={"follow": "true", **(params or {})}, stream=True,
                 timeout=(5, 20)) as response:
        assert response.status_code == 200, response.text
        for line in response.iter_lines(chunk_size=1, decode_unicode=True):
            text += line + "\n"
            if until in text:
                return text
    raise AssertionError(f"the stream ended before {until!r}: {text[-500:]!r}")


def test_follow_starts_with_retry_and_is_audited(embedded_server, keys, orm):
    """A follow stream begins with `retry: 1000` before its first event, and leaves one `follow` audit row with the
    byte it started from."""
    api = Api(embedded_server.url, keys["alice"])
    try:
        terminal = api.create(command="sh", args=["-c", "echo followed; sleep 600"], cwd="/tmp")["terminalId"]
        api.wait_output(terminal, lambda out: "followed" in out)
        text = raw_follow(api, terminal, "lowed", {"fromByte": 3})
        assert text.startswith("retry: 1000\n\n"), text[:80]
        assert text.index("retry: 1000") < text.index("event: attached")
        rows = list(AuditEvent.objects.filter(terminal_id=uuid.UUID(terminal), action="follow"))
        assert len(rows) == 1 and rows[0].outcome == "ok" and rows[0].details["fromByte"] == 3, rows
    finally:
        api.cleanup()


@pytest.fixture(scope="module")
def quick_keepalive_server(django_db_setup):
    """An embedded server whose follow streams send a keepalive comment after 300 ms without output."""
    server = start_embedded(TERMINALS_SSE_KEEPALIVE_MS="300")
    yield server
    server.stop()


def test_follow_sends_keepalive_comments_while_the_terminal_is_silent(quick_keepalive_server, keys):
    """A follow stream of a silent terminal carries `: keepalive` comments, and output still comes after them."""
    api = Api(quick_keepalive_server.url, keys["alice"])
    try:
        terminal = api.create(command="sh", args=["-c", "read line; echo got-$line; sleep 600"], cwd="/tmp")[
            "terminalId"]
        lines, typed = [], False
        # A read timeout of 5 s: far above the 300 ms keepalive, far below the default 15 s one.
        with api.get(f"/api/terminals/{terminal}/output", params={"follow": "true"}, stream=True,
                     timeout=(5, 5)) as response:
            assert response.status_code == 200, response.text
            for line in response.iter_lines(chunk_size=1, decode_unicode=True):
                lines.append(line)
                if lines.count(": keepalive") == 2 and not typed:
                    api.send(terminal, "after")
                    typed = True
                if "got-after" in line:
                    break
        assert lines.count(": keepalive") >= 2, lines
        assert lines.index(": keepalive") < next(i for i, line in enumerate(lines) if "got-after" in line)
    finally:
        api.cleanup()


@pytest.fixture(scope="module")
def small_buffer_server(django_db_setup):
    """An embedded server that keeps only 64 KiB of output per terminal."""
    server = start_embedded(TERMINALS_MAX_BUFFER_BYTES="65536")
    yield server
    server.stop()


def test_follow_reports_evicted_output_as_a_gap_event(small_buffer_server, keys):
    """Following from byte 0 after most of the output was evicted: `attached`, then a `gap` event from 0 to the
    oldest byte held (its id where output goes on), then output from exactly there."""
    api = Api(small_buffer_server.url, keys["alice"])
    try:
        terminal = api.create(command="sh", args=["-c", "head -c 300000 /dev/zero | tr '\\0' x; echo; echo done-7"],
                              cwd="/tmp")["terminalId"]
        api.wait_status(terminal, "exited", timeout=30)
        held = stats(api, terminal)
        assert held["oldestByte"] > 0
        with api.get(f"/api/terminals/{terminal}/output", params={"follow": "true", "fromByte": 0}, stream=True,
                     timeout=(5, 20)) as response:
            events = list(sse_events(response))
        assert [event["event"] for event in events[:3]] == ["attached", "gap", "output"], events[:3]
        gap, output = events[1], events[2]
        assert gap["data"] == {"from": 0, "to": held["oldestByte"]} and int(gap["id"]) == held["oldestByte"]
        assert output["data"]["offset"] == held["oldestByte"]
        assert events[-1]["event"] == "exit"
        assert "done-7" in "".join(event["data"]["data"] for event in events if event["event"] == "output")
    finally:
        api.cleanup()


# The idle sweep, as the worker runs it


@pytest.fixture(scope="module")
def quick_sweep_server(django_db_setup):
    """An embedded server whose terminals time out after 3 s without input or output, swept every 200 ms."""
    server = start_embedded(SESSION_TIMEOUT="3000", TERMINALS_SWEEP_INTERVAL_MS="200")
    yield server
    server.stop()


def test_the_sweep_ends_an_idle_terminal_by_itself_and_leaves_an_active_one(quick_sweep_server, keys, orm):
    """With no clock moved by hand: a terminal silent for the session timeout becomes `timed_out` with a `timeout`
    audit row and its output freed (409), while one printing all along, made before it, stays active."""
    api = Api(quick_sweep_server.url, keys["alice"])
    try:
        active = api.create(command="sh", args=["-c", "while :; do echo busy; sleep 0.3; done"],
                            cwd="/tmp")["terminalId"]
        idle = api.create(command="sleep", args=["600"], cwd="/tmp")["terminalId"]
        ended = api.wait_status(idle, "timed_out", timeout=30)
        assert api.get(f"/api/terminals/{active}").json()["data"]["status"] == "active"
        rows = wait_for(lambda: list(AuditEvent.objects.filter(terminal_id=uuid.UUID(idle), action="timeout")), 10,
                        "the timeout audit row")
        assert len(rows) == 1, rows
        assert ended["exitCode"] is None or ended["signal"] is not None, ended  # ended by the sweep's signal
        response = api.get(f"/api/terminals/{idle}/output")
        assert response.status_code == 409 and response.json()["error"]["code"] == "TERMINAL_INACTIVE"
        assert not AuditEvent.objects.filter(terminal_id=uuid.UUID(active), action="timeout").exists()
        assert "busy" in api.output(active)["output"]
    finally:
        api.cleanup()
