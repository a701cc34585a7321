"""Who reads each terminal: a terminal nobody reads is read at a bounded rate when it floods (runtime/pty.py)."""

from __future__ import annotations

import time

from ..remote import protocol
from .streaming import OutputFanout

# A terminal nobody watches (WebSocket, SSE), nobody waits on (a command, a wait) and nobody asked about for this long
# is unread: when it floods, its reading is bounded (runtime/pty.py), so it cannot take the loop from the others.
UNREAD_AFTER_SECONDS = 5.0


class Readers:
    """Who reads a terminal, for PtySession.unread: its last request, and the requests in progress. Typing into a
    terminal, resizing or signalling it reads nothing: `yes` typed and left alone is a flood nobody reads."""

    NOT_READING = frozenset({protocol.INPUT, protocol.RESIZE, protocol.SIGNAL})

    def __init__(self, fanout: OutputFanout) -> None:
        self.fanout = fanout
        self.asked: dict[str, float] = {}
        self.waiting: dict[str, int] = {}

    def unread_check(self, terminal_id: str):
        self.asked[terminal_id] = 0.0  # being created is not being read: the first read request counts
        return lambda: (not self.waiting.get(terminal_id) and not self.fanout.watching(terminal_id)
                        and time.monotonic() - self.asked.get(terminal_id, 0.0) > UNREAD_AFTER_SECONDS)

    def begin(self, terminal_id: str | None, kind: str = "") -> None:
        if terminal_id in self.asked and kind not in self.NOT_READING:
            self.asked[terminal_id] = time.monotonic()
            self.waiting[terminal_id] = self.waiting.get(terminal_id, 0) + 1

    def end(self, terminal_id: str | None, kind: str = "") -> None:
        if terminal_id in self.waiting and kind not in self.NOT_READING:
            self.asked[terminal_id] = time.monotonic()
            self.waiting[terminal_id] -= 1
            if not self.waiting[terminal_id]:
                del self.waiting[terminal_id]

    def forget(self, terminal_id: str) -> None:
        self.asked.pop(terminal_id, None)
        self.waiting.pop(terminal_id, None)
