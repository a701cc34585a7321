"""A web process with live clients stops as soon as they are gone (docs/operations.md): each WebSocket gets its
SERVER_STOPPING frame and 4012 and is detached, each event stream ends right after its SERVER_STOPPING event, and
the process exits without waiting out the clients' grace period or logging a traceback for what it ended."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time

from terminals.models import AuditEvent

from .client import Api
from .servers import start_split, wait_for
from .test_live import Live

GRACE = 5.0  # the longest a stopping web process waits for its clients (live/consumer.py, api/sse.py)
IDLE_SECONDS = 1.5  # how long the clients sit idle before the stop


def test_a_web_process_whose_clients_close_at_once_stops_at_once(orm, keys):
    """Two WebSockets (interactive and view) and an SSE stream (curl) on one web process, idle a moment, then
    SIGTERM: both WebSockets get 4012 and a detach row each, the stream's response ends after its SERVER_STOPPING event, and the process
    exits within a second or two, not after the 5 s grace period, with no traceback (RequestAborted) in its log."""
    server = start_split(webs=2, workers=1)
    try:
        first, second = server.urls
        api = Api(second, keys["alice"])
        terminal = api.create(shell="/bin/bash")["terminalId"]
        web = server.process("web0")
        curl = subprocess.Popen(["curl", "-sN", "-H", f"X-API-Key: {keys['alice']}",
                                 f"{first}/api/terminals/{terminal}/output?follow=true"],
                                stdout=subprocess.PIPE, text=True)

        async def scenario():
            clients = [await Live.open(first, terminal, keys["alice"]),
                       await Live.open(first, terminal, keys["alice"], mode="view")]
            for live in clients:
                await live.until(lambda live: live.text.endswith("# "), "the first prompt")
            await asyncio.to_thread(wait_for, lambda: AuditEvent.objects.filter(
                terminal_id=terminal, action__in=("attach", "follow")).count() == 3, 10, "every client attached")
            # The scenario, not a wait for a condition: connections idle, as live connections mostly are (in
            # their first second the cancellation fell elsewhere and the stop did not wait).
            await asyncio.sleep(IDLE_SECONDS)
            started = time.monotonic()
            web.process.send_signal(signal.SIGTERM)
            codes = [await live.closed(GRACE + 5) for live in clients]
            await asyncio.to_thread(web.process.wait, 30)
            return codes, time.monotonic() - started

        codes, took = asyncio.run(scenario())
        streamed = curl.communicate(timeout=10)[0]
        print(f"\nstopped in {took:.2f} s")
        assert codes == [4012, 4012]
        assert '"code": "SERVER_STOPPING"' in streamed, streamed[-500:]
        assert took < GRACE - 2, f"the web process took {took:.1f} s to stop though its clients closed at once"
        assert "Traceback" not in web.log(), web.log()[-3000:]
        assert AuditEvent.objects.filter(terminal_id=terminal, action="detach", details__closeCode=4012).count() == 2
        api.cleanup()
    finally:
        server.stop()
