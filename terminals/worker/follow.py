"""Following a terminal's output over plain HTTP as Server-Sent Events (curl -N works too)."""

from __future__ import annotations

import asyncio
import json
import logging

from channels.layers import get_channel_layer
from django.conf import settings

from . import protocol, client as worker_client, watch as worker_watch
from ..exceptions import ServiceError
from ..runtime.buffer import decode

logger = logging.getLogger(__name__)


def event(name: str, data: dict, event_id: int | None = None) -> str:
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {name}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"


async def follow(terminal_id: str, worker_channel: str, from_byte: int | None):
    """Yields SSE events: output (id = the next byte, for Last-Event-ID), gap, and a final exit, or a final error
    when the channel layer fails or the terminal's worker is gone (worker_watch.py)."""
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
    watcher = _WorkerWatcher(layer, channel)
    worker_watch.watch(terminal_id, watcher)
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
            elif kind == worker_watch.WORKER_LOST:
                yield event("error", _worker_lost_error(message["lost"]))
                return
    finally:
        worker_watch.unwatch(terminal_id, watcher)
        # The client may be gone already: detach without waiting for the answer.
        asyncio.ensure_future(_detach(worker_channel, terminal_id, channel))


class _WorkerWatcher:
    """Hands worker_watch's news that the terminal's worker is gone to the follow's own channel, in order."""

    def __init__(self, layer, channel: str) -> None:
        self.layer, self.channel = layer, channel

    async def terminal_worker_lost(self, news: dict) -> None:
        try:
            await self.layer.send(self.channel, news)
        except Exception:  # noqa: BLE001 - the layer is away: the follow ends on its own failure then
            logger.warning("telling a follow of %s its worker is gone failed", news["terminal"], exc_info=True)


def _worker_lost_error(lost: bool) -> dict:
    if lost:
        return {"code": "TERMINAL_INACTIVE",
                "message": "The terminal's worker went away and the terminal is lost; its output is gone"}
    return {"code": "WORKER_UNAVAILABLE",
            "message": "The terminal's worker stopped answering; reconnect later with Last-Event-ID"}


async def _detach(worker_channel: str, terminal_id: str, channel: str) -> None:
    try:
        await worker_client.request(worker_channel, protocol.DETACH, id=terminal_id, subscriber=channel)
    except ServiceError:
        pass
