"""Live output over the WebSocket (docs/live.md), reconnecting by byte offset: the state below decides what to
yield, what to acknowledge and whether a closed connection is an end, a refusal or a drop to reconnect after. It
does no I/O, so the sync and async streams share it."""

from __future__ import annotations

import json
import time
from typing import Any, Dict, List, Optional
from urllib.parse import quote

from .errors import AuthError, InvalidInput, LimitReached, NotFound, ServiceUnavailable, TerminalInactive
from .results import ExitStatus

ACK_EVERY = 256 * 1024  # acknowledge this often, well under the server's 4 MiB window, so it never pauses
MAX_FRAME = 16 * 1024 * 1024

# Close codes that refuse for good: reconnecting would be refused again.
_REFUSALS = {
    4400: (InvalidInput, "INVALID_INPUT", "the server refused the request as malformed (fromByte)"),
    4401: (AuthError, "UNAUTHORIZED", "the server did not accept the API key (missing, unknown, revoked, or its "
                                      "user disabled); check TERMINALS_API_KEY"),
    4403: (AuthError, "FORBIDDEN", "this key may not attach to terminal {id} interactively; staff watch another "
                                   "user's terminal read-only"),
    4404: (NotFound, "TERMINAL_NOT_FOUND", "no terminal {id} is visible to this key (unknown, or another user's)"),
    4409: (TerminalInactive, "TERMINAL_INACTIVE", "terminal {id} has ended and its output is no longer held"),
    4429: (LimitReached, "LIMIT_REACHED", "this user holds as many live connections as the server allows; close "
                                          "one, then try again"),
}


def websocket_url(base: str, terminal_id: str, from_byte: Optional[int], view: bool) -> str:
    scheme, rest = base.split("://", 1)
    url = f"{'wss' if scheme == 'https' else 'ws'}://{rest}/ws/terminals/{quote(terminal_id, safe='')}/"
    query = []
    if from_byte is not None:
        query.append(f"fromByte={from_byte}")
    if view:
        query.append("mode=view")
    return url + ("?" + "&".join(query) if query else "")


class StreamState:
    """One terminal's live output across connections: `position` is the byte the next output starts at."""

    def __init__(self, terminal_id: str, from_byte: Optional[int], reconnect_timeout: float) -> None:
        self.terminal_id = terminal_id
        self.position = from_byte
        self.acked = from_byte or 0
        self.exit_status: Optional[ExitStatus] = None
        self.gaps: List[tuple[int, int]] = []
        self.reconnect_timeout = reconnect_timeout
        self.failing_since: Optional[float] = None
        self.error: Optional[Dict[str, Any]] = None
        self.reconnects = 0

    @property
    def done(self) -> bool:
        return self.exit_status is not None

    def frame(self, message: Any) -> tuple[Optional[str], List[str]]:
        """The text a frame adds (None for none) and the frames to send back."""
        frame = json.loads(message) if isinstance(message, (str, bytes)) else {}
        kind = frame.get("type")
        self.failing_since = None
        if kind == "attached" and self.position is None:
            self.position = self.acked = int(frame.get("fromByte", 0))
        elif kind == "output":
            return self._output(frame)
        elif kind == "gap":
            self.gaps.append((int(frame["from"]), int(frame["to"])))
            self.position = max(self.position or 0, int(frame["to"]))
        elif kind == "paused":
            return None, [self._ack()]
        elif kind == "exit":
            self.exit_status = ExitStatus(exit_code=frame.get("exitCode"), signal=frame.get("signal"))
            self.position = max(self.position or 0, int(frame.get("offset", 0)))
            return None, [self._ack()]
        elif kind == "error":
            self.error = frame
        return None, []

    def _output(self, frame: Dict[str, Any]) -> tuple[Optional[str], List[str]]:
        offset, next_byte, data = int(frame["offset"]), int(frame["next"]), str(frame["data"])
        position = self.position if self.position is not None else offset
        if next_byte <= position:
            return None, []  # already yielded before a reconnect
        if offset < position:  # the part before position was yielded; frames hold whole characters
            data = data.encode("utf-8")[position - offset:].decode("utf-8", errors="replace")
        self.position = next_byte
        replies = [self._ack()] if next_byte - self.acked >= ACK_EVERY else []
        return data, replies

    def _ack(self) -> str:
        self.acked = self.position or 0
        return json.dumps({"type": "ack", "offset": self.acked})

    def closed(self, code: Optional[int]) -> Optional[float]:
        """After the connection closed with `code` (None: no close frame): None when the stream is over, else the
        seconds to wait before reconnecting. Raises the typed error for a refusal, or once reconnecting failed for
        reconnect_timeout seconds in a row."""
        if self.done:
            return None
        if code in _REFUSALS:
            kind, error_code, text = _REFUSALS[code]
            message = self.error.get("message") if self.error and self.error.get("code") == error_code else None
            raise kind(message or text.format(id=self.terminal_id), code=error_code)
        return self.failed()

    def failed(self) -> float:
        now = time.monotonic()
        if self.failing_since is None:
            self.failing_since = now
        if now - self.failing_since > self.reconnect_timeout:
            said = f": {self.error.get('message')}" if self.error else ""
            raise ServiceUnavailable(f"lost the live connection to terminal {self.terminal_id} and could not get it "
                                     f"back within {self.reconnect_timeout:g} s{said}; read on from byte "
                                     f"{self.position} when the service answers again", code="UNREACHABLE")
        self.reconnects += 1
        retry_after = self.error.get("retryAfter") if self.error else None
        self.error = None
        delay = float(retry_after) if isinstance(retry_after, (int, float)) else min(2.0, 0.1 * self.reconnects)
        return min(delay, max(0.0, self.failing_since + self.reconnect_timeout - now) + 0.01)

