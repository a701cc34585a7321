"""Which bytes of a terminal's output are the echo of what was typed into it, and which a program printed.

A wait for a pattern must match what a program printed, never the terminal's echo of the input that asked for it
(`sleep 1; echo listening on port 8080` typed into a shell shows the pattern at once, a second before the program
prints it). The echo comes from one of three places, and each input is classed by where it went when it was
written:

- PROMPT: a shell whose hooks mark commands (bash, zsh) was at its prompt. Its line editor echoes the line, then
  the hook's command marker (C) says where the command's output starts; a prompt marker (P) with no command
  before it means the line ran nothing (empty, a syntax error, Ctrl-C): its echo is its first line. Each further
  typed line is read at the next prompt, so its echo runs from that prompt to its own marker.
- KERNEL: the terminal was in canonical mode with echo on (dash, `cat`, `read`): the kernel echoes each line as
  it arrives, exactly, "\\n" as "\\r\\n" and a control key as "^X".
- EDITOR: the program reads key by key and echoes itself (`python3 -i` with readline): the line's text is
  looked for as typed; a line too long for the window, which the editor redraws across rows, is not found, and
  its echo is taken to end at the first line end.
- NONE: echo is off (a password prompt): nothing is hidden.

Until an input's echo is known (its marker or its text not arrived yet), what follows it is withheld for up to
SETTLE_SECONDS: the reader sees it once it is known not to be echo.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

PROMPT, KERNEL, EDITOR, NONE, SHOWN = "prompt", "kernel", "editor", "none", "shown"
SETTLE_SECONDS = 1.0  # how long the echo of an input may take to show before it is taken as not coming
KEPT_INPUTS = 16  # the newest inputs whose echo is told apart; an older one's echo is long read
SCAN_BYTES = 256 * 1024  # how far past an input its echo is looked for
_CONTROL = re.compile(rb"[\x00-\x08\x0b-\x1f\x7f]")
_UNECHOED = re.compile(rb"[\x04\x08\x7f]")


@dataclass(frozen=True)
class TypedInput:
    at: int  # the output's end when the input was written: its echo comes after
    when: float
    lines: tuple[bytes, ...]  # the typed lines, each with its "\n" but the last, which may be unfinished
    mode: str
    stale_prompts: int = 0  # PROMPT: a prompt still to come that was due before the input (the shell between
    # a command's end and its prompt, or starting): the line is read at the prompt after it


class EchoLedger:
    """The newest inputs of one terminal, to find their echo in its output."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._inputs: list[TypedInput] = []
        self._settled: dict[int, list[tuple[int, int]]] = {}  # id of an input in _inputs: its echo, all found

    def typed(self, at: int, data: bytes, mode: str, stale_prompts: int = 0) -> None:
        if mode == NONE or not data:
            return
        lines = tuple(line for line in data.splitlines(keepends=True) if line)
        self._add(TypedInput(at=at, when=self._clock(), lines=lines, mode=mode, stale_prompts=stale_prompts))

    def shown(self, start: int, stop: int) -> None:
        """Output known to be echo: an API command drawn where the shell echoed the text typed for it (shown.py)."""
        entry = TypedInput(at=start, when=self._clock(), lines=(), mode=SHOWN)
        self._add(entry)
        self._settled[id(entry)] = [(0, stop - start)]

    def _add(self, entry: TypedInput) -> None:
        self._inputs.append(entry)
        for forgotten in self._inputs[:-KEPT_INPUTS]:
            self._settled.pop(id(forgotten), None)
        del self._inputs[:-KEPT_INPUTS]

    def echo(self, read: Callable[[int, int], bytes], end: int,
             markers: Callable[[int], Sequence[tuple[int, str]]]) -> tuple[list[tuple[int, int]], int]:
        """(the byte ranges of output that are echo, oldest first; where the output stops being known): output
        from the second on is withheld until its echo is known. read(start, count) gives raw output; markers(at)
        the shell's command (C) and prompt (P) markers from at on, as (offset, kind)."""
        ranges: list[tuple[int, int]] = []
        known = end
        now = self._clock()
        for typed in self._inputs:
            found = self._settled.get(id(typed))
            if found is None:
                found, pending = self._find(typed, read, end, markers, patient=now - typed.when < SETTLE_SECONDS)
                if pending is not None:
                    known = min(known, typed.at + pending)
            ranges.extend((typed.at + start, typed.at + stop) for start, stop in found)
        ranges.sort()
        return ranges, known

    def _find(self, typed: TypedInput, read, end: int, markers, patient: bool):
        raw = read(typed.at, min(end - typed.at, SCAN_BYTES + 4 * sum(map(len, typed.lines))))
        if typed.mode == PROMPT:
            found, pending, whole = _prompt_echo(typed, raw, markers(typed.at), patient)
        else:
            found, pending, whole = _text_echo(typed, raw, patient)
        if whole:  # every line's echo found: it cannot change any more, so it is not looked for again
            self._settled[id(typed)] = found
        return found, pending


def _prompt_echo(typed: TypedInput, raw: bytes, markers: Sequence[tuple[int, str]], patient: bool):
    """Echo ranges (relative to typed.at) of lines typed at a shell's prompt, told by its markers."""
    found: list[tuple[int, int]] = []
    events = [(offset - typed.at, kind) for offset, kind in markers]
    boundary, index = 0, 0
    for _ in range(typed.stale_prompts):  # up to the prompt due before the input, all is prompt and echo
        while index < len(events) and events[index][1] != "P":
            index += 1
        if index == len(events):
            return _hold(found, boundary, raw, patient)
        boundary = events[index][0]
        found.append((0, boundary))
        index += 1
    for line in typed.lines:
        if not _finished(line):  # still in the line editor, which shows it as typed: echo to the line's end
            found.append((boundary, _line_end(raw, boundary, len(raw))))
            return found, None, False
        while index < len(events) and events[index][0] < boundary:
            index += 1
        if index == len(events):  # no marker yet: the line is being read, or waits behind a running command
            return _hold(found, boundary, raw, patient)
        offset, kind = events[index]
        index += 1
        if kind == "C":
            found.append((boundary, offset))
            # The next line is read at the prompt after this command.
            while index < len(events) and events[index][1] != "P":
                index += 1
            if index == len(events):
                return found, None, False  # the command still runs: what follows is its output
            boundary = events[index][0]
            index += 1
        else:  # a prompt, no command: the echo is the first line; what follows it, the shell's complaint
            found.append((boundary, _line_end(raw, boundary, offset)))
            boundary = offset
    return found, None, True


def _hold(found: list, boundary: int, raw: bytes, patient: bool):
    """No marker for a line yet: withhold from its start while its echo may still come; after that, take its
    first line as its echo (until its marker comes)."""
    if patient:
        return found, boundary, False
    found.append((boundary, _line_end(raw, boundary, len(raw))))
    return found, None, False


def _text_echo(typed: TypedInput, raw: bytes, patient: bool):
    """Echo ranges (relative to typed.at) found by their text, for the kernel's echo and a line editor's."""
    found: list[tuple[int, int]] = []
    position = 0
    for line in typed.lines:
        text = line.rstrip(b"\r\n")
        wanted = _kernel_echo(text) if typed.mode == KERNEL else _CONTROL.sub(b"", text)
        start = raw.find(wanted, position) if wanted else position
        if start < 0 or (not wanted and _finished(line) and raw.find(b"\n", position) < 0):
            if patient:
                return found, position, False
            if typed.mode == EDITOR:  # redrawn beyond recognition (a line wider than the window)
                stop = _line_end(raw, position, len(raw))
                found.append((position, stop))
                position = stop
                continue
            return found, None, False
        stop = start + len(wanted)
        if _finished(line):
            stop = _line_end(raw, stop, len(raw))
        found.append((start, stop))
        position = stop
    return found, None, True


def _finished(line: bytes) -> bool:
    return line.endswith((b"\n", b"\r"))  # Enter is "\r" as a terminal sends it, "\n" as the API adds it


def _kernel_echo(text: bytes) -> bytes:
    """What the kernel echoes of a line in canonical mode (ECHOCTL): control keys as ^X, tab as is; end of file
    and the erase keys echo nothing to look for."""
    text = _UNECHOED.sub(b"", text)
    return _CONTROL.sub(lambda match: b"^" + bytes([match.group()[0] ^ 0x40]), text)


def _line_end(raw: bytes, start: int, limit: int) -> int:
    """Just past the first "\\n" from start (before limit), or limit."""
    newline = raw.find(b"\n", start, limit)
    return limit if newline < 0 else newline + 1


def without(data: bytes, start: int, ranges: Sequence[tuple[int, int]]) -> bytes:
    """data (output from byte start) with the given absolute ranges left out."""
    if not ranges:
        return data
    pieces, position, end = [], start, start + len(data)
    for low, high in ranges:
        if high <= position or low >= end:
            continue
        if low > position:
            pieces.append(data[position - start:low - start])
        position = max(position, high)
    if position < end:
        pieces.append(data[position - start:])
    return b"".join(pieces)
