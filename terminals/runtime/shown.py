"""What a person watching a terminal sees of an API command: the command as it was given, not the text typed for it.

An API command is typed into the shell wrapped in its markers' functions (commands.wrap), and the shell echoes that
text like any typed line. The output every reader gets (the dashboard, `manage.py attach`, the SSE stream, byte and
line reads, recordings) shows, where the echo was, the command as given, as if a person had typed it: `seq 1 3`,
then the line's end. Nothing of how commands are tracked changes: the markers, the secret and the exit code are the
shell's as before; only the echo of the typed text, which holds no secret, is drawn differently.

The runtime knows what it typed and where (the output's end when it typed it), and the echo ends where the shell
prints the command's begin (B) marker. So the output from the typing to that marker is held back (never stored,
so no reader gets an offset into it) and stored then with the echo replaced. The echo is found by its text, read
through the line editor's redrawing: readline's and zle's cursor moves, zsh's redrawing of the key at the window's
edge, the continuation prompts of a command of several lines. What the shell printed before the echo (the prompt)
stays; of what it printed inside it, only the switches that change the terminal's modes and colours stay (the
bracketed paste's end, the keypad's), after the command's text. An echo not found is stored as it came.

A segment ends at a B marker (the echo runs to it), at a prompt (P) marker, and when nothing arrived for
HOLD_QUIET_SECONDS or HOLD_LIMIT_BYTES are held: then the echo runs to the end of its last line (after a prompt
marker, what follows it is the shell's complaint, or, for a command typed before the previous prompt, the prompt).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .commands import Command

HOLD_QUIET_SECONDS = 0.5  # how long held output waits for more of the echo before it is stored as it is
HOLD_LIMIT_BYTES = 64 * 1024  # held past this and 4 bytes a typed byte (a flood from a program in the background),
# it is stored at once
_ECHO_START = b"__terminals_begin "
_CONTROL = re.compile(rb"[\x00-\x08\x0b-\x1f\x7f]")  # shown as ^X, as the kernel echoes them; a tab as it is
_ZLE_FIRST_KEY = b"_\x08"  # zsh draws the first key alone, backs over it and draws the line
# How the line editors draw: a token either draws text (kept in the read text) or is one of these.
_DRAWING = re.compile(
    # zsh at the window's edge: a space to wrap, back to the row's start, erase, the key, and back again (the key is
    # drawn once more after it).
    rb"(?P<wrap> \r\x1b\[K(?:[\x00-\x7f]|[\xc0-\xff][\x80-\xbf]*)\r)"
    # Modes, colours and titles: kept after the command's text.
    rb"|(?P<mode>\x1b\[[0-9;]*m|\x1b\[\?[0-9;]*[hl]|\x1b[=>]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\))"
    # Cursor moves, erasing, carriage returns and backspaces: the drawing of a line, dropped.
    rb"|(?P<move>\x1b\[[0-?]*[ -/]*[@-~]|\x1b[@-_]|[\x00-\x08\x0b-\x1f\x7f])"
)


def display_of(command: str) -> bytes:
    """The command as a person typing it would have seen it: each line, then the line's end; control keys as ^X."""
    if command.endswith("\n"):
        command = command[:-1]
    lines = command.encode("utf-8", errors="surrogateescape").split(b"\n")
    return b"\r\n".join(_CONTROL.sub(_caret, line) for line in lines) + b"\r\n"


def _caret(match: re.Match) -> bytes:
    return b"^" + bytes([match.group()[0] ^ 0x40])


def _read(segment: bytes) -> tuple[bytes, list[int], list[tuple[int, bytes]]]:
    """(the text the segment draws, each text byte's index in segment, the kept sequences with their index)."""
    text = bytearray()
    origin: list[int] = []
    kept: list[tuple[int, bytes]] = []
    position = 0
    for match in _DRAWING.finditer(segment):
        text += segment[position : match.start()]
        origin.extend(range(position, match.start()))
        if match.lastgroup == "mode":
            kept.append((match.start(), match.group()))
        position = match.end()
    text += segment[position:]
    origin.extend(range(position, len(segment)))
    return bytes(text), origin, kept


def replace_echo(segment: bytes, record: Command, *, to_end: bool, show: bool = True
                 ) -> tuple[bytes, tuple[int, int] | None]:
    """segment (output held since the command was typed) with the echo of its typed text replaced by the command
    as given, and where that is in the result (None: no echo found, segment as it is). Typed while the shell was
    between its prompt's marker and its line editor, the text is echoed twice: by the kernel, then by the line
    editor after the prompt, which stays between them; only the last is shown. to_end: the last echo runs to the
    segment's end (the command's begin marker follows), else to the end of the line of its last id, as does every
    echo before the last. show: False leaves the echo out with nothing in its place (the line editor shows it
    later)."""
    text, origin, kept = _read(segment)
    identifier = record.id.encode()
    found = _all(text, _ECHO_START + identifier)
    display = display_of(record.command)
    result, place, position = bytearray(), None, 0
    for number, at in enumerate(found):
        last = number == len(found) - 1
        start = _echo_start(segment, origin[at])
        limit = len(segment) if last else _echo_start(segment, origin[found[number + 1]])
        until = len(text) if last else found[number + 1]
        end = limit if last and to_end else _line_end(segment, text[:until], origin, identifier, at, limit)
        result += segment[position:start]
        shown_at = len(result)
        if last and show:
            result += display
        result += b"".join(sequence for offset, sequence in kept if start <= offset < end)
        place = (shown_at, len(result))  # what a shell's complaint about the command comes after
        position = end
    result += segment[position:]
    return bytes(result), place


def _all(text: bytes, wanted: bytes) -> list[int]:
    found, at = [], text.find(wanted)
    while at >= 0:
        found.append(at)
        at = text.find(wanted, at + len(wanted))
    return found


def _echo_start(segment: bytes, start: int) -> int:
    while segment[max(0, start - len(_ZLE_FIRST_KEY)) : start] == _ZLE_FIRST_KEY:
        start -= len(_ZLE_FIRST_KEY)
    return start


def _line_end(segment: bytes, text: bytes, origin: list[int], identifier: bytes, at: int, limit: int) -> int:
    """Just past the end of the line where the echo from text[at] (to the text's end) names the command's id
    last (the end function's), within limit in segment; limit when it does not (a part of the echo)."""
    last = text.rfind(identifier, at + len(_ECHO_START) + len(identifier))
    if last < 0:
        return limit
    newline = segment.find(b"\n", origin[last + len(identifier) - 1], limit)
    return limit if newline < 0 else newline + 1


@dataclass
class HeldEcho:
    """Output held back since an API command was typed, until its echo is known."""

    record: Command
    limit: int
    data: bytearray = field(default_factory=bytearray)
    last: float = 0.0  # when the newest of it arrived (the event loop's time)
