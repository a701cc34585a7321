"""/mcp/komodo: seed 002's four terminal tools (the Komodo terminal module), exactly: Connect, Execute, GetOutput,
Disconnect, with their options and response fields.

server_id names a worker host (as /api/health lists them): the terminal runs there. A session is a shell terminal
of the caller's; its sessionId is the terminal's id. Execute without a session runs the command without a PTY (a
new terminal of its own), so stdout and stderr come back apart; in a session it runs in the shell, where cd and
export persist unless options ask for a working directory, variables, stdin or a time limit, which put the command
in a subshell. Errors answer as the module does: success false, error and message.
"""

from __future__ import annotations

import re
import shlex
from datetime import UTC, datetime
from typing import Annotated

from django.conf import settings
from django.core.cache import cache
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import Field
from typing_extensions import TypedDict

from .. import sessions
from ..exceptions import InvalidInput, TerminalInactive
from .calls import agent_env, call, result
from .toolset import ToolSet

PROFILE = "komodo"
FOLLOW_MS = 30_000  # how long GetOutput with follow waits for the execution to finish
NO_CAPTURE = "terminals:komodo:no-capture:{}"  # + the execution id, for executions run with captureOutput false
NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class ConnectOptions(TypedDict, total=False):
    shell: Annotated[str, Field(description="Shell to use (bash, sh, zsh, fish, ...)")]
    cwd: Annotated[str, Field(description="Starting working directory")]
    env: Annotated[dict[str, str], Field(description="Environment variables for the session")]
    timeout: Annotated[float, Field(description="Connection timeout in seconds")]


class ExecuteOptions(TypedDict, total=False):
    cwd: Annotated[str, Field(description="Working directory for the command")]
    env: Annotated[dict[str, str], Field(description="Additional environment variables")]
    timeout: Annotated[float, Field(description="Execution timeout in seconds (default: 300)")]
    stdin: Annotated[str, Field(description="Standard input to pass to the command")]
    captureOutput: Annotated[bool, Field(description="Capture stdout/stderr (default: true)")]


class OutputOptions(TypedDict, total=False):
    lines: Annotated[float, Field(description="Number of lines to retrieve (default: all)")]
    tail: Annotated[bool, Field(description="Retrieve from end of output (default: false)")]
    follow: Annotated[bool, Field(description="Stream output as it arrives (default: false)")]
    since: Annotated[str, Field(description="Retrieve output since timestamp (ISO 8601)")]


class DisconnectOptions(TypedDict, total=False):
    force: Annotated[bool, Field(description="Force disconnect even if processes are running")]
    killProcesses: Annotated[bool, Field(description="Kill running processes before disconnecting (default: true)")]
    timeout: Annotated[float, Field(description="Graceful shutdown timeout in seconds (default: 10)")]


def failure(error: str, message: str) -> CallToolResult:
    import json

    body = {"success": False, "error": error, "message": message}
    return CallToolResult(content=[TextContent(type="text", text=json.dumps(body, ensure_ascii=False))],
                          is_error=True)


def _seconds(value, name: str, default: float) -> float:
    number = default if value is None else value
    if not isinstance(number, int | float) or number != number or number <= 0:
        raise InvalidInput(f"{name} must be a number of seconds above 0")
    return float(number)


def _subshell(command: str, options: ExecuteOptions) -> str:
    """The command in a subshell with the options' directory, variables, input and time limit; as is without."""
    env = options.get("env") or {}
    bad = [name for name in env if not NAME.match(name)]
    if bad:
        raise InvalidInput(f"options.env: {bad[0][:40]!r} is not a variable name")
    if not (options.get("cwd") or env or options.get("stdin") is not None or options.get("timeout") is not None):
        return command
    parts = []
    if options.get("cwd"):
        parts.append(f"cd {shlex.quote(options['cwd'])} &&")
    parts += [f"export {name}={shlex.quote(value)} &&" for name, value in env.items()]
    run = f"sh -c {shlex.quote(command)}"
    if options.get("timeout") is not None:
        run = f"timeout -k 5 {_seconds(options['timeout'], 'options.timeout', 300):g} {run}"
    if options.get("stdin") is not None:
        run = f"printf %s {shlex.quote(options['stdin'])} | {run}"
    return f"( {' '.join(parts)} {run} )"


TOOLS = ToolSet("terminals (Komodo terminal module)",
                instructions="Terminal sessions on this service's worker hosts (server_id: a host's name, as "
                             "/api/health lists them): Connect, Execute, GetOutput, Disconnect.")


async def guarded(ctx, tool, use_case, **kwargs):
    """call(), with the module's error shape: success false, error, message."""
    try:
        return await call(ctx, PROFILE, tool, use_case, **kwargs), None
    except ToolError as error:
        text = str(error)
        if text.startswith("TERMINAL_NOT_FOUND") or text.startswith("TERMINAL_INACTIVE"):
            return None, failure("Session not found", f"Terminal session does not exist or has expired ({text})")
        return None, failure(text.split(":", 1)[0], text)


@TOOLS.tool(name="komodo_terminal_Connect", description="Opens a terminal session to a server.",
            annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=False))
async def connect(ctx: Context, server_id: str, options: ConnectOptions | None = None) -> CallToolResult:
    options = options or {}
    created, error = await guarded(ctx, "komodo_terminal_Connect", lambda actor: sessions.session_create(
        actor=actor, shell=options.get("shell") or None, cwd=options.get("cwd") or None,
        env=agent_env(options.get("env")), host=server_id, name=f"komodo {server_id}"), creates=True)
    if error:
        return error
    return result({"success": True, "sessionId": created["terminalId"], "status": "connected",
                   "message": f"Terminal session established on server {server_id}"})


@TOOLS.tool(name="komodo_terminal_Execute", description="Executes a command in a terminal session (a new one "
            "without session_id, running the command without a PTY so stdout and stderr stay apart); returns at "
            "once with an execution id: GetOutput has the results.",
            annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=True, openWorldHint=True))
async def execute(ctx: Context, server_id: str, command: str, session_id: str = "",
                  options: ExecuteOptions | None = None) -> CallToolResult:
    options = options or {}
    if session_id:
        def run(actor):
            record = sessions.session_get_for(user=actor.user, terminal_id=session_id)
            host = record.worker.hostname if record.worker_id else ""
            if host not in ("", server_id):
                raise InvalidInput(f"session {session_id} runs on server {host}, not {server_id}")
            return sessions.session_command_run(actor=actor, terminal_id=session_id,
                                                command=_subshell(command, options), timeout_ms=1, wait=False,
                                                read={"mode": "full", "head_lines": 0, "tail_lines": 0,
                                                      "max_lines": 1, "strip_ansi": True})
        ran, error = await guarded(ctx, "komodo_terminal_Execute", run, terminal_id=session_id)
        if error:
            return error
        terminal, execution = session_id, ran["commandId"]
    else:
        def start(actor):
            seconds = _seconds(options.get("timeout"), "options.timeout", 300)
            created = sessions.session_create(
                actor=actor, command="timeout", args=["-k", "5", f"{seconds:g}", "sh", "-c", command], pty=False,
                cwd=options.get("cwd") or None, env=agent_env(options.get("env")), host=server_id,
                name=f"komodo {server_id}")
            try:  # its input, then the end of it, so a command that reads stdin does not wait for ever
                sessions.session_write(actor=actor, terminal_id=created["terminalId"],
                                       text=options.get("stdin") or "", append_newline=False, close=True)
            except TerminalInactive:
                pass  # it was done before it read anything
            return created
        created, error = await guarded(ctx, "komodo_terminal_Execute", start, creates=True)
        if error:
            return error
        terminal = execution = created["terminalId"]
    if options.get("captureOutput") is False:
        cache.set(NO_CAPTURE.format(execution), True, 24 * 3600)
    return result({"success": True, "executionId": f"exec_{execution}", "sessionId": terminal, "status": "running",
                   "message": f"Command execution started on server {server_id}"})


@TOOLS.tool(name="komodo_terminal_GetOutput", description="Retrieves output from a terminal session or command "
            "execution: stdout, stderr (apart for commands run without a session), exitCode, isComplete.",
            annotations=ToolAnnotations(readOnlyHint=True))
async def get_output(ctx: Context, session_id: str, options: OutputOptions | None = None) -> CallToolResult:
    options = options or {}
    read = _read_options(options)
    since = _since(options.get("since"))
    follow = bool(options.get("follow"))

    def gather(actor):
        record = sessions.session_detail(user=actor.user, terminal_id=session_id)
        if not record["pty"]:
            if follow and record["status"] == "active":
                sessions.session_wait_exit(actor=actor, terminal_id=session_id, timeout_ms=FOLLOW_MS)
            if options.get("lines") is None and since is None:  # all of it: the exact bytes, as printed
                streams = {name: sessions.session_read(actor=actor, terminal_id=session_id, options={
                    "from_byte": 0, "max_bytes": settings.TERMINALS["MAX_READ_BYTES"], "strip_ansi": True,
                    "stream": name}) for name in ("stdout", "stderr")}
                texts = {name: stream["chunk"] for name, stream in streams.items()}
            else:
                streams = {name: sessions.session_read(actor=actor, terminal_id=session_id, options={
                    "since": None, "since_time": since, "stream": name, "read": read})
                    for name in ("stdout", "stderr")}
                texts = {name: stream["output"] for name, stream in streams.items()}
            status = streams["stdout"]["exitStatus"] or {}
            return session_id, texts["stdout"], texts["stderr"], status.get("exitCode"), \
                not streams["stdout"]["isActive"]
        history = sessions.session_command_list(actor=actor, terminal_id=session_id)["commands"]
        api_commands = [command for command in history if command.get("source") == "api"]
        if not api_commands:
            shown = sessions.session_read(actor=actor, terminal_id=session_id, options={
                "since": None, "since_time": since, "stream": "both", "read": read})
            return session_id, shown["output"], "", None, False
        last = api_commands[-1]["commandId"]
        if follow:
            got = sessions.session_command_wait(actor=actor, terminal_id=session_id, command_id=last,
                                                timeout_ms=FOLLOW_MS, read=read)
        else:
            got = sessions.session_command_get(actor=actor, terminal_id=session_id, command_id=last, read=read)
        return last, got["output"], "", got["exitCode"], got["status"] == "completed"

    gathered, error = await guarded(ctx, "komodo_terminal_GetOutput", gather, terminal_id=session_id, long=follow)
    if error:
        return error
    execution, stdout, stderr, exit_code, complete = gathered
    if cache.get(NO_CAPTURE.format(execution)):
        stdout = stderr = ""
    return result({"success": True, "output": {
        "stdout": stdout, "stderr": stderr, "exitCode": exit_code, "isComplete": complete,
        "timestamp": datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
    }, "message": "Output retrieved successfully"})


@TOOLS.tool(name="komodo_terminal_Disconnect", description="Closes a terminal session and cleans up resources "
            "(its processes too, unless killProcesses is false).",
            annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=True))
async def disconnect(ctx: Context, session_id: str, options: DisconnectOptions | None = None) -> CallToolResult:
    options = options or {}
    if options.get("killProcesses", True):
        def end(actor):
            grace = _seconds(options.get("timeout"), "options.timeout", 10)
            return sessions.session_terminate(actor=actor, terminal_id=session_id,
                                              force=bool(options.get("force")), grace_ms=int(grace * 1000))
        _, error = await guarded(ctx, "komodo_terminal_Disconnect", end, terminal_id=session_id)
        message = "Terminal session closed successfully"
    else:
        _, error = await guarded(ctx, "komodo_terminal_Disconnect", lambda actor: sessions.session_detail(
            user=actor.user, terminal_id=session_id), terminal_id=session_id)
        message = "Terminal session disconnected; its processes keep running (killProcesses: false)"
    if error:
        return error
    return result({"success": True, "sessionId": session_id, "status": "disconnected", "message": message})


def _read_options(options: OutputOptions) -> dict:
    limit = settings.TERMINALS["MAX_OUTPUT_LINES"]
    lines = options.get("lines")
    if lines is None:
        return {"mode": "full", "head_lines": 0, "tail_lines": 0, "max_lines": limit, "strip_ansi": True}
    if not isinstance(lines, int | float) or lines != lines or lines < 1 or int(lines) != lines:
        raise ToolError("INVALID_INPUT: options.lines must be a whole number from 1. Next: fix it and call again.")
    count = min(int(lines), limit)
    mode = "tail" if options.get("tail") else "head"
    return {"mode": mode, "head_lines": count, "tail_lines": count, "max_lines": limit, "strip_ansi": True}


def _since(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise ToolError(f"INVALID_INPUT: options.since {value[:40]!r} is not an ISO 8601 time. Next: fix it.") from None

