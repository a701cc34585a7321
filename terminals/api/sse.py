"""A terminal's live output as Server-Sent Events (curl -N works too): each event's id is the byte a reconnect
resumes from, sent back as Last-Event-ID. A server that stops ends each stream with an error event
(SERVER_STOPPING), so clients reconnect, to it or another one, instead of seeing a cut connection."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable

from .. import metrics
from ..plumbing import lifecycle
from ..remote.follow import QUIET, Event

STOPPED = Event("error", {"code": "SERVER_STOPPING",
                          "message": "This server is stopping; reconnect, to it or another one, with Last-Event-ID "
                                     "to continue where this stopped"})
STOP_WAIT_SECONDS = 5.0

_streams: set[asyncio.Future] = set()  # one per open stream of this process, resolved when the server stops


def event_text(event: Event) -> str:
    head = f"id: {event.next_byte}\n" if event.next_byte is not None else ""
    return f"{head}event: {event.name}\ndata: {json.dumps(event.data, ensure_ascii=False)}\n\n"


async def server_sent_events(events: AsyncIterator[Event], on_end: Callable[[], None] = lambda: None) -> AsyncIterator[str]:
    """The stream's text; on_end() runs once it ends (the caller's live connection slot, live_connections.py)."""
    stop = asyncio.get_running_loop().create_future()
    _streams.add(stop)
    metrics.LIVE_CLIENTS.labels("sse").inc()
    step = None
    try:
        while True:
            step = asyncio.ensure_future(anext(events))
            await asyncio.wait({step, stop}, return_when=asyncio.FIRST_COMPLETED)
            if not step.done():
                step.cancel()  # the follow detaches from the worker in its own cleanup
                await asyncio.wait({step})
                yield event_text(STOPPED)
                return
            try:
                event = step.result()
            except StopAsyncIteration:
                return
            if event is QUIET:
                yield ": keepalive\n\n"  # a comment, which keeps proxies from closing a quiet stream
            elif event.name == "attached":
                yield "retry: 1000\n\n" + event_text(event)  # browsers' EventSource reconnects after 1 s
            else:
                yield event_text(event)
    finally:
        _streams.discard(stop)
        on_end()
        metrics.LIVE_CLIENTS.labels("sse").dec()
        if step is not None and not step.done():  # the client went away while the follow waited for output
            step.cancel()
            await asyncio.wait({step})
        await events.aclose()


async def end_every_stream() -> None:
    for stop in list(_streams):
        if not stop.done():
            stop.set_result(None)
    deadline = asyncio.get_running_loop().time() + STOP_WAIT_SECONDS
    while _streams and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.05)


lifecycle.on_shutdown(lifecycle.CONNECTIONS, "ending event streams", end_every_stream)
