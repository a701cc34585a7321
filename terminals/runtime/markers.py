"""In-band markers: escape sequences by which a shell reports command boundaries to the service.

A marker is `ESC ] 6973 ; <token> ; <kind> [; <data>] BEL`. Terminals ignore
unknown OSC sequences, so markers are invisible on a screen; the service takes
them out of the output it keeps. A marker counts only when its token is one
the service handed out (the terminal's secret, or a per-command nonce in a
shell without hooks), so a program that prints marker-like text cannot forge a
command's end; and an unfinished marker cannot swallow the real one after it.
"""

from __future__ import annotations

from dataclasses import dataclass

INTRODUCER = b"\x1b]6973;"
TERMINATOR = b"\x07"
MAX_MARKER_BYTES = 16 * 1024  # a hook marker carries a typed command line


@dataclass(frozen=True)
class Marker:
    token: str
    kind: str
    data: str
    raw: bytes  # the bytes as they arrived, put back into the output when the marker is not ours


def _parse(raw: bytes) -> Marker | None:
    body = raw[len(INTRODUCER) : -len(TERMINATOR)]
    parts = body.split(b";", 2)
    if len(parts) < 2:
        return None
    text = [part.decode("utf-8", errors="replace") for part in parts]
    return Marker(token=text[0], kind=text[1], data=text[2] if len(text) > 2 else "", raw=raw)


def _partial_introducer(data: bytes) -> int:
    """Length of the longest tail of data that could be the start of an introducer."""
    for length in range(min(len(INTRODUCER) - 1, len(data)), 0, -1):
        if data.endswith(INTRODUCER[:length]):
            return length
    return 0


class MarkerParser:
    """Splits PTY output into plain bytes and markers, carrying a marker cut between two reads."""

    def __init__(self) -> None:
        self._carry = b""

    def feed(self, chunk: bytes) -> list[bytes | Marker]:
        data = self._carry + chunk if self._carry else chunk
        self._carry = b""
        if INTRODUCER not in data:
            keep = _partial_introducer(data) if b"\x1b" in data[-len(INTRODUCER) :] else 0
            self._carry = data[len(data) - keep :] if keep else b""
            return [data[: len(data) - keep]] if len(data) > keep else []
        return self._split(data)

    def _split(self, data: bytes) -> list[bytes | Marker]:
        pieces: list[bytes | Marker] = []
        position = 0
        while True:
            start = data.find(INTRODUCER, position)
            if start < 0:
                keep = _partial_introducer(data[position:])
                pieces.append(data[position : len(data) - keep])
                self._carry = data[len(data) - keep :] if keep else b""
                break
            pieces.append(data[position:start])
            end = data.find(TERMINATOR, start, start + MAX_MARKER_BYTES)
            if end < 0:
                if len(data) - start < MAX_MARKER_BYTES:
                    self._carry = data[start:]  # the rest of the marker is in the next read
                    break
                pieces.append(data[start : start + 1])  # too long to be a marker: plain output
                position = start + 1
                continue
            # A bare introducer printed before a real marker would otherwise swallow it (and hide the
            # command's end): the marker is what follows the last introducer before the terminator.
            last = data.rfind(INTRODUCER, start + 1, end)
            if last >= 0:
                pieces.append(data[start:last])
                start = last
            raw = data[start : end + 1]
            pieces.append(_parse(raw) or raw)
            position = end + 1
        return [piece for piece in pieces if piece]

    def flush(self) -> bytes:
        """Returns what is held back; call when no more output can arrive."""
        carry, self._carry = self._carry, b""
        return carry
