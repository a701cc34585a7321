"""The frames a live client sends: how large one may be, and a client's value as an error frame quotes it."""

from __future__ import annotations

MAX_FRAME_BYTES = 256 * 1024  # a client frame larger than this is refused


def shown(value, limit: int = 60) -> str:
    """A client's value quoted in an error frame, cut short: a frame can be 256 KiB."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."
