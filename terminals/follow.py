"""Following a terminal's output over plain HTTP as Server-Sent Events (curl -N works too)."""

from __future__ import annotations

import asyncio
import json
import logging

from channels.layers import get_channel_layer
from django.conf import settings

from . import protocol, worker_client
from .exceptions import ServiceError
from .runtime.buffer import decode

logger = logging.getLogger(__name__)


def event(name: str, data: dict, event_id: int | None = None) -> str:
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {name}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"


async def follow(terminal_id: str, worker_channel: str, from_byte: int | None):
    """Yields SSE events: output (id = the next byte, for Last-Event-ID), gap, and a final exit."""
    layer = get_channel_layer()
    channel = await layer.new_channel()
    try:
        attached = await worker_client.request(worker_channel, protocol.ATTACH, id=terminal_id, subscriber=channel,
                                               from_byte=from_byte)
    except ServiceError as error:
        yield event("error", {"code": error.default_code, "message": error.message})
        return
    expected = attached["fromByte"]
    keepalive = settings.TERMINALS["SSE_KEEPALIVE_MS"] / 1000
    yield "retry: 1000\n\n" + event("attached", attached, expected)
    try:
        while True:
            try:
                message = await asyncio.wait_for(layer.receive(channel), keepalive)
            except TimeoutError:
                yield ": keepalive\n\n"
                continue
            except Exception:  # noqa: BLE001 - the channel layer is gone (Redis down): end the stream, do not hang
                logger.warning("following %s stopped: the channel layer failed", terminal_id, exc_info=True)
                yield event("error", {"code": "WORKER_UNAVAILABLE",
                                      "message": "The connection to the terminal's worker was lost; reconnect with Last-Event-ID"})
                return
            kind = message["type"]
            if kind == protocol.STREAM_OUTPUT and message["offset"] == expected:
                expected += len(message["data"])
                yield event("output", {"offset": message["offset"], "data": decode(message["data"])}, expected)
            elif kind == protocol.STREAM_GAP and message["from"] == expected:
                expected = message["to"]
                yield event("gap", {"from": message["from"], "to": message["to"]}, expected)
            elif kind == protocol.STREAM_EXIT and message["offset"] == expected:
                yield event("exit", {"exitCode": message["exitCode"], "signal": message["signal"]}, expected)
                return
    finally:
        # The client may be gone already: detach without waiting for the answer.
        asyncio.ensure_future(_detach(worker_channel, terminal_id, channel))


async def _detach(worker_channel: str, terminal_id: str, channel: str) -> None:
    try:
        await worker_client.request(worker_channel, protocol.DETACH, id=terminal_id, subscriber=channel)
    except ServiceError:
        pass
