"""/mcp: this service's own tool set for agents.

Designed for what agents need and what today's terminal servers get wrong: a command returns its exact exit code
and its own output, bounded (head and tail kept, what was left out counted, escape sequences stripped unless asked
for); a call never outlives its timeout, and a command still running comes back with its id, its output so far
and whether it waits for input; terminals outlive the agent's connection. Exit code 1 is data, not a tool error;
a tool error says what to do next.
"""

from __future__ import annotations

from typing import Annotated

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, ToolAnnotations
from pydantic import Field

from .. import sessions
from .calls import agent_env, call, checked_signal, result
from .results import (
    Chunk,
    CommandResult,
    Done,
    Exited,
    History,
    Listed,
    Output,
    Screen,
    Stats,
    Waited,
    bounded,
    command_data,
    command_text,
    ended_text,
    read_all,
    terminal_data,
    with_footer,
)
from .toolset import ToolSet

PROFILE = "terminals"
# The default budget of one result's output: about 2,000 tokens, a quarter of it the head (the command's start,
# often its first error) and the rest the tail (where builds and test runs sum up). An agent pays for every
# character on every call, and the output goes out twice (text and structured content, see docs/mcp.md); 20,000
# made `seq 1 200000` cost 43,000 characters. An agent that needs more asks for it with max_chars.
DEFAULT_MAX_CHARS = 8_000
KEYS = {
    "enter": "\r", "tab": "\t", "escape": "\x1b", "backspace": "\x7f", "space": " ",
    "up": "\x1b[A", "down": "\x1b[B", "right": "\x1b[C", "left": "\x1b[D",
    "home": "\x1b[H", "end": "\x1b[F", "pageup": "\x1b[5~", "pagedown": "\x1b[6~", "delete": "\x1b[3~",
    **{f"ctrl-{chr(code)}": chr(code - 96) for code in range(ord("a"), ord("z") + 1)},
    "ctrl-[": "\x1b", "ctrl-\\": "\x1c", "ctrl-]": "\x1d",
}

READ_ONLY = ToolAnnotations(readOnlyHint=True, openWorldHint=False)
CHANGES = ToolAnnotations(readOnlyHint=False, destructiveHint=False, openWorldHint=False)
RUNS = ToolAnnotations(readOnlyHint=False, destructiveHint=True, openWorldHint=True)
ENDS = ToolAnnotations(readOnlyHint=False, destructiveHint=True, openWorldHint=False)

TerminalId = Annotated[str, Field(description="The terminal's id, from create_terminal or list_terminals")]
MaxChars = Annotated[int, Field(ge=100, le=1_000_000, description="Most characters of output to return; the middle "
                                                                  "of longer output is left out and counted")]


TOOLS = ToolSet(
    "terminals",
    instructions="Persistent terminals on this service. create_terminal once, then run_command for anything "
                 "with an exit code (it returns the command's own output and exit code); for servers and other "
                 "long-running programs, run_command with a short timeout_ms returns a command_id to come back "
                 "to with wait_for_command, or use send_input and read_output. Terminals live on when you "
                 "disconnect: list_terminals finds them again.",
)


@TOOLS.tool(description="Create a terminal: a shell (the default) or, with command, a program run without a shell. "
                        "It lives on the service until closed or idle for the configured timeout.",
            annotations=CHANGES)
async def create_terminal(
    ctx: Context,
    name: Annotated[str, Field(max_length=100, description="A name to find it by")] = "",
    shell: Annotated[str, Field(description="bash, zsh, sh, ... (default: the service's)")] = "",
    command: Annotated[str, Field(description="A program to run instead of a shell")] = "",
    args: Annotated[list[str], Field(description="The program's arguments")] = [],  # noqa: B006
    cwd: Annotated[str, Field(description="Working directory (default: your home)")] = "",
    env: Annotated[dict[str, str], Field(description="Extra environment variables")] = {},  # noqa: B006
    cols: Annotated[int, Field(ge=1, description="Columns")] = 120,
    rows: Annotated[int, Field(ge=1, description="Rows")] = 40,
    record: Annotated[bool, Field(description="Record what it shows, for replay by its owner and staff (the "
                                              "service may record every terminal anyway)")] = False,
) -> Annotated[CallToolResult, Done]:
    created = await call(ctx, PROFILE, "create_terminal", lambda actor: sessions.session_create(
        actor=actor, shell=shell or None, command=command or None, args=args, cwd=cwd or None, env=agent_env(env),
        cols=cols, rows=rows, name=name, record=record), creates=True)
    recorded = " (recorded)" if created.get("recorded") else ""
    return result({"ok": True, "terminal_id": created["terminalId"], "recorded": created.get("recorded", False)},
                  f"terminal {created['terminalId']}{recorded}")


@TOOLS.tool(description="List your terminals (running ones, or all with include_ended).", annotations=READ_ONLY)
async def list_terminals(
    ctx: Context, include_ended: bool = False,
) -> Annotated[CallToolResult, Listed]:
    found = await call(ctx, PROFILE, "list_terminals", lambda actor: sessions.session_list(
        user=actor.user, status="all" if include_ended else "active"))
    return result({"terminals": [terminal_data(terminal) for terminal in found]})


@TOOLS.tool(description="Run a command in a shell terminal and wait for it: its own output (bounded) and its exact "
                        "exit code. If it is still running after timeout_ms (or stops to wait for input), the "
                        "result says so with a command_id for wait_for_command; it is not killed. Without "
                        "terminal_id it runs in a new shell terminal (in cwd), whose id the result gives: pass it "
                        "to run the next command in the same shell, or leave it out to run a server or other "
                        "long-running program in a terminal of its own.",
            annotations=RUNS)
async def run_command(
    ctx: Context,
    command: str,
    terminal_id: Annotated[str, Field(description="The terminal to run in; empty: a new shell terminal")] = "",
    cwd: Annotated[str, Field(description="Working directory of a new terminal (default: your home)")] = "",
    timeout_ms: Annotated[int, Field(ge=1, description="How long to wait before returning (default 30000)")] = 30_000,
    max_chars: MaxChars = DEFAULT_MAX_CHARS,
    strip_ansi: Annotated[bool, Field(description="Remove escape sequences (default true)")] = True,
) -> Annotated[CallToolResult, CommandResult]:
    new_terminal = not terminal_id
    if new_terminal:
        created = await call(ctx, PROFILE, "create_terminal", lambda actor: sessions.session_create(
            actor=actor, cwd=cwd or None, env=agent_env({}), name=command[:100]), creates=True)
        terminal_id = created["terminalId"]
    elif cwd:
        raise ToolError("INVALID_INPUT: cwd is for a new terminal. Next: leave out terminal_id, or run "
                        "`cd <dir>` in the terminal.")
    ran = await call(ctx, PROFILE, "run_command", lambda actor: sessions.session_command_run(
        actor=actor, terminal_id=terminal_id, command=command, timeout_ms=timeout_ms, wait=True,
        read=read_all(strip_ansi)), terminal_id=terminal_id, long=True)
    data = command_data(ran, max_chars, terminal_id)
    return result(data, command_text(data, new_terminal))


@TOOLS.tool(description="Wait for a command started by run_command to finish, up to timeout_ms; returns what "
                        "run_command returns.", annotations=READ_ONLY)
async def wait_for_command(
    ctx: Context,
    terminal_id: TerminalId,
    command_id: str,
    timeout_ms: Annotated[int, Field(ge=0, description="How long to wait (default 30000)")] = 30_000,
    max_chars: MaxChars = DEFAULT_MAX_CHARS,
    strip_ansi: bool = True,
) -> Annotated[CallToolResult, CommandResult]:
    ran = await call(ctx, PROFILE, "wait_for_command", lambda actor: sessions.session_command_wait(
        actor=actor, terminal_id=terminal_id, command_id=command_id, timeout_ms=timeout_ms,
        read=read_all(strip_ansi)), terminal_id=terminal_id, long=True)
    data = command_data(ran, max_chars, terminal_id)
    return result(data, command_text(data))


@TOOLS.tool(description="Type into a terminal: text (Enter added unless enter is false), or named keys in keys, "
                        "sent after the text: enter, tab, escape, backspace, up, down, left, right, home, end, "
                        "pageup, pagedown, delete, ctrl-a ... ctrl-z.", annotations=RUNS)
async def send_input(
    ctx: Context,
    terminal_id: TerminalId,
    text: str = "",
    keys: Annotated[list[str], Field(description="Named keys, e.g. [\"ctrl-c\"] or [\"down\", \"enter\"]")] = [],  # noqa: B006
    enter: Annotated[bool, Field(description="Press Enter after the text (default true)")] = True,
) -> Annotated[CallToolResult, Done]:
    unknown = [key for key in keys if key.lower() not in KEYS]
    if unknown:
        raise ToolError(f"INVALID_INPUT: unknown key {unknown[0][:20]!r}. Next: use one of "
                        f"{', '.join(sorted(KEYS))}.")
    data = text + ("\r" if enter and text else "") + "".join(KEYS[key.lower()] for key in keys)
    if not data:
        raise ToolError("INVALID_INPUT: nothing to send. Next: give text or keys.")
    await call(ctx, PROFILE, "send_input", lambda actor: sessions.session_write(
        actor=actor, terminal_id=terminal_id, text=data, append_newline=False), terminal_id=terminal_id)
    return result({"ok": True, "terminal_id": terminal_id}, "sent")


@TOOLS.tool(description="Read a terminal's output: by default the newest lines within max_chars; with since_line "
                        "(from a previous next_line) only what came after.", annotations=READ_ONLY)
async def read_output(
    ctx: Context,
    terminal_id: TerminalId,
    since_line: Annotated[int, Field(ge=-1, description="Read from this line on (-1: the newest lines)")] = -1,
    max_chars: MaxChars = DEFAULT_MAX_CHARS,
    strip_ansi: bool = True,
) -> Annotated[CallToolResult, Output]:
    options = {"since": since_line if since_line >= 0 else None, "since_time": None, "stream": "both",
               "read": read_all(strip_ansi)}
    data = await call(ctx, PROFILE, "read_output", lambda actor: sessions.session_read(
        actor=actor, terminal_id=terminal_id, options=options), terminal_id=terminal_id)
    output, cut, lines = bounded(data["output"], max_chars, data["stats"]["linesOmitted"])
    status = data["exitStatus"] or {}
    read = {"output": output, "next_line": data["nextReadFrom"], "chars_omitted": cut,
            "lines_omitted": lines + data["linesEvicted"], "running": data["isActive"],
            "exit_code": status.get("exitCode")}
    return result(read, with_footer(output, f"next_line {read['next_line']}; "
                                             f"{ended_text(read['running'], read['exit_code'])}"))


@TOOLS.tool(description="Wait until the terminal's output matches pattern (a regular expression; escape sequences "
                        "are stripped first), or its program stops to wait for input, or it ends; at most "
                        "timeout_ms. It searches what was printed since your last send_input (so output that came "
                        "before this call is not missed), or from from_byte.", annotations=READ_ONLY)
async def wait_for_output(
    ctx: Context,
    terminal_id: TerminalId,
    pattern: Annotated[str, Field(max_length=1000, description="e.g. \"listening on port \\d+\"")] = "",
    timeout_ms: Annotated[int, Field(ge=0, description="Longest wait (default 30000)")] = 30_000,
    from_byte: Annotated[int, Field(ge=-1, description="Search from this byte (-1: since the last input)")] = -1,
    until_input: Annotated[bool, Field(description="Also stop when the program waits for input")] = True,
    max_chars: MaxChars = DEFAULT_MAX_CHARS,
) -> Annotated[CallToolResult, Waited]:
    waited = await call(ctx, PROFILE, "wait_for_output", lambda actor: sessions.session_wait_output(
        actor=actor, terminal_id=terminal_id, pattern=pattern, timeout_ms=timeout_ms,
        from_byte=from_byte if from_byte >= 0 else None, until_input=until_input),
        terminal_id=terminal_id, long=True)
    output, cut, _ = bounded(waited["output"], max_chars)
    status = waited["exitStatus"] or {}
    found = {"outcome": waited["outcome"], "match": waited["match"], "output": output, "chars_omitted": cut,
             "next_byte": waited["nextByte"], "exit_code": status.get("exitCode")}
    said = f"matched {found['match']!r}" if found["outcome"] == "matched" else found["outcome"]
    if found["outcome"] == "exited":
        said += f", exit code {found['exit_code']}"
    return result(found, with_footer(output, f"{said}; next_byte {found['next_byte']}"))


@TOOLS.tool(description="Read a terminal's output by byte offset: exactly the bytes from from_byte (the next_byte "
                        "of the last read), at most max_bytes, never a cut character.", annotations=READ_ONLY)
async def read_bytes(
    ctx: Context, terminal_id: TerminalId,
    from_byte: Annotated[int, Field(ge=0, description="Where to start (0: the oldest byte held)")] = 0,
    max_bytes: Annotated[int, Field(ge=1, le=1 << 20, description="Most bytes (default 65536)")] = 65536,
    strip_ansi: bool = True,
) -> Annotated[CallToolResult, Chunk]:
    data = await call(ctx, PROFILE, "read_bytes", lambda actor: sessions.session_read(
        actor=actor, terminal_id=terminal_id, options={"from_byte": from_byte, "max_bytes": max_bytes,
                                                       "strip_ansi": strip_ansi, "stream": None}),
        terminal_id=terminal_id)
    status = data["exitStatus"] or {}
    chunk = {"chunk": data["chunk"], "from_byte": data["fromByte"], "next_byte": data["nextByte"],
             "truncated": data["truncated"], "running": data["isActive"], "exit_code": status.get("exitCode")}
    lost = f"bytes before {chunk['from_byte']} no longer held; " if chunk["truncated"] else ""
    return result(chunk, f"{chunk['chunk']}\n[{lost}next_byte {chunk['next_byte']}; "
                         f"{ended_text(chunk['running'], chunk['exit_code'])}]")


@TOOLS.tool(description="How much a terminal printed and holds: lines, bytes, an estimate of tokens.",
            annotations=READ_ONLY)
async def get_stats(ctx: Context, terminal_id: TerminalId) -> Annotated[CallToolResult, Stats]:
    data = await call(ctx, PROFILE, "get_stats", lambda actor: sessions.session_stats(
        actor=actor, terminal_id=terminal_id), terminal_id=terminal_id)
    status = data["exitStatus"] or {}
    return result({"total_lines": data["totalLines"], "total_bytes": data["totalBytes"],
                   "estimated_tokens": data["estimatedTokens"], "held_lines": data["bufferSize"],
                   "held_bytes": data["bufferBytes"], "running": data["isActive"],
                   "exit_code": status.get("exitCode")})


@TOOLS.tool(description="Wait up to timeout_ms for the terminal's program (a command terminal, or the shell) to "
                        "exit; its exit code and signal.", annotations=READ_ONLY)
async def wait_for_exit(
    ctx: Context, terminal_id: TerminalId,
    timeout_ms: Annotated[int, Field(ge=0, description="Longest wait (default 30000)")] = 30_000,
) -> Annotated[CallToolResult, Exited]:
    data = await call(ctx, PROFILE, "wait_for_exit", lambda actor: sessions.session_wait_exit(
        actor=actor, terminal_id=terminal_id, timeout_ms=timeout_ms), terminal_id=terminal_id, long=True)
    return result({"exited": not data["timedOut"], "exit_code": data["exitCode"], "signal": data["signal"]})


@TOOLS.tool(description="The commands a shell terminal ran, yours and typed ones, with their exit codes.",
            annotations=READ_ONLY)
async def list_commands(ctx: Context, terminal_id: TerminalId) -> Annotated[CallToolResult, History]:
    data = await call(ctx, PROFILE, "list_commands", lambda actor: sessions.session_command_list(
        actor=actor, terminal_id=terminal_id), terminal_id=terminal_id)
    return result({"commands": [{"command_id": item["commandId"], "command": item["command"],
                                 "source": item["source"], "status": item["status"],
                                 "exit_code": item["exitCode"]} for item in data["commands"]]})


@TOOLS.tool(description="Kill a terminal's processes (SIGKILL by default) but keep its output readable; "
                        "close_terminal ends and frees it.", annotations=ENDS)
async def kill_terminal(
    ctx: Context, terminal_id: TerminalId,
    signal: Annotated[str, Field(description="SIGKILL (default), SIGTERM, SIGINT, SIGHUP, ...")] = "SIGKILL",
) -> Annotated[CallToolResult, Done]:
    checked_signal(signal)
    ended = await call(ctx, PROFILE, "kill_terminal", lambda actor: sessions.session_kill(
        actor=actor, terminal_id=terminal_id, signal=signal), terminal_id=terminal_id)
    return result({"ok": True, "terminal_id": terminal_id, "exit_code": ended.get("exitCode")},
                  f"killed (exit code {ended.get('exitCode')}); its output stays readable")


@TOOLS.tool(description="The terminal's screen as it looks now (for full-screen programs such as top, vim, less).",
            annotations=READ_ONLY)
async def get_screen(ctx: Context, terminal_id: TerminalId) -> Annotated[CallToolResult, Screen]:
    data = await call(ctx, PROFILE, "get_screen", lambda actor: sessions.session_screen(
        actor=actor, terminal_id=terminal_id), terminal_id=terminal_id)
    screen = "\n".join(line.rstrip() for line in data["lines"]).rstrip("\n")
    return result({"screen": screen, "cols": data["cols"], "rows": data["rows"]}, screen)


@TOOLS.tool(description="Send a signal to the terminal's foreground program (SIGINT is Ctrl-C).", annotations=ENDS)
async def send_signal(
    ctx: Context, terminal_id: TerminalId,
    signal: Annotated[str, Field(description="SIGINT, SIGTERM, SIGKILL, SIGHUP, SIGQUIT, SIGTSTP, SIGCONT, "
                                             "SIGUSR1 or SIGUSR2")] = "SIGINT",
) -> Annotated[CallToolResult, Done]:
    checked_signal(signal)
    await call(ctx, PROFILE, "send_signal", lambda actor: sessions.session_signal(
        actor=actor, terminal_id=terminal_id, signal=signal), terminal_id=terminal_id)
    return result({"ok": True, "terminal_id": terminal_id}, f"{signal} sent")


@TOOLS.tool(description="Change the terminal's size.", annotations=CHANGES)
async def resize_terminal(
    ctx: Context, terminal_id: TerminalId, cols: Annotated[int, Field(ge=1)], rows: Annotated[int, Field(ge=1)],
) -> Annotated[CallToolResult, Done]:
    await call(ctx, PROFILE, "resize_terminal", lambda actor: sessions.session_resize(
        actor=actor, terminal_id=terminal_id, cols=cols, rows=rows), terminal_id=terminal_id)
    return result({"ok": True, "terminal_id": terminal_id}, f"resized to {cols}x{rows}")


@TOOLS.tool(description="End a terminal and everything it started (SIGTERM, then SIGKILL after a grace period).",
            annotations=ENDS)
async def close_terminal(ctx: Context, terminal_id: TerminalId) -> Annotated[CallToolResult, Done]:
    ended = await call(ctx, PROFILE, "close_terminal", lambda actor: sessions.session_terminate(
        actor=actor, terminal_id=terminal_id), terminal_id=terminal_id)
    return result({"ok": True, "terminal_id": terminal_id, "exit_code": ended.get("exitCode")},
                  f"closed (exit code {ended.get('exitCode')})")
