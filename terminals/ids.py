"""Terminal ids as clients send them: the one place a text (or a UUID) is read as a UUID."""

from __future__ import annotations

import uuid


def parse_uuid(value) -> uuid.UUID | None:
    """value as a UUID: a UUID as it is, a text in any form uuid.UUID reads; None for anything else (a number, a
    list, None, a text that is no UUID), so a caller answers "not found" or records no terminal instead of failing."""
    if isinstance(value, uuid.UUID):
        return value
    if not isinstance(value, str):
        return None
    try:
        return uuid.UUID(value)
    except ValueError:
        return None


def uuid_keys(values) -> list[uuid.UUID]:
    """The terminal ids among these values, as keys; anything else is skipped."""
    return [key for key in map(parse_uuid, values) if key is not None]
