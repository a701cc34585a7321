"""/mcp/terminally: seed 001's tool set (Terminally MCP) exactly, over this service's terminals.

A tab is a shell terminal of the caller's, and its window_id is the terminal's id. Results follow the PRD's
payload convention (the result as JSON text), with the same object as structured content. What the PRD leaves to
tmux is done by the service: markers with a secret for execute_command (a program cannot forge its exit code),
the terminal's output buffer for the logs, byte offsets for stream_logs_from_tab. list_tabs marks the caller's
newest tab active, as tmux makes a new window the active one.
"""

from __future__ import annotations

import time
from typing import Annotated

from django.conf import settings
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, ToolAnnotations
from pydantic import Field
from typing_extensions import NotRequired, TypedDict

from .. import sessions
from .calls import agent_env, call, result
from .toolset import ToolSet

PROFILE = "terminally"
STOP_SECONDS = 5.0  # how long stop_process waits for the stopped program to give the prompt back


class CreateTabResult(TypedDict):
    window_id: Annotated[str, Field(description="The tab's id (this service's terminal id)")]
    name: NotRequired[str]


class Tab(TypedDict):
    window_id: str
    name: str
    active: bool


class ListTabsResult(TypedDict):
    tabs: list[Tab]


class ReadLogsResult(TypedDict):
    content: str
    returned_lines: NotRequired[float]
    truncated: NotRequired[Annotated[bool, Field(description="True if more lines existed than returned")]]


class ExecuteResult(TypedDict):
    output: str
    exit_code: NotRequired[float]
    timed_out: NotRequired[bool]


class StartedResult(TypedDict):
    started: bool


class SuccessResult(TypedDict):
    success: bool


class StreamResult(TypedDict):
    chunk: str
    next_byte: float
    eof: NotRequired[bool]


def _whole(value: float, name: str, *, minimum: int = 0) -> int:
    if value != value or value in (float("inf"), float("-inf")) or int(value) != value or value < minimum:
        raise ToolError(f"INVALID_INPUT: {name} must be a whole number from {minimum}. Next: fix {name} and call again.")
    return int(value)


TOOLS = ToolSet(
    "terminals (Terminally MCP tools)",
    instructions="Terminal tabs on this service: create_tab, then execute_command for bounded commands with "
                 "their exit codes, start_process/stop_process for long-running ones, read_logs_from_tab or "
                 "stream_logs_from_tab for their output. A tab lives on when you disconnect.",
)


@TOOLS.tool(description="Create a new terminal tab (tmux window).",
            annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=False, openWorldHint=False))
async def create_tab(
    ctx: Context,
    name: Annotated[str, Field(description="Optional name")] = "",
    cwd: Annotated[str, Field(description="Optional working directory")] = "",
    env: Annotated[dict[str, str], Field(description="Optional environment variables")] = {},  # noqa: B006
    login: Annotated[bool, Field(description="Use login shell (e.g., zsh -l)")] = False,
) -> Annotated[CallToolResult, CreateTabResult]:
    created = await call(ctx, PROFILE, "create_tab", lambda actor: sessions.session_create(
        actor=actor, cwd=cwd or None, env=agent_env(env), name=name, login=login), creates=True)
    data = {"window_id": created["terminalId"], "name": name}
    return result(data)


@TOOLS.tool(description="List all terminal tabs.",
            annotations=ToolAnnotations(readOnlyHint=True, openWorldHint=False))
async def list_tabs(ctx: Context) -> Annotated[CallToolResult, ListTabsResult]:
    terminals = await call(ctx, PROFILE, "list_tabs", lambda actor: sessions.session_list(
        user=actor.user, session_filter={"shell__gt": ""}))
    newest = max((terminal["created"] for terminal in terminals), default=None)
    tabs = [{"window_id": terminal["terminalId"], "name": terminal["name"], "active": terminal["created"] == newest}
            for terminal in terminals]
    return result({"tabs": tabs})


@TOOLS.tool(description="Read recent logs from a tab's pipe-pane file (line-count oriented).",
            annotations=ToolAnnotations(readOnlyHint=True, openWorldHint=False))
async def read_logs_from_tab(
    ctx: Context,
    window_id: str,
    lines: Annotated[float, Field(description="Lines from end (default 500)")] = 500,
    strip_ansi: Annotated[bool, Field(description="Remove ANSI sequences (default false)")] = False,
) -> Annotated[CallToolResult, ReadLogsResult]:
    count = min(_whole(lines, "lines"), settings.TERMINALS["MAX_OUTPUT_LINES"])
    read = {"mode": "tail", "head_lines": 0, "tail_lines": count, "max_lines": max(count, 1), "strip_ansi": strip_ansi}
    if count == 0:
        return result({"content": "", "returned_lines": 0, "truncated": False})
    data = await call(ctx, PROFILE, "read_logs_from_tab", lambda actor: sessions.session_read(
        actor=actor, terminal_id=window_id, options={"since": None, "since_time": None, "stream": "both",
                                                     "read": read}), terminal_id=window_id)
    shown = data["stats"]["linesShown"]
    return result({"content": data["output"], "returned_lines": shown,
                   "truncated": bool(data["stats"]["linesOmitted"] or data["linesEvicted"])})


@TOOLS.tool(description="Execute a command in a tab and return only the output produced between START/END markers.",
            annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=True, openWorldHint=True))
async def execute_command(
    ctx: Context,
    window_id: str,
    command: str,
    timeout_ms: Annotated[float, Field(description="Max wait for END marker; default 10000")] = 10000,
    strip_ansi: Annotated[bool, Field(description="Strip ANSI sequences (default false)")] = False,
) -> Annotated[CallToolResult, ExecuteResult]:
    timeout = _whole(timeout_ms, "timeout_ms", minimum=1)
    limit = settings.TERMINALS["MAX_OUTPUT_LINES"]
    read = {"mode": "full", "head_lines": 0, "tail_lines": 0, "max_lines": limit, "strip_ansi": strip_ansi}
    ran = await call(ctx, PROFILE, "execute_command", lambda actor: sessions.session_command_run(
        actor=actor, terminal_id=window_id, command=command, timeout_ms=timeout, wait=True, read=read),
        terminal_id=window_id, long=True)
    finished = ran["status"] == "completed" or ran["exitCode"] is not None
    data = {"output": ran["output"], "timed_out": not finished}
    if finished:
        data["exit_code"] = ran["exitCode"]
    return result(data)


@TOOLS.tool(description="Start a long-running process; returns immediately; logs stream to pipe-pane.",
            annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=True, openWorldHint=True))
async def start_process(
    ctx: Context,
    window_id: str,
    command: str,
    append_newline: Annotated[bool, Field(description="Send Enter after typing command (default true)")] = True,
) -> Annotated[CallToolResult, StartedResult]:
    await call(ctx, PROFILE, "start_process", lambda actor: sessions.session_write(
        actor=actor, terminal_id=window_id, text=command, append_newline=append_newline), terminal_id=window_id)
    return result({"started": True})


@TOOLS.tool(description="Gracefully stop foreground process in given tab.",
            annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=True, openWorldHint=False))
async def stop_process(
    ctx: Context,
    window_id: str,
    signal: Annotated[str, Field(description="One of SIGINT|SIGTERM; default SIGINT via C-c")] = "SIGINT",
) -> Annotated[CallToolResult, SuccessResult]:
    if signal not in ("SIGINT", "SIGTERM"):
        raise ToolError(f"INVALID_INPUT: signal must be SIGINT or SIGTERM, not {signal[:20]!r}. Next: call again "
                        "with one of them.")
    def stop(actor) -> bool:
        """Signals the foreground program, then waits (a little) until the shell is back at its prompt, so the
        tab takes the next command at once; False when the program is still running after STOP_SECONDS."""
        sessions.session_signal(actor=actor, terminal_id=window_id, signal=signal)
        deadline = time.monotonic() + sessions.wait_bound_ms(actor, STOP_SECONDS * 1000) / 1000
        while time.monotonic() < deadline:
            # session_live, not session_detail: the detail leaves "busy" out when the worker does not answer,
            # which would read as stopped.
            if not sessions.session_live(user=actor.user, terminal_id=window_id)["busy"]:
                return True
            time.sleep(0.05)
        return False

    stopped = await call(ctx, PROFILE, "stop_process", stop, terminal_id=window_id)
    return result({"success": stopped})


@TOOLS.tool(description="Read logs by byte offsets for durable consumption.",
            annotations=ToolAnnotations(readOnlyHint=True, openWorldHint=False))
async def stream_logs_from_tab(
    ctx: Context,
    window_id: str,
    from_byte: Annotated[float, Field(description="Start offset (default 0)")] = 0,
    max_bytes: Annotated[float, Field(description="Max bytes to read (default 65536)")] = 65536,
    strip_ansi: Annotated[bool, Field(description="Strip ANSI sequences (default false)")] = False,
) -> Annotated[CallToolResult, StreamResult]:
    start = _whole(from_byte, "from_byte")
    size = min(_whole(max_bytes, "max_bytes", minimum=1), settings.TERMINALS["MAX_READ_BYTES"])
    data = await call(ctx, PROFILE, "stream_logs_from_tab", lambda actor: sessions.session_read(
        actor=actor, terminal_id=window_id, options={"from_byte": start, "max_bytes": size,
                                                     "strip_ansi": strip_ansi, "stream": "both"}),
        terminal_id=window_id)
    return result({"chunk": data["chunk"], "next_byte": data["nextByte"], "eof": data["eof"]})
