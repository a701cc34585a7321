"""The live terminal: WebSocket attach (output, input, resize, signals, exit, resume, gaps, viewers, refusals),
Server-Sent Events follow, many clients at once and the `manage.py attach` CLI, against real daphne servers."""

from __future__ import annotations

import asyncio
import json
import shlex
import subprocess
import sys
import time
import uuid
from types import SimpleNamespace
from urllib.parse import urlencode

import pytest
import websockets

from terminals.models import ApiKey, AuditEvent

from .client import Api
from .conftest import make_key
from .helpers import run
from .servers import ROOT, service_env, start_embedded, wait_for

FRAME_TIMEOUT = 15.0  # the longest any single expected frame may take


# A WebSocket client that checks the stream as it reads it


def ws_url(base: str, terminal: str, **query) -> str:
    suffix = f"?{urlencode(query)}" if query else ""
    return f"{base.replace('http://', 'ws://', 1)}/ws/terminals/{terminal}/{suffix}"


class Live:
    """One attached client: every frame it got, and the output bytes it was sent, checked contiguous as they come."""

    def __init__(self, ws) -> None:
        self.ws = ws
        self.frames: list[dict] = []
        self.chunks: list[str] = []
        self.attached: dict = {}
        self.next: int | None = None  # the offset the next output or gap frame must start at
        self.close_code: int | None = None

    @classmethod
    async def open(cls, base: str, terminal: str, key: str | None = None, headers: dict | None = None,
                   **query) -> Live:
        """Connects and reads the attached frame, which must come first."""
        all_headers = {**({"X-API-Key": key} if key else {}), **(headers or {})}
        ws = await websockets.connect(ws_url(base, terminal, **query), additional_headers=all_headers, max_size=None)
        live = cls(ws)
        first = await live.frame()
        assert first["type"] == "attached", first
        live.attached = first
        live.next = first["fromByte"]
        return live

    @property
    def text(self) -> str:
        return "".join(self.chunks)

    @property
    def data(self) -> bytes:
        return self.text.encode("utf-8")

    async def frame(self, timeout: float = FRAME_TIMEOUT) -> dict:
        """The next server frame; output and gap frames must start where the stream stands."""
        try:
            raw = await asyncio.wait_for(self.ws.recv(), timeout)
        except websockets.ConnectionClosed as closed:
            self.close_code = closed.rcvd.code if closed.rcvd else None
            raise
        frame = json.loads(raw)
        self.frames.append(frame)
        if frame["type"] == "output":
            assert frame["offset"] == self.next, f"output at {frame['offset']}, expected {self.next}"
            assert frame["next"] - frame["offset"] == len(frame["data"].encode("utf-8")), frame
            self.chunks.append(frame["data"])
            self.next = frame["next"]
        elif frame["type"] == "gap":
            assert frame["from"] == self.next, f"gap from {frame['from']}, expected {self.next}"
            assert frame["to"] > frame["from"], frame
            self.next = frame["to"]
        return frame

    async def until(self, predicate, what: str, timeout: float = FRAME_TIMEOUT) -> dict | None:
        """Reads frames until predicate(self) holds; fails after timeout seconds with what was seen."""
        deadline = time.monotonic() + timeout
        while not predicate(self):
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"timed out waiting for {what}; output so far: {self.text[-500:]!r}")
            try:
                await self.frame(left)
            except TimeoutError:
                continue
        return self.frames[-1] if self.frames else None

    async def until_text(self, needle: str, timeout: float = FRAME_TIMEOUT) -> None:
        await self.until(lambda live: needle in live.text, repr(needle), timeout)

    async def send(self, **frame) -> None:
        await self.ws.send(json.dumps(frame))

    async def next_of(self, kind: str, timeout: float = FRAME_TIMEOUT) -> dict:
        """Reads until a new frame of this type arrives and returns it."""
        seen = len(self.frames)
        await self.until(lambda live: any(frame["type"] == kind for frame in live.frames[seen:]), f"a {kind} frame",
                         timeout)
        return next(frame for frame in self.frames[seen:] if frame["type"] == kind)

    async def closed(self, timeout: float = FRAME_TIMEOUT) -> int:
        """Reads until the server closes the connection; returns the close code."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            assert left > 0, f"the server did not close the connection within {timeout:g} s"
            try:
                await self.frame(left)
            except websockets.ConnectionClosed:
                return self.close_code
            except TimeoutError:
                continue

    async def close(self) -> None:
        await self.ws.close()


async def refusal(base: str, terminal: str, headers: dict | None = None, **query) -> int:
    """Connects and returns the close code; fails if any frame (attached or output) comes first. An error frame
    saying why (staff attaching interactively to another user's terminal get one) is no terminal byte."""
    async with websockets.connect(ws_url(base, terminal, **query), additional_headers=headers or {},
                                  max_size=None) as ws:
        try:
            message = await asyncio.wait_for(ws.recv(), FRAME_TIMEOUT)
            while json.loads(message).get("type") == "error":
                message = await asyncio.wait_for(ws.recv(), FRAME_TIMEOUT)
        except websockets.ConnectionClosed as closed:
            return closed.rcvd.code
    raise AssertionError(f"expected the connection to be refused, got the frame {message}")


def web_urls(server) -> list[str]:
    """Every web process's URL: two in the split deployment, the one server in the embedded one."""
    return server.urls or [server.url]


def rest_bytes(api: Api, terminal: str, from_byte: int = 0) -> dict:
    return api.output(terminal, fromByte=from_byte, maxBytes=1048576)


def stats(api: Api, terminal: str) -> dict:
    response = api.get(f"/api/terminals/{terminal}/stats")
    assert response.status_code == 200, response.text
    return response.json()["data"]


def attach_audits(terminal: str, **filters) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(terminal_id=uuid.UUID(terminal), action="attach", **filters))


# Output, input, resize, signals and exit


def test_live_output_arrives_in_contiguous_frames(server, client, keys):
    """Typed input runs and its output is pushed as frames, each starting where the previous one ended."""
    terminal = client.create(shell="/bin/bash")["terminalId"]

    async def scenario():
        live = await Live.open(server.url, terminal, keys["alice"])
        assert live.attached["terminalId"] == terminal
        assert live.attached["fromByte"] == live.attached["oldestByte"] == 0
        assert live.attached["isActive"] is True
        assert live.attached["readOnly"] is False
        assert live.attached["viewers"] == 1
        await live.send(type="input", data="echo live-$((1+1))\r")  # sent raw: the \r is the Enter key
        await live.until_text("live-2\r\n")
        await live.close()
        return live

    live = run(scenario())
    outputs = [frame for frame in live.frames if frame["type"] == "output"]
    assert outputs[0]["offset"] == 0
    assert all(later["offset"] == earlier["next"] for earlier, later in zip(outputs, outputs[1:]))
    assert not [frame for frame in live.frames if frame["type"] in ("gap", "error", "paused")]
    assert "live-2" in client.full_output(terminal)


def test_live_resize_frame_changes_the_terminal_size(server, client, keys):
    """A resize frame resizes the PTY: `stty size` prints the new rows and columns, and the record keeps them."""
    terminal = client.create(shell="/bin/bash", cols=80, rows=24)["terminalId"]

    async def scenario():
        live = await Live.open(server.url, terminal, keys["alice"])
        assert (live.attached["cols"], live.attached["rows"]) == (80, 24)
        await live.send(type="resize", cols=123, rows=45)
        await live.send(type="input", data="stty size\r")
        await live.until_text("45 123\r\n")
        await live.close()

    run(scenario())
    record = client.get(f"/api/terminals/{terminal}").json()["data"]
    assert (record["cols"], record["rows"]) == (123, 45)


def test_live_signal_frame_interrupts_the_foreground_program(server, client, keys):
    """A SIGINT frame interrupts `sleep 30` at once: the shell takes the next command within seconds."""
    terminal = client.create(shell="/bin/bash")["terminalId"]

    def sleeping():
        data = client.get(f"/api/terminals/{terminal}").json()["data"]
        return data.get("busy") and "sleep" in (data.get("foreground") or {}).get("command", "")

    async def scenario():
        live = await Live.open(server.url, terminal, keys["alice"])
        await live.send(type="input", data="sleep 30\r")
        await asyncio.to_thread(wait_for, sleeping, 10, "sleep 30 in the foreground")
        started = time.monotonic()
        await live.send(type="signal", signal="SIGINT")
        # Typed while sleep runs, this would only run after 30 s; it runs now because sleep was interrupted.
        await live.send(type="input", data="echo back-$((2+3))\r")
        await live.until_text("back-5\r\n", timeout=10)
        took = time.monotonic() - started
        await live.close()
        return took, live

    took, live = run(scenario())
    assert took < 10, f"the prompt came back only after {took:.1f} s"
    assert not [frame for frame in live.frames if frame["type"] == "error"]


def test_live_exit_frame_carries_the_exit_code_then_closes_1000(server, client, keys):
    """When the shell exits the client gets an exit frame with the code at the stream's end, and close 1000
    once it acknowledges that end."""
    terminal = client.create(shell="/bin/bash")["terminalId"]

    async def scenario():
        live = await Live.open(server.url, terminal, keys["alice"])
        await live.until_text("# ")  # the prompt: the shell reads input
        await live.send(type="input", data="exit 3\r")
        exit_frame = await live.next_of("exit")
        await live.send(type="ack", offset=exit_frame["offset"])
        code = await live.closed()
        return live, exit_frame, code

    live, exit_frame, code = run(scenario())
    assert exit_frame["exitCode"] == 3
    assert exit_frame["signal"] is None
    assert exit_frame["offset"] == live.next
    assert code == 1000
    assert client.wait_status(terminal, "exited")["exitCode"] == 3


# Resuming and gaps


def test_live_resume_from_byte_loses_and_repeats_nothing(server, client, keys):
    """Reconnecting with fromByte=<last next> continues exactly: both connections' bytes equal the REST byte read."""
    terminal = client.create(shell="/bin/bash")["terminalId"]

    async def first_connection():
        live = await Live.open(server.url, terminal, keys["alice"])
        await live.send(type="input", data="echo one-$((0+1))\r")
        await live.until_text("one-1\r\n")
        await live.close()
        return live

    first = run(first_connection())
    client.send(terminal, "echo two-$((1+1))")  # while nobody is attached
    client.wait_output(terminal, lambda out: "two-2" in out)

    async def second_connection():
        live = await Live.open(server.url, terminal, keys["alice"], fromByte=first.next)
        assert live.attached["fromByte"] == first.next
        await live.until_text("two-2\r\n")
        # Read on until the live stream and a REST read of the whole output end at the same byte.
        while True:
            read = await asyncio.to_thread(rest_bytes, client, terminal)
            if read["nextByte"] == live.next:
                break
            await live.until(lambda it: it.next >= read["nextByte"], f"byte {read['nextByte']}")
        await live.close()
        return live, read

    second, read = run(second_connection())
    outputs = [frame for frame in second.frames if frame["type"] == "output"]
    assert outputs[0]["offset"] == first.next
    assert not [frame for frame in first.frames + second.frames if frame["type"] == "gap"]
    assert read["fromByte"] == 0 and read["truncated"] is False
    assert first.text + second.text == read["chunk"]
    assert "two-2" not in first.text and "one-1" not in second.text


@pytest.fixture(scope="module")
def small_buffer_server(django_db_setup):
    """An embedded server that keeps only 64 KiB of output per terminal."""
    server = start_embedded(TERMINALS_MAX_BUFFER_BYTES="65536")
    yield server
    server.stop()


def test_live_gap_frame_reports_evicted_output(small_buffer_server, keys):
    """Attaching from byte 0 after 500 KB scrolled out of a 64 KiB buffer: attached, a gap to the oldest byte held,
    then output from exactly there up to the end."""
    api = Api(small_buffer_server.url, keys["alice"])
    try:
        terminal = api.create(shell="/bin/bash")["terminalId"]
        api.send(terminal, "head -c 500000 /dev/zero | tr '\\0' x; echo; echo done-$((3+4))")
        api.wait_output(terminal, lambda out: "done-7" in out, timeout=30)
        held = stats(api, terminal)
        assert 0 < held["oldestByte"] and held["totalBytes"] - held["oldestByte"] < 250000  # most of it evicted

        async def scenario():
            live = await Live.open(small_buffer_server.url, terminal, keys["alice"], fromByte=0)
            await live.until(lambda it: it.next >= held["totalBytes"], f"byte {held['totalBytes']}")
            await live.close()
            return live

        live = run(scenario())
        assert live.attached["fromByte"] == 0
        assert live.attached["oldestByte"] == held["oldestByte"] > 0
        gap, output = live.frames[1], live.frames[2]
        assert gap == {"type": "gap", "from": 0, "to": held["oldestByte"]}
        assert output["type"] == "output" and output["offset"] == held["oldestByte"]
        assert len([frame for frame in live.frames if frame["type"] == "gap"]) == 1
        assert "done-7" in live.text
        assert live.data == rest_bytes(api, terminal, held["oldestByte"])["chunk"].encode()[: len(live.data)]
    finally:
        api.cleanup()


# Several clients, read-only viewers and bad frames


def test_live_two_viewers_see_the_same_stream_and_view_mode_is_read_only(server, client, keys):
    """An interactive client and a mode=view client (through another web process in the split deployment) get the
    same bytes at the same offsets; the viewer's input, resize and signal are refused with FORBIDDEN and never reach
    the terminal."""
    terminal = client.create(shell="/bin/bash", cols=80, rows=24)["terminalId"]
    urls = web_urls(server)

    async def scenario():
        typist = await Live.open(urls[0], terminal, keys["alice"])
        viewer = await Live.open(urls[-1], terminal, keys["alice"], mode="view")
        assert viewer.attached["readOnly"] is True
        assert viewer.attached["viewers"] == 2
        await typist.send(type="input", data="echo shared-$((5*5))\r")
        await typist.until_text("shared-25\r\n")
        await viewer.until(lambda it: it.next >= typist.next, f"byte {typist.next} for the viewer")

        for frame in ({"type": "input", "data": "echo viewer-$((6*7))\r"},
                      {"type": "resize", "cols": 33, "rows": 11},
                      {"type": "signal", "signal": "SIGTERM"}):
            await viewer.send(**frame)
            error = await viewer.next_of("error")
            assert error["code"] == "FORBIDDEN", error
        await viewer.send(type="ack", offset=viewer.next)  # acknowledging is what a viewer may do

        await typist.send(type="input", data="echo after-$((1+2))\r")
        await typist.until_text("after-3\r\n")
        await viewer.until_text("after-3\r\n")
        await typist.close()
        await viewer.close()
        return typist, viewer

    typist, viewer = run(scenario())
    common = min(len(typist.data), len(viewer.data))
    assert typist.attached["fromByte"] == viewer.attached["fromByte"] == 0
    assert typist.data[:common] == viewer.data[:common]
    assert "after-3" in typist.data[:common].decode()
    assert "viewer" not in typist.text and "viewer" not in client.full_output(terminal)
    record = client.get(f"/api/terminals/{terminal}").json()["data"]
    assert (record["cols"], record["rows"]) == (80, 24) and record["status"] == "active"


def test_live_bad_frames_get_error_frames_and_the_connection_survives(server, client, keys):
    """Malformed JSON, an unknown frame type and a 300 KB frame are each answered by an error frame; the connection
    stays usable."""
    terminal = client.create(shell="/bin/bash")["terminalId"]

    async def scenario():
        live = await Live.open(server.url, terminal, keys["alice"])
        errors = []
        oversized = json.dumps({"type": "input", "data": "y" * 300_000})
        for raw in ("{not json", json.dumps({"type": "teleport"}), oversized):
            await live.ws.send(raw)
            errors.append(await live.next_of("error"))
        await live.send(type="input", data="echo alive-$((8*8))\r")
        await live.until_text("alive-64\r\n")
        await live.close()
        return errors, live

    errors, live = run(scenario())
    assert [error["code"] for error in errors] == ["INVALID_INPUT"] * 3
    assert "JSON" in errors[0]["message"]
    assert "teleport" in errors[1]["message"]
    assert "larger" in errors[2]["message"]
    assert "yyyy" not in live.text


# Refusals and authentication


def test_live_refusals_close_with_their_codes_and_are_audited(server, client, keys, orm):
    """No key, a bad key and a revoked key close 4401; another user's or an unknown terminal 4404; a released one
    4409; each before any frame, and each refusal is an audit row."""
    terminal = client.create(shell="/bin/bash")["terminalId"]
    released = client.create(shell="/bin/bash")["terminalId"]
    assert client.delete(f"/api/terminals/{released}").status_code == 200
    unknown = str(uuid.uuid4())

    cases = [
        (terminal, {}, 4401, "UNAUTHORIZED"),
        (terminal, {"X-API-Key": "tk_deadbeef.not-a-real-key"}, 4401, "UNAUTHORIZED"),
        (terminal, {"Authorization": "Api-Key garbage"}, 4401, "UNAUTHORIZED"),
        (terminal, {"X-API-Key": keys["revoked"]}, 4401, "UNAUTHORIZED"),
        (terminal, {"X-API-Key": keys["bob"]}, 4404, "TERMINAL_NOT_FOUND"),
        (unknown, {"X-API-Key": keys["alice"]}, 4404, "TERMINAL_NOT_FOUND"),
        (released, {"X-API-Key": keys["alice"]}, 4409, "TERMINAL_INACTIVE"),
    ]

    async def scenario():
        return [await refusal(server.url, target, headers) for target, headers, _, _ in cases]

    codes = run(scenario())
    assert codes == [code for _, _, code, _ in cases]

    outcomes = [event.outcome for event in attach_audits(terminal)]
    assert outcomes.count("UNAUTHORIZED") == 4
    assert outcomes.count("TERMINAL_NOT_FOUND") == 1
    bob_refusal = attach_audits(terminal, outcome="TERMINAL_NOT_FOUND")[0]
    assert bob_refusal.username.startswith("bob-")
    assert [event.outcome for event in attach_audits(unknown)] == ["TERMINAL_NOT_FOUND"]
    assert [event.outcome for event in attach_audits(released)] == ["TERMINAL_INACTIVE"]


def test_live_path_without_its_slash_attaches_and_unknown_paths_close_4404(server, client, keys):
    """/ws/terminals/<id> without its trailing slash attaches like the documented path; any other /ws/ path (and a
    WebSocket anywhere else) is accepted and closed 4404, as an unknown REST path answers 404: never an HTTP 500."""
    terminal = client.create(shell="/bin/bash")["terminalId"]
    ws_base = server.url.replace("http://", "ws://", 1)
    unknown = ["/ws/", "/ws/nothing", "/ws/terminals/", f"/ws/terminals/{terminal}/extra", "/api/terminals", "/"]

    async def close_code(path: str, headers: dict) -> int:
        async with websockets.connect(ws_base + path, additional_headers=headers) as ws:
            try:
                message = await asyncio.wait_for(ws.recv(), FRAME_TIMEOUT)
            except websockets.ConnectionClosed as closed:
                return closed.rcvd.code
        raise AssertionError(f"{path}: expected a close, got {message}")

    async def scenario():
        async with websockets.connect(f"{ws_base}/ws/terminals/{terminal}", max_size=None,
                                      additional_headers={"X-API-Key": keys["alice"]}) as ws:
            attached = json.loads(await asyncio.wait_for(ws.recv(), FRAME_TIMEOUT))
        codes = {path: await close_code(path, {"X-API-Key": keys["alice"]}) for path in unknown}
        codes["/ws/nothing (no key)"] = await close_code("/ws/nothing", {})
        return attached, codes

    attached, codes = run(scenario())
    assert attached["type"] == "attached" and attached["terminalId"] == terminal, attached
    assert codes == {path: 4404 for path in codes}, codes


def test_live_attach_and_detach_are_audited(server, client, keys, orm):
    """A successful connection leaves an attach row (with its mode) and, once closed, a detach row."""
    terminal = client.create(shell="/bin/bash")["terminalId"]

    async def scenario():
        live = await Live.open(server.url, terminal, headers={"Authorization": f"Api-Key {keys['alice']}"},
                               mode="view")
        await live.close()

    run(scenario())
    attached = wait_for(lambda: attach_audits(terminal, outcome="ok"), 10, "the attach audit row")
    assert len(attached) == 1
    assert attached[0].details == {"mode": "view"}
    assert attached[0].username.startswith("alice-")
    # A deadline only, as for the detaches below: 10 s ran out once under full-suite load (the test passes alone).
    detached = wait_for(lambda: list(AuditEvent.objects.filter(terminal_id=uuid.UUID(terminal), action="detach")),
                        30, "the detach audit row")
    assert len(detached) == 1 and detached[0].outcome == "ok"
    assert detached[0].details["closeCode"] in (1000, 1005)


def test_live_revoking_the_key_closes_its_open_connection(server, keys, orm):
    """An open connection whose key is revoked is closed with 4401 within 5 s."""
    user, key = make_key(name="revokee")
    api = Api(server.url, key)
    try:
        terminal = api.create(shell="/bin/bash")["terminalId"]

        async def scenario():
            live = await Live.open(server.url, terminal, key)
            await asyncio.to_thread(lambda: ApiKey.objects.get(user=user).revoke())
            started = time.monotonic()
            code = await live.closed(timeout=8)
            return code, time.monotonic() - started

        code, took = run(scenario())
        assert code == 4401
        assert took < 5, f"closed only after {took:.1f} s"
    finally:
        staff_api = Api(server.url, keys["staff"])  # the owner's key is revoked: clean up as staff
        staff_api.created = api.created
        staff_api.cleanup()


def test_live_session_cookie_authenticates_only_from_an_allowed_origin(server, orm):
    """A logged-in browser (Django session cookie) attaches when its Origin is an allowed host; a foreign Origin is
    closed with 4403 and audited."""
    from django.test import Client

    user, key = make_key(name="browser")
    api = Api(server.url, key)
    try:
        terminal = api.create(shell="/bin/bash")["terminalId"]
        browser = Client()
        browser.force_login(user)
        cookie = f"sessionid={browser.cookies['sessionid'].value}"
        port = server.url.rsplit(":", 1)[1]

        async def scenario():
            live = await Live.open(server.url, terminal, headers={"Cookie": cookie,
                                                                  "Origin": f"http://127.0.0.1:{port}"})
            await live.send(type="input", data="echo cookie-$((3*3))\r")
            await live.until_text("cookie-9\r\n")
            await live.close()
            foreign = await refusal(server.url, terminal, {"Cookie": cookie, "Origin": "http://evil.example"})
            originless = await refusal(server.url, terminal, {"Cookie": cookie})
            return live, foreign, originless

        live, foreign, originless = run(scenario())
        assert live.attached["terminalId"] == terminal
        assert foreign == 4403
        assert originless == 4403
        outcomes = [event.outcome for event in attach_audits(terminal)]
        assert outcomes.count("ok") == 1
        assert outcomes.count("FORBIDDEN") == 2
    finally:
        api.cleanup()


def test_live_idle_connection_does_not_delay_requests_on_its_web_process(server, client, keys):
    """While a client is attached to a quiet terminal, REST requests served by the same web process still answer at
    once (well under the 5 s worker timeout), and closing the connection detaches promptly."""
    terminal = client.create(shell="/bin/bash")["terminalId"]

    def timed_stats() -> float:
        started = time.monotonic()
        stats(client, terminal)
        return time.monotonic() - started

    async def scenario():
        live = await Live.open(server.url, terminal, keys["alice"])
        await live.until_text("# ")
        # Quiet now: no output for this connection to receive.
        took = [await asyncio.to_thread(timed_stats) for _ in range(3)]
        await live.close()
        return took

    took = run(scenario())
    assert max(took) < 2.0, f"stats took {[round(value, 2) for value in took]} s with an idle client attached"
    started = time.monotonic()
    # The detach (and its audit) follows the close at once; the next request is not held up either.
    assert client.get(f"/api/terminals/{terminal}").status_code == 200
    assert time.monotonic() - started < 2.0


def test_live_terminal_keeps_running_after_every_client_left(orm, server, client, keys):
    """Closing every live connection detaches without ending the terminal: it stays active and runs later input."""
    terminal = client.create(shell="/bin/bash")["terminalId"]

    async def attach_and_leave():
        clients = [await Live.open(url, terminal, keys["alice"]) for url in web_urls(server) * 2]
        await clients[0].send(type="input", data="sleep 0.2; echo left-$((4*4))\r")
        for live in clients:
            await live.close()

    run(attach_and_leave())
    assert client.get(f"/api/terminals/{terminal}").json()["data"]["status"] == "active"
    client.wait_output(terminal, lambda out: "left-16" in out)
    client.send(terminal, "echo still-$((9*9))")
    client.wait_output(terminal, lambda out: "still-81" in out)

    async def come_back():
        live = await Live.open(server.url, terminal, keys["alice"])
        await live.close()
        return live

    # A close detaches asynchronously; each consumer audits its detach once the worker has confirmed it.
    detached = AuditEvent.objects.filter(terminal_id=terminal, action="detach")
    expected = len(web_urls(server)) * 2
    wait_for(lambda: detached.count() >= expected, 30, f"{expected} detaches")  # a deadline only; 10 s ran out under load
    assert run(come_back()).attached["viewers"] == 1  # the earlier subscribers are gone


# Server-Sent Events


def sse_events(response):
    """Parses a text/event-stream response into dicts of its fields, as they arrive."""
    fields: dict = {}
    for line in response.iter_lines(chunk_size=1, decode_unicode=True):
        if line == "":
            if "event" in fields:
                fields["data"] = json.loads(fields["data"])
                yield fields
            fields = {}
        elif not line.startswith(":"):
            name, _, value = line.partition(":")
            fields[name] = value[1:] if value.startswith(" ") else value


def follow(api: Api, terminal: str, headers: dict | None = None) -> list[dict]:
    """Every event of one follow stream, until the server ends it."""
    with api.get(f"/api/terminals/{terminal}/output", params={"follow": "true"}, headers=headers or {},
                 stream=True, timeout=(5, 20)) as response:
        assert response.status_code == 200, response.text
        assert response.headers["Content-Type"].startswith("text/event-stream")
        return list(sse_events(response))


def test_live_follow_streams_output_and_exit_and_resumes_with_last_event_id(server, client):
    """GET output?follow=true streams the program's output then its exit code; with Last-Event-ID a new stream
    resumes after what was already seen."""
    terminal = client.create(command="sh", args=["-c", "for i in 1 2 3; do echo tick-$i; sleep 0.2; done; exit 2"])[
        "terminalId"]

    events = follow(client, terminal)
    kinds = [event["event"] for event in events]
    assert kinds[0] == "attached" and kinds[-1] == "exit" and set(kinds[1:-1]) == {"output"}, kinds
    assert events[-1]["data"] == {"exitCode": 2, "signal": None}
    outputs = [event for event in events if event["event"] == "output"]
    text = "".join(event["data"]["data"] for event in outputs)
    assert text.index("tick-1") < text.index("tick-2") < text.index("tick-3")
    for event in outputs:  # each id is the byte after the event's data
        assert int(event["id"]) == event["data"]["offset"] + len(event["data"]["data"].encode())
    assert int(events[-1]["id"]) == int(outputs[-1]["id"])

    seen = outputs[0]
    resumed = follow(client, terminal, {"Last-Event-ID": seen["id"]})
    assert resumed[0]["event"] == "attached" and resumed[0]["data"]["fromByte"] == int(seen["id"])
    assert resumed[-1]["event"] == "exit" and resumed[-1]["data"]["exitCode"] == 2
    rest = "".join(event["data"]["data"] for event in resumed if event["event"] == "output")
    assert seen["data"]["data"] + rest == text
    assert "tick-1" not in rest



def follow_until(api: Api, terminal: str, end: int, headers: dict) -> list[dict]:
    """The events of a follow stream until its output reaches byte end; then the stream is left."""
    events = []
    with api.get(f"/api/terminals/{terminal}/output", params={"follow": "true"}, headers=headers, stream=True,
                 timeout=(5, 20)) as response:
        assert response.status_code == 200, response.text
        for item in sse_events(response):
            events.append(item)
            if item["event"] in ("output", "gap") and int(item["id"]) >= end:
                return events
    raise AssertionError(f"the follow stream ended before byte {end}: {events}")


def test_live_replay_honours_the_output_byte_limit_while_another_client_watches(server, keys):
    """A terminal with outputByteLimit 101 prints 400 bytes while a client watches (so the output kept for
    watchers holds all of it): a WebSocket client and a follow stream that then ask for byte 0 get a gap and no
    more than the newest 101 bytes, as every other read does."""
    limit, api = 101, Api(server.url, keys["alice"])
    try:
        terminal = api.create(shell="/bin/sh", outputByteLimit=limit)["terminalId"]

        async def scenario():
            watcher = await Live.open(server.url, terminal, keys["alice"])
            api.send(terminal, "i=0; while [ $i -lt 40 ]; do printf 'line-%03d\\n' $i; i=$((i+1)); done; sleep 60")
            await watcher.until_text("line-039")
            end = stats(api, terminal)["totalBytes"]
            late = await Live.open(server.url, terminal, keys["alice"], fromByte=0)
            await late.until(lambda it: it.next >= end, f"byte {end}")
            await late.close()
            events = await asyncio.to_thread(follow_until, api, terminal, end, {"Last-Event-ID": "0"})
            await watcher.close()
            return late, events, end

        late, events, end = run(scenario())
        assert late.attached["oldestByte"] == end - limit
        assert late.frames[1] == {"type": "gap", "from": 0, "to": end - limit}
        assert len(late.data) == limit and late.text.endswith("line-039\r\n")
        assert events[1]["event"] == "gap" and events[1]["data"] == {"from": 0, "to": end - limit}
        followed = "".join(item["data"]["data"] for item in events if item["event"] == "output")
        assert followed == late.text
    finally:
        api.cleanup()



def test_live_client_resuming_after_a_pause_gets_every_byte_beyond_a_small_output_limit(server, keys):
    """A client that stops acknowledging is paused; when it acknowledges after the program printed 6 MB into a
    terminal that keeps 1 KiB, it resumes from where it was paused with no gap: the output kept for attached
    clients serves it, and the terminal's limit bounds only what a new client replays."""
    api = Api(server.url, keys["alice"])
    try:
        flood = "read go; head -c 4500000 /dev/zero | base64 -w 76; echo flood-''end"
        terminal = api.create(command="sh", args=["-c", flood], outputByteLimit=1024)["terminalId"]

        async def scenario():
            live = await Live.open(server.url, terminal, keys["alice"])
            await asyncio.to_thread(api.send, terminal, "go")
            paused = await live.next_of("paused")
            await asyncio.to_thread(api.wait_status, terminal, "exited", 60)
            assert stats(api, terminal)["oldestByte"] > paused["offset"]  # the terminal itself no longer holds it
            await live.send(type="ack", offset=paused["offset"])
            while True:
                frame = await live.frame()
                if frame["type"] == "paused":
                    await live.send(type="ack", offset=frame["offset"])
                elif frame["type"] == "exit":
                    await live.send(type="ack", offset=frame["offset"])
                    return live

        live = run(scenario(), timeout=120)
        assert not [frame for frame in live.frames if frame["type"] == "gap"]
        assert live.next == stats(api, terminal)["totalBytes"]
        assert live.text.endswith("flood-end\r\n")
    finally:
        api.cleanup()


# Many clients


def test_live_one_hundred_clients_all_receive_the_output(server, keys):
    """100 clients attached to one terminal at once all get the output of `seq 1 2000`. (How fast is measured in
bench/; the deadlines here only keep a broken run from hanging.)

    In split mode every attach and every output frame is a Redis operation; more of them in flight than the
    connection pool holds used to fail the sends past the hundredth, and those clients never saw the output.
    """
    api = Api(server.url, keys["alice"])
    try:
        terminal = api.create(shell="/bin/bash")["terminalId"]

        async def scenario():
            clients = await asyncio.gather(*(Live.open(server.url, terminal, keys["alice"])
                                             for _ in range(100)))
            assert max(live.attached["viewers"] for live in clients) == 100
            await asyncio.to_thread(api.send, terminal, "seq 1 2000")
            await asyncio.gather(*(live.until_text("1999\r\n2000\r\n", timeout=150) for live in clients))
            await asyncio.gather(*(live.close() for live in clients))
            return clients

        clients = run(scenario(), timeout=240)
        assert len(clients) == 100
        assert {live.attached["fromByte"] for live in clients} == {0}
        reference = max((live.data for live in clients), key=len)
        assert all(reference.startswith(live.data) for live in clients)  # the same bytes at the same offsets
    finally:
        api.cleanup()


# The attach CLI


class Tmux:
    """A private tmux server (own socket) with one session, for driving a program that wants a real terminal."""

    def __init__(self, command: str, env: dict) -> None:
        self.socket = f"live-test-{uuid.uuid4().hex[:8]}"
        self.session = "attach"
        self.env = env
        self.tmux("new-session", "-d", "-s", self.session, "-x", "100", "-y", "30", command,
                  ";", "set-option", "-t", self.session, "remain-on-exit", "on")

    def tmux(self, *args: str) -> str:
        result = subprocess.run(["tmux", "-L", self.socket, *args], env=self.env, capture_output=True, text=True,
                                timeout=10)
        assert result.returncode == 0, result.stderr
        return result.stdout

    def keys(self, *keys: str, literal: bool = False) -> None:
        self.tmux("send-keys", "-t", self.session, *(["-l"] if literal else []), *keys)

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", self.session)

    def wait_screen(self, predicate, what: str, timeout: float = 15.0) -> str:
        try:
            return wait_for(lambda: (lambda text: text if predicate(text) else None)(self.screen()), timeout, what, 0.1)
        except AssertionError as error:
            raise AssertionError(f"{error}; the pane shows:\n{self.screen().rstrip()}") from None

    def kill(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], env=self.env, capture_output=True, timeout=10)


def test_live_attach_cli_types_resizes_and_detaches(server, keys, tmp_path):
    """`manage.py attach` in a 100x30 terminal: typed commands run remotely, the remote PTY takes the local size,
    and ctrl-] detaches with status 0, leaving the terminal running."""
    api = Api(server.url, keys["alice"])
    tmux = None
    try:
        terminal = api.create(shell="/bin/bash", cols=80, rows=24)["terminalId"]
        command = shlex.join([sys.executable, str(ROOT / "manage.py"), "attach", terminal,
                              "--url", server.url, "--key", keys["alice"]])
        status = tmp_path / "status"  # the command's exit status, written once it has ended
        tmux = Tmux(f"cd {shlex.quote(str(ROOT))} && {command}; echo $? > {shlex.quote(str(status))}", service_env())
        # capture-pane drops trailing blanks: the prompt is a line ending with # or $.
        tmux.wait_screen(lambda text: text.rstrip().endswith(("#", "$")), "the remote prompt")

        tmux.keys("echo cli-$((40+2))", literal=True)
        tmux.keys("Enter")
        tmux.wait_screen(lambda text: "cli-42" in text.splitlines(), "cli-42 on its own line")

        tmux.keys("stty size", literal=True)
        tmux.keys("Enter")
        tmux.wait_screen(lambda text: "30 100" in text.splitlines(), "'30 100' from stty size")

        tmux.keys("C-]")
        # tmux may see the pane's end before it collects the exit status: wait for both.
        tmux.wait_screen(lambda _: status.exists() and status.read_text().endswith("\n"), "the attach command to exit",
                         10)
        assert status.read_text() == "0\n", tmux.screen()

        record = api.get(f"/api/terminals/{terminal}").json()["data"]
        assert record["status"] == "active"
        assert (record["cols"], record["rows"]) == (100, 30)
        assert api.run(terminal, "echo after-$((6*6))") == "after-36"
    finally:
        if tmux is not None:
            tmux.kill()
        api.cleanup()


def attach_cli(server, key: str, terminal: str, stdin, *options: str) -> subprocess.CompletedProcess:
    """`manage.py attach` as a script runs it: bytes go through a pipe on standard input, a path is opened."""
    command = [sys.executable, str(ROOT / "manage.py"), "attach", terminal, "--url", server.url, "--key", key,
               *options]
    if isinstance(stdin, bytes):
        return subprocess.run(command, input=stdin, capture_output=True, cwd=ROOT, env=service_env(), timeout=60)
    with open(stdin, "rb") as source:
        return subprocess.run(command, stdin=source, capture_output=True, cwd=ROOT, env=service_env(), timeout=60)


def test_live_attach_cli_types_a_pipe_and_exits_with_the_remote_exit_code(server, keys, tmp_path):
    """Piped into `manage.py attach`, the lines run in the remote shell, their output is printed, and the command
    exits with the shell's exit code, or 128 + N when a signal N killed it, as ssh does; a file or /dev/null on
    standard input works too."""
    api = Api(server.url, keys["alice"])
    try:
        terminal = api.create(shell="/bin/bash")["terminalId"]
        done = attach_cli(server, keys["alice"], terminal, b"echo hi-$((40+2))\nexit 5\n")
        assert done.returncode == 5, done
        assert b"hi-42" in done.stdout, done

        terminal = api.create(shell="/bin/bash")["terminalId"]
        done = attach_cli(server, keys["alice"], terminal, b"kill -KILL $$\n")
        assert done.returncode == 128 + 9, done

        script = tmp_path / "script"
        script.write_bytes(b"echo from-$((6*7))-file\nexit 7\n")
        terminal = api.create(shell="/bin/bash")["terminalId"]
        done = attach_cli(server, keys["alice"], terminal, script)
        assert (done.returncode, b"from-42-file" in done.stdout) == (7, True), done

        # An ended terminal whose output is still held replays it and exits with its code at once.
        terminal = api.create(command="sh", args=["-c", "echo bye; exit 3"])["terminalId"]
        api.wait_status(terminal, "exited")
        done = attach_cli(server, keys["alice"], terminal, b"", "--view")
        assert (done.returncode, b"bye" in done.stdout) == (3, True), done
        done = attach_cli(server, keys["alice"], terminal, "/dev/null")
        assert (done.returncode, b"bye" in done.stdout) == (3, True), done
    finally:
        api.cleanup()


def test_live_attach_cli_says_in_words_why_it_could_not_attach(server, keys):
    """A refused attach ends with status 255 and a sentence saying what happened and what to do, not a code."""
    api = Api(server.url, keys["alice"])
    try:
        unknown = str(uuid.uuid4())
        done = attach_cli(server, keys["alice"], unknown, b"")
        assert done.returncode == 255, done
        assert f"no terminal {unknown} is visible to this key".encode() in done.stderr, done
        assert b"GET /api/terminals" in done.stderr and b"4404" not in done.stderr, done

        terminal = api.create(shell="/bin/bash")["terminalId"]
        done = attach_cli(server, "not-a-key", terminal, b"")
        assert done.returncode == 255 and b"did not accept the API key" in done.stderr, done

        assert api.delete(f"/api/terminals/{terminal}").status_code == 200
        done = attach_cli(server, keys["alice"], terminal, b"")
        assert done.returncode == 255, done
        assert f"terminal {terminal} has ended and its output is no longer held".encode() in done.stderr, done

        done = attach_cli(SimpleNamespace(url="http://127.0.0.1:9"), keys["alice"], terminal, b"")
        assert done.returncode == 255 and b"cannot connect to ws://127.0.0.1:9" in done.stderr, done
        assert b"check --url" in done.stderr, done
    finally:
        api.cleanup()
