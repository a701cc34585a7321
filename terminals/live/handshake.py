"""What a live WebSocket's handshake carries: who connects (an API key, or the dashboard's login from an allowed
origin), and where in the output it resumes."""

from __future__ import annotations

from .. import attachments, json_input, origins
from ..plumbing import database_threads
from ..audit import Actor
from ..auth import key_from_headers


async def authenticate(scope, terminal_id: str, read_only: bool):
    """(actor, key record, what the attach needs): with an API key, the key's check and the terminal's lookup take
    one trip to a database thread (an attach is on the create-to-first-prompt path)."""
    source = (scope.get("client") or ["", 0])[0] or ""
    key = presented_key(scope)
    if key is not None:
        record, found = await database_threads.run(attachments.find_with_key, key, terminal_id, read_only)
        if record is None:
            return None, None, None
        return Actor(user=record.user, api_key=record, source=source), record, found
    user = scope.get("user")
    if user is not None and user.is_authenticated:
        return Actor(user=user, source=source), None, None
    return None, None, None


def origin_allowed(scope) -> bool:
    # The whole origin (scheme, host, port), not the host alone: a page on another port of this host is another
    # site's page, and the browser sends it the session cookie all the same (terminals/origins.py).
    headers = dict(scope["headers"])
    return origins.origin_allowed(headers.get(b"origin", b"").decode("latin-1") or None,
                                  scheme=scope.get("scheme", "ws"), host=headers.get(b"host", b"").decode("latin-1"))


def from_byte(query: dict) -> int | None:
    """The fromByte query parameter: absent, or a whole number from 0; raises ValueError otherwise."""
    if "fromByte" not in query:
        return None
    value = json_input.byte_offset(query["fromByte"][0])
    if value is None:
        raise ValueError("fromByte must be a byte offset from 0")
    return value


def presented_key(scope) -> str | None:
    """The API key a WebSocket handshake carries, read as REST reads it (X-API-Key, then Authorization's Bearer or
    Api-Key), or None."""
    headers = {name.lower(): value for name, value in scope.get("headers") or []}
    return key_from_headers(headers.get(b"x-api-key", b"").decode("latin-1"),
                            headers.get(b"authorization", b"").decode("latin-1"))
