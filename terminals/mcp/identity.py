"""Who calls: the API key an MCP request carries, checked as the REST API checks it, before any MCP message is read."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from channels.db import DatabaseSyncToAsync
from django.db import DatabaseError

from ..audit import Actor
from ..auth import HOW_TO_SEND, SCHEMES
from ..models import ApiKey

logger = logging.getLogger(__name__)
SCOPE_KEY = "terminals.actor"  # where the transport leaves the caller, for the tools to find


@dataclass(frozen=True)
class Refusal:
    status: int
    code: str
    message: str


def headers_of(scope) -> dict[str, str]:
    return {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in scope.get("headers", [])}


def presented_key(headers: dict[str, str]) -> str | None:
    if headers.get("x-api-key", "").strip():
        return headers["x-api-key"].strip()
    scheme, _, value = headers.get("authorization", "").partition(" ")
    if scheme.lower() in SCHEMES and value.strip():
        return value.strip()
    return None


def client_address(scope) -> str:
    client = scope.get("client") or ("", 0)
    return client[0] or ""


def _check(key: str, source: str) -> Actor | Refusal:
    record = ApiKey.objects.for_key(key)
    if record is None:
        return Refusal(401, "UNAUTHORIZED", "Unknown API key")
    if record.revoked_at is not None:
        return Refusal(401, "UNAUTHORIZED", "This API key was revoked")
    if not record.is_usable():
        return Refusal(401, "UNAUTHORIZED", "This API key has expired")
    if not record.user.is_active:
        return Refusal(401, "UNAUTHORIZED", "This API key's user is disabled")
    try:
        record.note_use()
    except DatabaseError as error:  # a busy database must not refuse a call over a bookkeeping write
        logger.warning("could not record the use of key %s: %s", record.display_prefix, error)
    return Actor(user=record.user, api_key=record, source=source)


async def authenticate(scope) -> Actor | Refusal:
    key = presented_key(headers_of(scope))
    if key is None:
        return Refusal(401, "UNAUTHORIZED", f"No API key: {HOW_TO_SEND}")
    return await DatabaseSyncToAsync(_check, thread_sensitive=False)(key, f"{client_address(scope)} (MCP)")
