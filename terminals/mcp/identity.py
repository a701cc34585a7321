"""Who calls: the API key an MCP request carries, checked as the REST API checks it, before any MCP message is read."""

from __future__ import annotations

from dataclasses import dataclass

from channels.db import DatabaseSyncToAsync
from django.conf import settings
from django.db import DatabaseError
from rest_framework.exceptions import AuthenticationFailed

from ..audit import Actor
from ..auth import key_from_headers, missing_key_problem, usable_key
from ..exceptions import database_unavailable

SCOPE_KEY = "terminals.actor"  # where the transport leaves the caller, for the tools to find


@dataclass(frozen=True)
class Refusal:
    status: int
    code: str
    message: str
    retry_after: int | None = None


def headers_of(scope) -> dict[str, str]:
    return {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in scope.get("headers", [])}


def client_address(scope) -> str:
    client = scope.get("client") or ("", 0)
    return client[0] or ""


def _check(key: str, source: str) -> Actor | Refusal:
    try:
        record = usable_key(key)
    except AuthenticationFailed as refused:
        return Refusal(401, "UNAUTHORIZED", str(refused.detail))
    except DatabaseError as error:  # the key cannot be checked while the database is away: 503, try again later
        unavailable = database_unavailable(error)
        if unavailable is None:
            raise
        return Refusal(unavailable.status_code, unavailable.default_code, unavailable.message, unavailable.wait)
    # An agent's client gives up on a call after about a minute: the core keeps this caller's waits shorter.
    return Actor(user=record.user, api_key=record, source=source, max_wait_ms=settings.TERMINALS["MCP_MAX_WAIT_MS"])


async def authenticate(scope) -> Actor | Refusal:
    headers = headers_of(scope)
    key = key_from_headers(headers.get("x-api-key", ""), headers.get("authorization", ""))
    if key is None:
        return Refusal(401, "UNAUTHORIZED", missing_key_problem(headers.get("authorization", "")))
    return await DatabaseSyncToAsync(_check, thread_sensitive=False)(key, f"{client_address(scope)} (MCP)")
