"""Following a terminal's output live: attach to its worker and yield what it streams, in byte order.

The events are plain data; each interface writes them its own way (the REST API as Server-Sent Events)."""

from __future__ import annotations

import asyncio
import logging
from contextlib import aclosing
from typing import NamedTuple

from channels.layers import get_channel_layer
from django.conf import settings

from .. import access
from ..plumbing import database_threads
from ..audit import Actor, audit
from ..exceptions import ServiceError, terminal_inactive
from ..runtime.utf8 import decode
from . import client as worker_client
from . import leases, protocol
from . import watch as worker_watch

logger = logging.getLogger(__name__)


class Event(NamedTuple):
    """attached, output, gap, exit or error; next_byte is where a reconnect resumes (None for error)."""

    name: str
    data: dict
    next_byte: int | None = None


# Yielded when the terminal was quiet for SSE_KEEPALIVE_MS, so a stream can show it is alive through proxies.
QUIET = Event("quiet", {})


ACCESS_LOST = "terminal.access_lost"  # the access watch's news on the follow's own channel: reason


async def follow(terminal_id: str, worker_channel: str, from_byte: int | None, actor: Actor | None = None):
    """Yields attached, then output and gap events, and a final exit, or a final error when the channel layer fails,
    the terminal's worker is gone (watch.py) or the actor's access to the terminal was taken away (access.py: its
    key revoked, its user disabled, its staff flag removed; audited as a detach); QUIET while nothing happens."""
    layer = get_channel_layer()
    channel = await layer.new_channel()
    try:
        attached = await worker_client.request(worker_channel, protocol.ATTACH, id=terminal_id, subscriber=channel,
                                               from_byte=from_byte)
    except ServiceError as error:
        yield Event("error", {"code": error.default_code, "message": error.message})
        return
    watcher = _WorkerWatcher(layer, channel)
    leases.hold(worker_channel, terminal_id, channel)
    worker_watch.watch(terminal_id, watcher)
    if actor is not None:
        access.access_watch.watch(watcher, access.hold_of(actor, terminal_id), watcher.access_lost)
    try:
        # Inside the try: a client gone before it took this first event is detached too, not renewed for good.
        yield Event("attached", attached, attached["fromByte"])
        async with aclosing(_streamed(layer, channel, terminal_id, attached["fromByte"], actor)) as events:
            async for event in events:
                yield event
    finally:
        leases.release(worker_channel, terminal_id, channel)
        worker_watch.unwatch(terminal_id, watcher)
        access.access_watch.unwatch(watcher)
        # The client may be gone already: detach without waiting for the answer.
        asyncio.ensure_future(_detach(worker_channel, terminal_id, channel))


async def _streamed(layer, channel: str, terminal_id: str, expected: int, actor: Actor | None):
    """What arrives on the follow's channel from expected on, as events in byte order, until a final exit or error;
    QUIET after each SSE_KEEPALIVE_MS without one."""
    keepalive = settings.TERMINALS["SSE_KEEPALIVE_MS"] / 1000
    while True:
        try:
            message = await asyncio.wait_for(layer.receive(channel), keepalive)
        except TimeoutError:
            yield QUIET
            continue
        except Exception:  # noqa: BLE001 - the channel layer is gone (Redis down): end the stream, do not hang
            logger.warning("following %s stopped: the channel layer failed", terminal_id, exc_info=True)
            yield Event("error", {"code": "WORKER_UNAVAILABLE",
                                  "message": "The connection to the terminal's worker was lost; reconnect with Last-Event-ID"})
            return
        if message["type"] == ACCESS_LOST:
            await _audit_lost_access(actor, terminal_id, message["reason"])
        event = _event_of(message, expected, terminal_id)
        if event is None:
            continue  # not the next contiguous one: a leftover from before a resume
        if event.next_byte is not None:
            expected = event.next_byte
        yield event
        if event.name in ("exit", "error"):
            return


def _event_of(message: dict, expected: int, terminal_id: str) -> Event | None:
    """The event a message on the follow's channel makes, or None when it is not the next one in byte order."""
    kind = message["type"]
    if kind == protocol.STREAM_OUTPUT and message["offset"] == expected:
        return Event("output", {"offset": message["offset"], "data": decode(message["data"])},
                     expected + len(message["data"]))
    if kind == protocol.STREAM_GAP and message["from"] == expected:
        return Event("gap", {"from": message["from"], "to": message["to"]}, message["to"])
    if kind == protocol.STREAM_EXIT and message["offset"] == expected:
        return Event("exit", {"exitCode": message["exitCode"], "signal": message["signal"]}, expected)
    if kind == protocol.STREAM_DROPPED:
        return Event("error", {"code": "WORKER_UNAVAILABLE", "message": "The terminal's worker stopped "
                               "streaming to this follow; reconnect with Last-Event-ID"})
    if kind == protocol.STREAM_RESTARTING:
        return _restarting()
    if kind == worker_watch.WORKER_LOST:
        return Event("error", _worker_lost_error(terminal_id, message["lost"]))
    if kind == ACCESS_LOST:
        return Event("error", {"code": message["reason"], "message": access.refusal(message["reason"],
                                                                                     terminal_id).message})
    return None


class _WorkerWatcher:
    """Hands worker_watch's news that the terminal's worker is gone, and the access watch's that the follower's
    access is, to the follow's own channel, in order."""

    def __init__(self, layer, channel: str) -> None:
        self.layer, self.channel = layer, channel

    async def terminal_worker_lost(self, news: dict) -> None:
        await self._tell(news)

    async def access_lost(self, reason: str) -> None:
        await self._tell({"type": ACCESS_LOST, "reason": reason})

    async def _tell(self, news: dict) -> None:
        try:
            await self.layer.send(self.channel, news)
        except Exception:  # noqa: BLE001 - the layer is away: the follow ends on its own failure then
            logger.warning("telling a follow of %s failed", news["type"], exc_info=True)


async def _audit_lost_access(actor: Actor, terminal_id: str, reason: str) -> None:
    try:
        await database_threads.run(audit, actor, "detach", outcome=reason, terminal_id=terminal_id, stream="sse")
    except ServiceError:
        logger.warning("the end of a follow of terminal %s (%s) could not be audited", terminal_id, reason)


def _restarting() -> Event:
    return Event("error", {"code": "WORKER_RESTARTING", "message": "The terminal's worker restarted and the terminal "
                           "goes on; reconnect with Last-Event-ID (in a moment, if it answers 503 first)"})


def _worker_lost_error(terminal_id: str, lost: bool) -> dict:
    if lost:
        return {"code": "TERMINAL_INACTIVE", "message": terminal_inactive(terminal_id, "lost", released=True).message}
    return {"code": "WORKER_UNAVAILABLE",
            "message": "The terminal's worker stopped answering; reconnect later with Last-Event-ID"}


async def _detach(worker_channel: str, terminal_id: str, channel: str) -> None:
    await worker_client.tell(worker_channel, protocol.DETACH, id=terminal_id, subscriber=channel)
