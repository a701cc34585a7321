"""Terminal output reduced to plain text: escape sequences removed, overwrites within a line applied."""

from __future__ import annotations

import re

# OSC, DCS, SOS, PM and APC strings run to their terminator. A terminal ignores
# line feeds inside them, so their newlines are kept to keep the line count;
# without a terminator they end at the next escape.
_STRING_SEQUENCE = re.compile(
    r"(?:\x1b\]|\x9d)[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"  # OSC, ended by BEL or ST
    r"|(?:\x1b[PX^_]|[\x90\x98\x9e\x9f])[^\x1b\x9c]*(?:\x1b\\|\x9c)?"  # DCS, SOS, PM, APC, ended by ST
)

# Moves to a column and line erasures are kept for _render_line: dropping them
# would leave the longer text of an earlier progress update showing through.
_LINE_EDIT = r"(?:\x1b\[|\x9b)[0-9]*[GK]"

_INVISIBLE = re.compile(
    rf"(?!{_LINE_EDIT})"
    r"(?:"
    r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]"  # CSI: parameters, intermediates, final byte
    r"|\x1b[ -/]+[0-~]"  # designations such as ESC ( B and ESC # 8
    r"|\x1b[0-~]"  # single-character escapes such as ESC 7, ESC =, ESC M, ESC c
    r"|[\x00-\x07\x0b\x0c\x0e-\x1f\x7f-\x9f]"  # other controls; \b, \t, \n and \r stay
    r")"
)

_WIDEST_LINE = 1000  # columns; more than any terminal has, and a bound on what CSI n G can allocate

_LINE_CONTROL = re.compile(rf"(\r|\x08|{_LINE_EDIT})")
_NEEDS_RENDERING = re.compile(r"[\r\x08\x1b\x9b]")


def strip_ansi(text: str) -> str:
    """Returns text as a terminal would show it, line by line, without escape sequences or control characters.

    Within each line, carriage returns, backspaces, moves to a column and line
    erasures are applied, so a line redrawn many times reads as its final
    state. The result has exactly as many newlines as text.
    """
    text = _STRING_SEQUENCE.sub(_newlines_of, text)
    text = _INVISIBLE.sub("", text)
    text = text.replace("\r\n", "\n")  # the PTY ends every line this way; only other \r need rendering
    if not _NEEDS_RENDERING.search(text):
        return text
    lines = text.split("\n")
    return "\n".join(_render_line(line) if _NEEDS_RENDERING.search(line) else line for line in lines)


def _newlines_of(match: re.Match[str]) -> str:
    return "\n" * match.group().count("\n")


def _render_line(line: str) -> str:
    """Returns the line's final state: later text overwrites earlier text at the cursor's column."""
    cells: list[str] = []  # one character per column; trailing blanks are never stored
    column = 0
    for piece in _LINE_CONTROL.split(line):
        if not piece:
            continue
        if piece == "\r":
            column = 0
        elif piece == "\x08":
            column = max(column - 1, 0)
        elif piece[0] in "\x1b\x9b":
            column = _apply_line_edit(cells, column, piece)
        else:
            _write(cells, column, piece)
            column += len(piece)
    return "".join(cells)


def _write(cells: list[str], column: int, text: str) -> None:
    if column > len(cells):
        cells.extend(" " * (column - len(cells)))
    cells[column : column + len(text)] = text


def _apply_line_edit(cells: list[str], column: int, sequence: str) -> int:
    """Applies a move to a column (CSI n G) or a line erasure (CSI n K); returns the new cursor column."""
    argument = sequence.strip("\x1b[\x9bGK")
    number = int(argument) if argument else 0
    if sequence[-1] == "G":
        return min(max(number - 1, 0), _WIDEST_LINE)
    if number in (0, 2):
        del cells[column:]  # up to the end of the line
    if number in (1, 2):  # from the start of the line through the cursor
        if column + 1 >= len(cells):
            cells.clear()
        else:
            cells[: column + 1] = " " * (column + 1)
    return column


_UNFINISHED_ESCAPE = re.compile(rb"\x1b(?:\[[0-?]*[ -/]*|\][^\x07\x1b]*|[P^_X][^\x1b]*|[ -/]*)?$")


def complete_escapes_end(data: bytes) -> int:
    """Where data ends once an escape sequence cut off at its end is left out (len(data) when none is)."""
    tail_start = max(0, len(data) - 256)
    match = _UNFINISHED_ESCAPE.search(data, tail_start)
    return match.start() if match else len(data)


def newest_plain_text(raw: str, limit: int, *, cut_before: bool = False) -> tuple[str, bool]:
    """The end of raw as a terminal shows it, at most limit UTF-8 bytes, from a whole character on.

    Returns the text and whether anything of the rendered text was left out. Rendering can
    lengthen a line (a move to a far column pads with blanks), so the cut comes after it.
    cut_before says older output was dropped before raw begins: then raw may begin inside an
    escape sequence, so the text starts at its first whole line (when it has more than one).
    """
    if cut_before:
        first_end = raw.find("\n")
        if 0 <= first_end < len(raw) - 1:
            raw = raw[first_end + 1 :]
    plain = strip_ansi(raw)
    encoded = plain.encode("utf-8", errors="surrogatepass")
    if len(encoded) <= limit:
        return plain, False
    start = len(encoded) - limit
    while start < len(encoded) and 0x80 <= encoded[start] < 0xC0:  # inside a character: start at the next one
        start += 1
    return encoded[start:].decode("utf-8", errors="surrogatepass"), True
