"""A terminal's live output as Server-Sent Events (curl -N works too): each event's id is the byte a reconnect
resumes from, sent back as Last-Event-ID."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

from ..worker.follow import QUIET, Event


def event_text(event: Event) -> str:
    head = f"id: {event.next_byte}\n" if event.next_byte is not None else ""
    return f"{head}event: {event.name}\ndata: {json.dumps(event.data, ensure_ascii=False)}\n\n"


async def server_sent_events(events: AsyncIterator[Event]) -> AsyncIterator[str]:
    async for event in events:
        if event is QUIET:
            yield ": keepalive\n\n"  # a comment, which keeps proxies from closing a quiet stream
        elif event.name == "attached":
            yield "retry: 1000\n\n" + event_text(event)  # browsers' EventSource reconnects after 1 s
        else:
            yield event_text(event)
