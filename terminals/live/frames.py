"""The frames a live client sends, read: at most MAX_FRAME_BYTES of JSON the service can keep, or refused with a
message saying what is wrong; a client's value as an error frame quotes it; and the frame that says
the terminal's worker restarts."""

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


def restarting(from_byte: int) -> dict:
    """The error frame before 4012 when the terminal's worker restarts under its keeper and the terminal goes on."""
    return {"type": "error", "code": "WORKER_RESTARTING", "fromByte": from_byte,
            "message": f"The terminal's worker is restarting and the terminal goes on; reconnect with "
                       f"?fromByte={from_byte} (in a moment, if it answers 4503 first) to continue where this stopped."}
