"""The cookie-authenticated WebSocket takes only the service's own origin (scheme, host and port) and the configured
trusted origins: a page on another port of the same host, over the other scheme or on a sibling host, and a request
with no Origin or a "null" one, are refused with 4403 before any terminal byte, audited, and act on nothing."""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest
import websockets

from terminals import origins
from terminals.models import AuditEvent

from .client import Api
from .conftest import make_key
from .servers import start_embedded
from .test_live import Live, attach_audits, run, ws_url

TRUSTED = "https://terminals.example.test"


def session_cookie(user) -> str:
    from django.test import Client

    browser = Client()
    browser.force_login(user)
    return f"sessionid={browser.cookies['sessionid'].value}"


async def refused_after_typing(base: str, terminal: str, headers: dict, marker: str) -> int:
    """Connects, sends an input frame at once (as a hostile page would) and returns the close code; fails if an
    attached or output frame comes first."""
    async with websockets.connect(ws_url(base, terminal), additional_headers=headers, max_size=None) as ws:
        try:
            await ws.send(json.dumps({"type": "input", "data": f"echo {marker}\r"}))
            message = await asyncio.wait_for(ws.recv(), 15)
        except websockets.ConnectionClosed as closed:
            return closed.rcvd.code
    raise AssertionError(f"expected the connection to be refused, got the frame {message}")


def test_cookie_websocket_refuses_every_origin_but_the_services_own(server, orm):
    """Another port of 127.0.0.1, https instead of http, localhost for a service reached as 127.0.0.1, no Origin and
    "null": each 4403 with a FORBIDDEN attach row, and the input each sent never reaches the terminal. The service's
    own origin attaches interactively."""
    user, key = make_key(name="origins")
    api = Api(server.url, key)
    try:
        terminal = api.create(shell="/bin/bash")["terminalId"]
        assert api.run(terminal, "echo ready") == "ready"
        cookie = session_cookie(user)
        port = server.url.rsplit(":", 1)[1]
        own = f"http://127.0.0.1:{port}"
        foreign = {"another port": "http://127.0.0.1:9", "another scheme": f"https://127.0.0.1:{port}",
                   "a sibling host": f"http://localhost:{port}", "no Origin": None, "null": "null"}
        marker = f"hijack-{uuid.uuid4().hex[:8]}"

        async def scenario():
            codes = {}
            for name, origin in foreign.items():
                headers = {"Cookie": cookie, **({"Origin": origin} if origin is not None else {})}
                codes[name] = await refused_after_typing(server.url, terminal, headers, marker)
            live = await Live.open(server.url, terminal, headers={"Cookie": cookie, "Origin": own})
            await live.send(type="input", data="echo own-$((6*7))\r")
            await live.until_text("own-42\r\n")
            await live.close()
            return codes, live

        codes, live = run(scenario())
        assert codes == {name: 4403 for name in foreign}
        assert live.attached["readOnly"] is False
        outcomes = sorted(event.outcome for event in attach_audits(terminal))
        assert outcomes == ["FORBIDDEN"] * len(foreign) + ["ok"], outcomes
        assert marker not in api.full_output(terminal)
        rows = AuditEvent.objects.filter(terminal_id=terminal)
        assert not [row for row in rows if marker in json.dumps(row.details)], "a refused page's input is on record"
    finally:
        api.cleanup()


@pytest.fixture(scope="module")
def trusting_server(django_db_setup):
    server = start_embedded(CSRF_TRUSTED_ORIGINS=TRUSTED)
    yield server
    server.stop()


def test_a_configured_trusted_origin_may_use_the_cookie(trusting_server, orm):
    """CSRF_TRUSTED_ORIGINS (a proxy that terminates TLS, say) is taken whole: its https origin attaches, the same
    host over http or on another port does not."""
    user, key = make_key(name="trusting")
    api = Api(trusting_server.url, key)
    try:
        terminal = api.create(shell="/bin/bash")["terminalId"]
        cookie = session_cookie(user)

        async def scenario():
            live = await Live.open(trusting_server.url, terminal, headers={"Cookie": cookie, "Origin": TRUSTED})
            await live.close()
            refusals = []
            for origin in ("http://terminals.example.test", f"{TRUSTED}:8443", "https://evil.example.test"):
                refusals.append(await refused_after_typing(trusting_server.url, terminal,
                                                           {"Cookie": cookie, "Origin": origin}, "x"))
            return live, refusals

        live, refusals = run(scenario())
        assert live.attached["terminalId"] == terminal
        assert refusals == [4403, 4403, 4403]
    finally:
        api.cleanup()


def test_the_origin_rule_in_full(settings):
    """The rule itself: the scheme comes from the connection (wss is https), the Host must be one the service
    answers to (a rebound DNS name's page matches its own Host, and is still refused), and "*." entries trust
    subdomains over their scheme only."""
    settings.ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
    settings.CSRF_TRUSTED_ORIGINS = ["https://*.example.test"]
    allowed = origins.origin_allowed
    assert allowed("http://127.0.0.1:3001", scheme="ws", host="127.0.0.1:3001")
    assert allowed("https://127.0.0.1:3001", scheme="wss", host="127.0.0.1:3001")
    assert not allowed("http://127.0.0.1:3001", scheme="wss", host="127.0.0.1:3001")
    assert not allowed("http://127.0.0.1:3002", scheme="ws", host="127.0.0.1:3001")
    assert not allowed("http://127.0.0.1", scheme="ws", host="127.0.0.1:3001")
    assert not allowed("http://rebound.evil:3001", scheme="ws", host="rebound.evil:3001")
    assert allowed("https://app.example.test", scheme="ws", host="127.0.0.1:3001")
    assert not allowed("http://app.example.test", scheme="ws", host="127.0.0.1:3001")
    assert not allowed("https://example.test.evil", scheme="ws", host="127.0.0.1:3001")
    for missing in (None, "", "null"):
        assert not allowed(missing, scheme="ws", host="127.0.0.1:3001")
