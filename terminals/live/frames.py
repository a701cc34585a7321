"""The frames a live client sends, read: at most MAX_FRAME_BYTES of JSON the service can keep, or refused with a
message saying what is wrong; and a client's value as an error frame quotes it."""

from __future__ import annotations

from .. import json_input

MAX_FRAME_BYTES = 256 * 1024  # a client frame larger than this is refused


class FrameRefused(Exception):
    """A frame refused before anything of it was read as a request: its message goes in an INVALID_INPUT error frame."""


def read(text_data: str | None, bytes_data: bytes | None):
    """The JSON value a frame holds (a text frame, or a binary one as UTF-8); FrameRefused when it is too large or not
    JSON the service can keep."""
    raw = text_data if text_data is not None else (bytes_data or b"").decode("utf-8", "replace")
    if len(raw) > MAX_FRAME_BYTES:
        raise FrameRefused(f"frame larger than {MAX_FRAME_BYTES} bytes")
    try:
        return json_input.loads(raw)
    except json_input.UnkeepableJson as problem:
        raise FrameRefused(f"frames are JSON objects: {problem}") from None


def shown(value, limit: int = 60) -> str:
    """A client's value quoted in an error frame, cut short: a frame can be 256 KiB."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."
