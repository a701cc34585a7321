"""Running one tool call: as the key's user, through the core's use cases, audited, and answered in MCP's terms.

A use case refusing (an unknown terminal, a bad argument, a limit) becomes a tool error whose text says what
happened and what to do next; the model reads it and can act. What a tool returns is structured content with the
same JSON as text beside it (non-ASCII kept as is, not escaped), for clients that read only the text.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from typing import Any

from channels.db import DatabaseSyncToAsync
from django.db import DatabaseError
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, TextContent

from .. import sessions
from ..audit import Actor, audit
from ..exceptions import DatabaseUnavailable, ServiceError, database_unavailable
from ..ids import parse_uuid
from ..throttling import count_creation
from .identity import SCOPE_KEY

logger = logging.getLogger(__name__)

PROGRESS_SECONDS = 5.0  # how often a long call tells the client it is still working

# What to do next, by error code, appended to a tool error's message.
NEXT_STEP = {
    "TERMINAL_NOT_FOUND": "list your terminals (list_terminals, list_tabs) or create one",
    "TERMINAL_INACTIVE": "the terminal has ended; create a new one",
    "INVALID_INPUT": "fix the argument named above and call again",
    "LIMIT_REACHED": "close a terminal you no longer need, then call again",
    "RATE_LIMITED": "wait the given number of seconds, then call again",
    "WORKER_UNAVAILABLE": "the service is restarting or overloaded; call again in a few seconds",
    "AUDIT_UNAVAILABLE": "nothing was done; call again in a few seconds",
    "DATABASE_UNAVAILABLE": "nothing was done; the service's database is restarting or away, call again after the "
                            "seconds given",
    "TERMINAL_BUSY": "wait for the running command (the wait tool) or interrupt it (send ctrl-c), then call again",
}


# Agents read output, they do not page through it: a pager (git log, man, systemctl) would hold the terminal and take
# the next command as its input. Terminals made through MCP get these unless the caller sets them.
AGENT_ENV = {"PAGER": "cat", "GIT_PAGER": "cat", "MANPAGER": "cat", "SYSTEMD_PAGER": "cat"}


def agent_env(env: dict[str, str] | None) -> dict[str, str]:
    return {**AGENT_ENV, **(env or {})}


def actor_of(ctx: Context) -> Actor:
    request = ctx.request_context.request
    actor = getattr(request, "scope", {}).get(SCOPE_KEY) if request is not None else None
    if actor is None:  # only the authenticated transport reaches the tools; anything else is a wiring mistake
        raise ToolError("This call carries no authenticated caller; connect through /mcp with an API key")
    return actor


def result(data: dict, text: str | None = None) -> CallToolResult:
    """Structured content, and beside it its JSON (or a given text rendering) for clients that read text."""
    rendered = text if text is not None else json.dumps(data, ensure_ascii=False)
    return CallToolResult(content=[TextContent(type="text", text=rendered)], structured_content=data)


async def call(ctx: Context, profile: str, tool: str, use_case: Callable[[Actor], Any], *,
               terminal_id: str | None = None, long: bool = False, creates: bool = False, record: bool = True) -> Any:
    """Runs use_case(actor) on a thread of its own; audits the call; turns a refusal into a tool error. A long
    call sends a progress notification every PROGRESS_SECONDS while it waits (when the client asked for them).
    A call that creates a terminal counts against the key's creation rate first, as POST /api/terminals does.
    record=False leaves out the call's own audit row (for the polls of a tool that records itself once)."""
    actor = actor_of(ctx)

    def guarded(who: Actor):
        # The call's own row is written on the same thread hop as the use case: a second hop cost about as much as
        # the row itself.
        try:
            try:
                if creates:
                    count_creation(who)
                value = use_case(who)
            except DatabaseError as error:  # the database away: a tool error saying so (the core's one mapping)
                raise database_unavailable(error) or error
        except ServiceError as error:
            if not isinstance(error, DatabaseUnavailable):  # its row could not be written either
                _audit(who, profile, tool, error.default_code, terminal_id)
            raise
        if record:
            _audit(who, profile, tool, "ok", terminal_id)
        return value

    run = DatabaseSyncToAsync(guarded, thread_sensitive=False)
    task = asyncio.ensure_future(run(actor))
    try:
        if long:
            beats = 0
            while not task.done():
                done, _ = await asyncio.wait({task}, timeout=PROGRESS_SECONDS)
                if not done:
                    beats += 1
                    await ctx.report_progress(beats * PROGRESS_SECONDS, message="still running")
        value = await task
    except ServiceError as error:
        raise ToolError(tool_error_text(error)) from None
    except BaseException:
        task.cancel()
        raise
    return value


def checked_signal(signal: str) -> str:
    """The signal, when it is one a client may send; a tool error naming them otherwise."""
    if signal not in sessions.SIGNALS:
        raise ToolError(f"INVALID_INPUT: {signal[:20]!r} is not one of {', '.join(sessions.SIGNALS)}. Next: call "
                        "again with one of them.")
    return signal


def tool_error_text(error: ServiceError) -> str:
    text = f"{error.default_code}: {error.message}"
    retry = (error.details or {}).get("retryAfter")
    if retry is not None:
        text += f" (retry in {retry} s)"
    step = NEXT_STEP.get(error.default_code)
    return f"{text}. Next: {step}." if step else text


def _audit(actor: Actor, profile: str, tool: str, outcome: str, terminal_id: str | None) -> None:
    try:
        audit(actor, "mcp", outcome=outcome, terminal_id=parse_uuid(terminal_id), profile=profile, tool=tool)
    except ServiceError:
        logger.exception("auditing an MCP call failed")  # the call's own use case audited what it did
