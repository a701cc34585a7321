"""/mcp/persistent-terminal: the tool names of the MCP server whose project prompt is seed 000, on seed 000's REST
semantics. Each tool answers what the matching REST endpoint answers (its data object, camelCase), as structured
content with the same JSON as text."""

from __future__ import annotations

import asyncio
import time
from typing import Annotated, Literal

from django.conf import settings
from mcp.server.mcpserver import Context
from mcp.types import CallToolResult, ToolAnnotations
from pydantic import Field

from .. import sessions
from .calls import actor_of, agent_env, call, checked_signal, result
from .toolset import ToolSet

PROFILE = "persistent-terminal"
POLL_SECONDS = 0.1

TerminalId = Annotated[str, Field(description="The terminal's id, from create_terminal or list_terminals")]


TOOLS = ToolSet(
    "terminals (persistent terminal tools)",
    instructions="Persistent terminals (seed 000's REST API as tools): create_terminal, write_terminal to type "
                 "(Enter added), read_terminal with since/mode to read, wait_for_output until the output settles, "
                 "kill_terminal when done. Terminals keep running when you disconnect.",
)


@TOOLS.tool(description="Create a persistent terminal session (a shell on a PTY) that keeps running in the "
                        "background.", annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=False))
async def create_terminal(
    ctx: Context,
    shell: Annotated[str, Field(description="Shell, e.g. /bin/bash (default: the system's)")] = "",
    cwd: Annotated[str, Field(description="Working directory")] = "",
    env: Annotated[dict[str, str], Field(description="Environment variables")] = {},  # noqa: B006
    cols: Annotated[int, Field(ge=1, description="Columns (default 80)")] = 80,
    rows: Annotated[int, Field(ge=1, description="Rows (default 24)")] = 24,
) -> CallToolResult:
    created = await call(ctx, PROFILE, "create_terminal", lambda actor: sessions.session_create(
        actor=actor, shell=shell or None, cwd=cwd or None, env=agent_env(env), cols=cols, rows=rows), creates=True)
    return result(created)


@TOOLS.tool(description="Send input to a terminal; a newline is added unless the input ends with one or "
                        "appendNewline is false. Control characters pass as they are (\\u0003 is Ctrl-C).",
            annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=True, openWorldHint=True))
async def write_terminal(
    ctx: Context, terminalId: TerminalId, input: str,
    appendNewline: Annotated[bool, Field(description="Add a newline (default true)")] = True,
) -> CallToolResult:
    await call(ctx, PROFILE, "write_terminal", lambda actor: sessions.session_write(
        actor=actor, terminal_id=terminalId, text=input, append_newline=appendNewline), terminal_id=terminalId)
    return result({"terminalId": terminalId, "message": "Input sent successfully"})


@TOOLS.tool(description="Read a terminal's output: all of it, its head, its tail, or both, from line since on.",
            annotations=ToolAnnotations(readOnlyHint=True))
async def read_terminal(
    ctx: Context, terminalId: TerminalId,
    since: Annotated[int, Field(ge=0, description="Read from this line on (nextReadFrom of the last read)")] = 0,
    maxLines: Annotated[int, Field(ge=1, description="Most lines (default 1000)")] = 1000,
    mode: Annotated[Literal["full", "head", "tail", "head-tail"], Field(description="Default full")] = "full",
    headLines: Annotated[int, Field(ge=0, description="Lines of the head (default 50)")] = 50,
    tailLines: Annotated[int, Field(ge=0, description="Lines of the tail (default 50)")] = 50,
    stripAnsi: Annotated[bool, Field(description="Remove escape sequences (default false)")] = False,
) -> CallToolResult:
    limit = settings.TERMINALS["MAX_OUTPUT_LINES"]
    read = {"mode": mode, "head_lines": min(headLines, limit), "tail_lines": min(tailLines, limit),
            "max_lines": min(maxLines, limit), "strip_ansi": stripAnsi}
    data = await call(ctx, PROFILE, "read_terminal", lambda actor: sessions.session_read(
        actor=actor, terminal_id=terminalId, options={"since": since or None, "since_time": None,
                                                      "stream": "both", "read": read}), terminal_id=terminalId)
    return result(data)


@TOOLS.tool(description="Wait until the terminal's output settles (no new output for stableTime ms) or, with "
                        "pattern, until a regular expression matches output printed since the call began; at most "
                        "timeout ms. Returns whether it settled or matched and the output printed meanwhile.",
            annotations=ToolAnnotations(readOnlyHint=True))
async def wait_for_output(
    ctx: Context, terminalId: TerminalId,
    timeout: Annotated[int, Field(ge=0, description="Longest wait in ms (default 5000)")] = 5000,
    stableTime: Annotated[int, Field(ge=0, description="Quiet time that counts as settled, ms (default 500)")] = 500,
    pattern: Annotated[str, Field(description="A regular expression to wait for instead")] = "",
) -> CallToolResult:
    if pattern:
        return await _wait_for_pattern(ctx, terminalId, pattern, timeout)
    deadline = time.monotonic() + sessions.wait_bound_ms(actor_of(ctx), timeout) / 1000

    async def stats(record: bool = False):
        return await call(ctx, PROFILE, "wait_for_output", lambda actor: sessions.session_stats(
            actor=actor, terminal_id=terminalId), terminal_id=terminalId, record=record)

    start = (await stats(record=True))["totalBytes"]  # the call's one audit row
    seen, quiet_since, outcome = start, time.monotonic(), "timeout"
    while time.monotonic() < deadline:
        now = (await stats())["totalBytes"]
        if now != seen:
            seen, quiet_since = now, time.monotonic()
        if time.monotonic() - quiet_since >= stableTime / 1000:
            outcome = "settled"
            break
        await asyncio.sleep(POLL_SECONDS)
    printed = await _bytes(ctx, terminalId, start) if seen > start else ""
    return result({"terminalId": terminalId, "outcome": outcome, "timedOut": outcome == "timeout",
                   "output": printed, "fromByte": start, "nextByte": seen})


@TOOLS.tool(description="Statistics of a terminal's output buffer: lines, bytes, estimated tokens.",
            annotations=ToolAnnotations(readOnlyHint=True))
async def get_terminal_stats(ctx: Context, terminalId: TerminalId) -> CallToolResult:
    data = await call(ctx, PROFILE, "get_terminal_stats", lambda actor: sessions.session_stats(
        actor=actor, terminal_id=terminalId), terminal_id=terminalId)
    return result(data)


@TOOLS.tool(description="List your active terminals.", annotations=ToolAnnotations(readOnlyHint=True))
async def list_terminals(ctx: Context) -> CallToolResult:
    found = await call(ctx, PROFILE, "list_terminals", lambda actor: sessions.session_list(user=actor.user))
    return result({"terminals": found, "count": len(found)})


@TOOLS.tool(description="Terminate a terminal (SIGTERM by default, SIGKILL after the grace period).",
            annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=True))
async def kill_terminal(
    ctx: Context, terminalId: TerminalId,
    signal: Annotated[str, Field(description="SIGTERM (default), SIGINT, SIGHUP, SIGKILL, ...")] = "SIGTERM",
) -> CallToolResult:
    checked_signal(signal)
    ended = await call(ctx, PROFILE, "kill_terminal", lambda actor: sessions.session_terminate(
        actor=actor, terminal_id=terminalId, signal=signal), terminal_id=terminalId)
    return result({"terminalId": terminalId, "message": "Terminal terminated successfully", **ended})


async def _wait_for_pattern(ctx: Context, terminal_id: str, pattern: str, timeout: int) -> CallToolResult:
    """The core's wait (sessions.session_wait_output), on a thread of its own: its bounded matcher cuts off a pattern
    that backtracks for ever (Python's re, on the event loop, held every user's requests for seconds)."""
    def wait(actor):
        start = sessions.session_stats(actor=actor, terminal_id=terminal_id)["totalBytes"]
        return sessions.session_wait_output(actor=actor, terminal_id=terminal_id, pattern=pattern, timeout_ms=timeout,
                                            from_byte=start, until_input=False)

    data = await call(ctx, PROFILE, "wait_for_output", wait, terminal_id=terminal_id, long=True)
    return result({"terminalId": terminal_id, "outcome": data["outcome"], "timedOut": data["outcome"] == "timeout",
                   "output": data["output"], "fromByte": data["fromByte"], "nextByte": data["nextByte"]})


async def _bytes(ctx: Context, terminal_id: str, start: int) -> str:
    read = await call(ctx, PROFILE, "wait_for_output", lambda actor: sessions.session_read(
        actor=actor, terminal_id=terminal_id, options={"from_byte": start, "max_bytes": 1 << 20, "strip_ansi": True,
                                                       "stream": "both"}), terminal_id=terminal_id, record=False)
    return read["chunk"]
