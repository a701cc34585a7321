"""Streamable HTTP for MCP clients, in front of the SDK: /mcp and /mcp/<profile> on the same daphne server.

Before any MCP message is read, a request must name an allowed Host (ALLOWED_HOSTS), come from no foreign
Origin, carry a usable API key (Authorization: Bearer, or the REST API's other headers) and be within its key's
rate; a refusal is answered in the REST API's error envelope and audited as action "mcp". The SDK then runs
stateless: each POST is served whole by the process that receives it, so any web process of a split deployment
serves any call, and progress notifications still arrive on the POST's event stream. No OAuth metadata is
advertised (clients that see it ignore the key header they were given).

daphne sends no ASGI lifespan events, so the SDK's session managers start on the first MCP request, in one task
that holds them until the server stops (terminals/plumbing/lifecycle.py).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from contextlib import AsyncExitStack
from types import SimpleNamespace
from urllib.parse import urlparse

from channels.db import DatabaseSyncToAsync
from django.conf import settings
from django.http.request import split_domain_port, validate_host

from .. import metrics
from ..plumbing import lifecycle
from ..audit import Actor, audit
from ..exceptions import ServiceError, envelope
from ..throttling import ApiKeyRateThrottle
from .identity import SCOPE_KEY, Refusal, authenticate, client_address, headers_of

logger = logging.getLogger(__name__)

PREFIX = "/mcp"


def _profiles() -> dict[str, object]:
    """Each path's MCPServer, with its profile's tools registered, built on first use (importing the SDK takes a
    moment)."""
    from . import komodo, persistent_terminal, terminally, tools

    profiles = {"/mcp": tools, "/mcp/terminally": terminally, "/mcp/komodo": komodo,
                "/mcp/persistent-terminal": persistent_terminal}
    return {path: profile.TOOLS.server() for path, profile in profiles.items()}


class McpEndpoint:
    """The ASGI application for every path under /mcp."""

    def __init__(self) -> None:
        self._servers: dict[str, object] | None = None
        self._managers: dict[str, object] = {}
        self._started: asyncio.Event | None = None
        self._stop = asyncio.Event()
        self._runner: asyncio.Task | None = None

    @staticmethod
    def handles(path: str) -> bool:
        return path == PREFIX or path.startswith(PREFIX + "/")

    async def __call__(self, scope, receive, send) -> None:
        path = scope["path"].rstrip("/") or "/"
        started = time.perf_counter()
        status = {"code": 500}

        async def counted_send(message):
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        try:
            await self._serve(path, scope, receive, counted_send)
        finally:
            endpoint = "mcp" + path[len(PREFIX):].replace("/", "-")
            metrics.LATENCY.labels(endpoint, scope["method"]).observe(time.perf_counter() - started)
            metrics.REQUESTS.labels(endpoint, scope["method"], str(status["code"])).inc()

    async def _serve(self, path, scope, receive, send) -> None:
        await self._ensure_started()
        manager = self._managers.get(path)
        if manager is None:
            known = ", ".join(sorted(self._managers))
            return await _refuse(send, 404, "NOT_FOUND", f"No MCP endpoint at {path}; the endpoints are {known}")
        refusal = _origin_refusal(scope)
        if refusal is not None:
            return await _refuse(send, refusal.status, refusal.code, refusal.message)
        actor = await authenticate(scope)
        if isinstance(actor, Refusal) and actor.retry_after is not None:  # the database away: nothing to audit in
            return await _refuse(send, actor.status, actor.code, actor.message, {"retryAfter": actor.retry_after},
                                 headers=[(b"retry-after", str(actor.retry_after).encode())])
        if isinstance(actor, Refusal):
            await _audit_refusal(Actor(source=f"{client_address(scope)} (MCP)"), path, actor)
            return await _refuse(send, actor.status, actor.code, actor.message,
                                 headers=[(b"www-authenticate", b"Api-Key")])
        wait = await DatabaseSyncToAsync(_throttle_wait, thread_sensitive=False)(actor)
        if wait is not None:
            refusal = Refusal(429, "RATE_LIMITED", f"Too many requests for this key; retry in {wait} s")
            await _audit_refusal(actor, path, refusal)
            return await _refuse(send, 429, "RATE_LIMITED", refusal.message, {"retryAfter": wait},
                                 headers=[(b"retry-after", str(wait).encode())])
        if lifecycle.stopping():
            return await _refuse(send, 503, "WORKER_UNAVAILABLE", "This server is stopping; send the call again")
        await manager.handle_request({**scope, SCOPE_KEY: actor}, receive, send)

    async def _ensure_started(self) -> None:
        if self._started is None:
            self._servers = _profiles()  # raises before anything waits on a start that would never come
            self._started = asyncio.Event()
            for path, server in self._servers.items():
                server.streamable_http_app(streamable_http_path=path, stateless_http=True, json_response=False,
                                           transport_security=_no_host_checks())
                self._managers[path] = server.session_manager
            self._runner = asyncio.get_running_loop().create_task(self._hold_managers())
            lifecycle.on_shutdown(lifecycle.CONNECTIONS, "stopping the MCP endpoint", self._shut_down)
        await self._started.wait()

    async def _hold_managers(self) -> None:
        async with AsyncExitStack() as stack:
            for manager in self._managers.values():
                await stack.enter_async_context(manager.run())
            self._started.set()
            await self._stop.wait()

    async def _shut_down(self) -> None:
        self._stop.set()
        if self._runner is not None:
            await asyncio.wait({self._runner}, timeout=5)


def _no_host_checks():
    # The Host and Origin are checked here, against ALLOWED_HOSTS, before the SDK sees the request.
    from mcp.server.transport_security import TransportSecuritySettings

    return TransportSecuritySettings(enable_dns_rebinding_protection=False)


def _origin_refusal(scope) -> Refusal | None:
    headers = headers_of(scope)
    host, _ = split_domain_port(headers.get("host", ""))
    if not host or not validate_host(host, settings.ALLOWED_HOSTS):
        return Refusal(400, "INVALID_INPUT", "The Host header names a host this service does not answer to; add it "
                                             "to ALLOWED_HOSTS")
    origin = headers.get("origin")
    if origin:
        origin_host = urlparse(origin).hostname
        if not origin_host or not validate_host(origin_host, settings.ALLOWED_HOSTS):
            # A web page's script (DNS rebinding) must not reach the tools with the browser as its proxy.
            return Refusal(403, "FORBIDDEN", "Requests from this Origin are refused; MCP clients send no Origin, and "
                                             "browsers must come from a host in ALLOWED_HOSTS")
    return None


def _throttle_wait(actor: Actor) -> int | None:
    throttle = ApiKeyRateThrottle()
    if throttle.allow_request(SimpleNamespace(user=actor.user, auth=actor.api_key), None):
        return None
    return max(1, round(throttle.wait() or 1))


async def _audit_refusal(actor: Actor, path: str, refusal: Refusal) -> None:
    try:
        await DatabaseSyncToAsync(audit, thread_sensitive=False)(actor, "mcp", outcome=refusal.code, path=path,
                                                                 message=refusal.message)
    except ServiceError:
        logger.exception("auditing a refused MCP request failed")  # the refusal is still answered


async def _refuse(send, status: int, code: str, message: str, details: dict | None = None, headers=()) -> None:
    body = json.dumps(envelope(code, message, details)).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            *headers]})
    await send({"type": "http.response.body", "body": body})
