"""What /mcp's tools answer: the result shapes (their output schemas) and the output bounded for an agent.

A result's output is bounded (head and tail kept, what was left out counted); its text is the output as printed
and one short bracketed line with what the agent needs next.
"""

from __future__ import annotations

import re
from typing import Annotated

from django.conf import settings
from pydantic import Field
from typing_extensions import NotRequired, TypedDict

# Where a command's output begins after lines the terminal no longer holds (it keeps the newest lines).
EARLIER_GONE = "[... earlier lines no longer held ...]"
# The core's head-tail read marks the lines it left out with this line (runtime/buffer.py).
CORE_GAP = re.compile(r"^\.\.\. \[\d+ lines omitted\] \.\.\.\n?", re.MULTILINE)


class Terminal(TypedDict):
    terminal_id: str
    name: str
    status: str
    shell: str
    command: str
    cwd: str
    exit_code: int | None
    created: str
    recorded: bool


class Listed(TypedDict):
    terminals: list[Terminal]


class CommandResult(TypedDict):
    terminal_id: Annotated[str, Field(description="The terminal it ran in (new when none was given)")]
    command_id: str
    status: Annotated[str, Field(description="completed, or running (call wait_for_command with command_id)")]
    exit_code: int | None
    timed_out: bool
    waiting_for_input: bool
    output: str
    truncated: Annotated[bool, Field(description="Output was left out: its start was no longer held, or the "
                                                 "middle was cut to max_chars")]
    chars_omitted: int
    lines_omitted: int


class Output(TypedDict):
    output: str
    next_line: Annotated[int, Field(description="Pass as since_line to read only what comes after")]
    chars_omitted: int
    lines_omitted: int
    running: bool
    exit_code: int | None


class Waited(TypedDict):
    outcome: Annotated[str, Field(description="matched, waiting_for_input, exited or timeout")]
    match: str | None
    output: str
    chars_omitted: int
    next_byte: Annotated[int, Field(description="Pass as from_byte to wait for what comes after")]
    exit_code: int | None


class Chunk(TypedDict):
    chunk: str
    from_byte: int
    next_byte: Annotated[int, Field(description="Pass as from_byte to read on")]
    truncated: Annotated[bool, Field(description="Bytes before from_byte were no longer held")]
    running: bool
    exit_code: int | None


class Stats(TypedDict):
    total_lines: int
    total_bytes: int
    estimated_tokens: int
    held_lines: int
    held_bytes: int
    running: bool
    exit_code: int | None


class Exited(TypedDict):
    exited: bool
    exit_code: int | None
    signal: str | None


class History(TypedDict):
    commands: list[dict]


class Screen(TypedDict):
    screen: str
    cols: int
    rows: int


class Done(TypedDict):
    ok: bool
    terminal_id: str
    exit_code: NotRequired[int | None]
    recorded: NotRequired[bool]


def bounded(text: str, max_chars: int, lines_omitted: int = 0) -> tuple[str, int, int]:
    """At most max_chars characters (and a marker line): the head and the tail, cut at line ends where there are
    any, with one marker saying how many lines (or, within one long line, characters) were left out in all: those
    cut here and the lines_omitted the core's read already left out at its gap marker, which this one replaces.
    Returns the text, the characters cut here and the lines left out in all."""
    gap = CORE_GAP.search(text) if lines_omitted else None
    if len(text) <= max_chars:
        return text, 0, lines_omitted  # the core's marker, if any, stays and says it
    head_end = _line_end_before(text, min(max_chars // 4, gap.start() if gap else len(text)))
    tail_start = _line_start_after(text, max(len(text) - (max_chars - head_end), gap.end() if gap else 0))
    middle = text[head_end:tail_start]
    chars = len(middle) - (len(gap.group()) if gap else 0)
    cut_here = middle.count("\n") - (1 if gap else 0)
    lines = cut_here + (lines_omitted if gap else 0)  # the lines left out where the marker stands
    marker = f"[... {lines:,} lines left out ...]" if lines else f"[... {chars:,} characters left out ...]"
    head = text[:head_end]
    joint = "" if not head or head.endswith("\n") else "\n"
    return f"{head}{joint}{marker}\n{text[tail_start:]}", chars, cut_here + lines_omitted


def _line_end_before(text: str, limit: int) -> int:
    """limit, or the end of the last whole line before it when that keeps at least half."""
    cut = text.rfind("\n", 0, limit)
    return cut + 1 if cut + 1 >= limit // 2 else limit


def _line_start_after(text: str, limit: int) -> int:
    """limit, or the start of the first whole line after it when that keeps at least half of what follows."""
    if limit == 0 or text[limit - 1] == "\n":
        return limit
    cut = text.find("\n", limit)
    return cut + 1 if cut != -1 and cut + 1 - limit <= (len(text) - limit) // 2 else limit


def terminal_data(data: dict) -> dict:
    return {"terminal_id": data["terminalId"], "name": data["name"], "status": data["status"], "shell": data["shell"],
            "command": data["command"], "cwd": data["cwd"], "exit_code": data["exitCode"], "created": data["created"],
            "recorded": data.get("recorded", False)}


def command_data(ran: dict, max_chars: int, terminal_id: str) -> dict:
    output, cut, lines = bounded(ran["output"], max_chars, ran["linesOmitted"])
    if ran["truncated"] and not ran["linesOmitted"] and output:  # its start is no longer held (the newest lines are)
        output = f"{EARLIER_GONE}\n{output}"
    return {"terminal_id": terminal_id, "command_id": ran["commandId"], "status": ran["status"], "exit_code": ran["exitCode"],
            "timed_out": ran["timedOut"], "waiting_for_input": ran["waitingForInput"], "output": output,
            "truncated": bool(ran["truncated"] or cut), "chars_omitted": cut, "lines_omitted": lines}


def command_text(data: dict, new_terminal: bool = False) -> str:
    """The output, then one short line with what the agent needs next (kept short: it is read on every call)."""
    where = f" in terminal {data['terminal_id']}" if new_terminal else ""
    if data["status"] == "completed":
        footer = f"exit code {data['exit_code']}{where}"
    elif data["waiting_for_input"]:
        footer = f"waiting for input{where}: send_input, then wait_for_command {data['command_id']}"
    else:
        footer = f"running{where}: wait_for_command {data['command_id']}"
    return with_footer(data["output"], footer)


def with_footer(output: str, footer: str) -> str:
    """A result's text: the output as printed, then one bracketed line with what the agent needs next."""
    return f"{output.rstrip(chr(10))}\n[{footer}]" if output else f"[{footer}]"


def ended_text(running: bool, exit_code: int | None) -> str:
    return "running" if running else f"ended, exit code {exit_code}"


def read_all(strip: bool) -> dict:
    """As many lines as a read may give, the first half and the last half when there are more: bounded() then
    keeps the head and the tail of those within the character budget."""
    limit = settings.TERMINALS["MAX_OUTPUT_LINES"]
    return {"mode": "head-tail", "head_lines": limit // 2, "tail_lines": limit - limit // 2, "max_lines": limit,
            "strip_ansi": strip}
