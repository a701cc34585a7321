"""A rolling restart of web processes: a stopped web process tells each live client where to resume and closes
cleanly (WebSocket 4012 after a SERVER_STOPPING frame, SSE with a final error event), and the client continues
on another web process from that byte, losing nothing (docs/deployment.md, docs/live.md)."""

from __future__ import annotations

import asyncio
import signal
import threading

import pytest
import requests

from terminals.models import AuditEvent

from .client import Api
from .servers import start_embedded, start_split
from .test_live import Live


@pytest.fixture
def two_webs(orm):
    server = start_split(webs=2, workers=1)
    yield server
    server.stop()


def test_a_stopping_web_process_closes_websockets_with_4012_and_the_client_resumes_on_another(two_webs, keys):
    first, second = two_webs.urls
    api = Api(second, keys["alice"])
    terminal = api.create(shell="/bin/bash")["terminalId"]

    async def scenario():
        live = await Live.open(first, terminal, keys["alice"])
        await live.send(type="input", data="echo before-$((6*7))\n")
        await live.until_text("before-42")
        stopping = asyncio.ensure_future(asyncio.to_thread(two_webs.process("web0").stop, signal.SIGTERM))
        code = await live.closed()
        exit_code = await stopping
        error = [frame for frame in live.frames if frame["type"] == "error"][-1]
        api.send(terminal, "echo after-$((6*7))\n")
        resumed = await Live.open(second, terminal, keys["alice"], fromByte=str(live.next))
        await resumed.until_text("after-42")
        return code, exit_code, error, live, resumed

    code, exit_code, error, live, resumed = asyncio.run(scenario())
    assert code == 4012
    assert exit_code == 0
    assert error["code"] == "SERVER_STOPPING" and error["fromByte"] == live.next, error
    assert f"?fromByte={live.next}" in error["message"]
    # Nothing lost, nothing twice: the second connection starts exactly where the first stopped.
    assert resumed.attached["fromByte"] == live.next
    assert "before-42" not in resumed.text
    detach = AuditEvent.objects.filter(terminal_id=terminal, action="detach").latest("id")
    assert detach.details["closeCode"] == 4012
    api.cleanup()


def test_a_stopping_web_process_ends_event_streams_with_an_error_event_and_they_resume(two_webs, keys):
    first, second = two_webs.urls
    api = Api(second, keys["alice"])
    terminal = api.create(shell="/bin/bash")["terminalId"]
    api.send(terminal, "echo before-$((6*7))\n")
    seen: list[str] = []
    attached, finished = threading.Event(), threading.Event()
    failure: list[BaseException] = []

    def follow():
        try:
            with requests.get(f"{first}/api/terminals/{terminal}/output", params={"follow": "true"},
                              headers={"X-API-Key": keys["alice"]}, stream=True, timeout=60) as response:
                for line in response.iter_lines(decode_unicode=True):
                    seen.append(line)
                    if "before-42" in line:
                        attached.set()
        except BaseException as error:  # noqa: BLE001 - a cut stream (1006's HTTP cousin) fails the test
            failure.append(error)
        finally:
            finished.set()

    reader = threading.Thread(target=follow, daemon=True)
    reader.start()
    assert attached.wait(30), seen
    assert two_webs.process("web0").stop(signal.SIGTERM) == 0
    assert finished.wait(30), seen
    assert failure == []
    assert seen[-3:-1] == ["event: error", 'data: {"code": "SERVER_STOPPING", "message": "This server is stopping; '
                           'reconnect, to it or another one, with Last-Event-ID to continue where this stopped"}'], seen
    last_id = int([line for line in seen if line.startswith("id: ")][-1][4:])
    api.send(terminal, "echo after-$((6*7))\n")
    with requests.get(f"{second}/api/terminals/{terminal}/output", params={"follow": "true"},
                      headers={"X-API-Key": keys["alice"], "Last-Event-ID": str(last_id)}, stream=True,
                      timeout=60) as response:
        resumed = []
        for line in response.iter_lines(decode_unicode=True):
            resumed.append(line)
            if "after-42" in line:
                break
    assert f"id: {last_id}" in resumed  # the attached event starts at the byte the first stream stopped
    assert not any("before-42" in line for line in resumed)
    api.cleanup()


def test_an_embedded_server_stops_with_every_live_client_closed_cleanly(orm, keys):
    """The embedded server ends its terminals when it stops: a live client gets the exit, then a clean close,
    never a dropped connection (1006)."""
    server = start_embedded()
    try:
        api = Api(server.url, keys["alice"])
        terminal = api.create(shell="/bin/bash")["terminalId"]

        async def scenario():
            live = await Live.open(server.url, terminal, keys["alice"])
            await live.until(lambda client: (client.next or 0) > 0, "the first prompt")
            stopping = asyncio.ensure_future(asyncio.to_thread(server.process("serve").stop, signal.SIGTERM))
            code = await live.closed()
            return code, await stopping, live

        code, exit_code, live = asyncio.run(scenario())
        assert exit_code == 0
        assert code in (1000, 4012), code
        kinds = [frame["type"] for frame in live.frames]
        assert "exit" in kinds or kinds[-1] == "error", live.frames[-3:]
    finally:
        server.stop()


@pytest.fixture
def stopping(monkeypatch):
    """This process as a server between SIGTERM and its exit."""
    from terminals.plumbing import lifecycle

    monkeypatch.setattr(lifecycle, "_stopping", True)


def test_a_stopping_server_reports_not_ready_and_turns_new_websockets_away(stopping, orm, keys):
    """While it stops, the readiness check fails (a load balancer sends nothing new its way) and a WebSocket that
    arrives is closed at once with 4012, before any credential is looked at, so the client tries another server."""
    from channels.testing import WebsocketCommunicator

    from terminals import sessions
    from terminals.live.consumer import TerminalConsumer

    report = sessions.readiness()
    assert report["checks"]["accepting"] is False and report["status"] == "not_ready"

    async def connect():
        communicator = WebsocketCommunicator(TerminalConsumer.as_asgi(), "/ws/terminals/x/",
                                             headers=[(b"x-api-key", keys["alice"].encode())])
        communicator.scope["url_route"] = {"kwargs": {"terminal_id": "00000000-0000-4000-8000-000000000000"}}
        connected, _ = await communicator.connect()
        closing = await communicator.receive_output(5)
        await communicator.wait()
        return connected, closing

    connected, closing = asyncio.run(connect())
    assert connected and closing == {"type": "websocket.close", "code": 4012}, closing
