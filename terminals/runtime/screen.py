"""The screen a terminal would show for a PTY's output, and the replies it would send to the program's queries."""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypedDict

import pyte
from pyte import modes
from pyte.screens import Char, Cursor, StaticDefaultDict

ALTERNATE_SCREEN_MODES = frozenset({47, 1047, 1049})
SAVE_CURSOR_MODE = 1049  # switches screens and also saves and restores the cursor, as xterm's smcup/rmcup do
PRIMARY_DEVICE_ATTRIBUTES = b"\x1b[?1;2c"  # a VT100 with advanced video, xterm's answer
STATUS_OK = b"\x1b[0n"

_QUERY = re.compile(rb"\x1b\[(?:0?c|5n|6n)")
_QUERY_START = re.compile(rb"\x1b(?:\[[056]?)?\Z")  # a query that the next chunk may finish


class CursorPosition(TypedDict):
    row: int
    col: int


class Snapshot(TypedDict):
    cols: int
    rows: int
    lines: list[str]
    cursor: CursorPosition
    cursorVisible: bool
    alternateScreen: bool
    title: str


Line = StaticDefaultDict[int, Char]


@dataclass(frozen=True)
class _SavedScreen:
    lines: dict[int, Line]
    cursor: Cursor


class _MirrorScreen(pyte.Screen):
    """pyte's screen with an alternate screen, and blind to the payload of control strings.

    pyte keeps one buffer and ignores the alternate screen modes, so a
    full-screen program would leave its last frame behind; here the main
    screen is saved on entering and put back on leaving.
    """

    in_alternate_screen: bool
    in_control_string: bool
    _saved_main: _SavedScreen | None

    def resize(self, lines: int | None = None, columns: int | None = None) -> None:
        """Resizes as pyte does, except that fewer rows keep the cursor's row on screen and drop rows below it first.

        pyte alone drops rows from the top whatever the cursor's row, which
        loses a shell's prompt whenever the screen is not full.
        """
        if (lines or self.lines) == self.lines and (columns or self.columns) == self.columns:
            return
        if lines is not None and lines < self.lines:
            kept, shift = _fit_rows(self.buffer, self.cursor.y, lines)
            self.buffer.clear()
            self.buffer.update(kept)
            self.cursor.y -= shift
            self.lines = lines
            self.set_margins()
            self.dirty.update(range(lines))
        super().resize(lines, columns)
        self.ensure_hbounds()
        self.ensure_vbounds()

    def reset(self) -> None:
        super().reset()
        self.in_alternate_screen = False  # a full reset returns to the main screen, as in xterm
        self.in_control_string = False
        self._saved_main = None

    # pyte passes private mode numbers (ESC[?1049h) unshifted with private=True and shifts them itself.

    def set_mode(self, *numbers: int, **kwargs: Any) -> None:
        super().set_mode(*numbers, **kwargs)
        if _names_alternate_screen(numbers, kwargs) and not self.in_alternate_screen:
            self._enter_alternate_screen()

    def reset_mode(self, *numbers: int, **kwargs: Any) -> None:
        super().reset_mode(*numbers, **kwargs)
        if _names_alternate_screen(numbers, kwargs) and self.in_alternate_screen:
            self._leave_alternate_screen(restore_cursor=SAVE_CURSOR_MODE in numbers)

    def _enter_alternate_screen(self) -> None:
        lines = {row: copy.copy(line) for row, line in self.buffer.items()}
        self._saved_main = _SavedScreen(lines=lines, cursor=copy.copy(self.cursor))
        self.in_alternate_screen = True
        # Always starts blank: the previous alternate content is not kept, so 47 and 1047 clear as 1049 does.
        self.erase_in_display(2)

    def _leave_alternate_screen(self, *, restore_cursor: bool) -> None:
        saved = self._saved_main
        assert saved is not None
        # The screen may have been resized meanwhile; the saved lines shrink as resize() shrinks the live ones.
        kept, shift = _fit_rows(saved.lines, saved.cursor.y, self.lines)
        self.buffer.clear()
        self.buffer.update(kept)
        self._cut_lines_at_width()
        if restore_cursor:
            self.cursor = saved.cursor
            self.cursor.y -= shift
        self.ensure_hbounds()
        self.ensure_vbounds()
        self.dirty.update(range(self.lines))
        self.in_alternate_screen = False
        self._saved_main = None

    def _cut_lines_at_width(self) -> None:
        for line in self.buffer.values():
            for column in [column for column in line if column >= self.columns]:
                del line[column]

    # Control strings (DCS, SOS, PM, APC): pyte does not know them and would draw their payload.

    def start_control_string(self) -> None:
        self.in_control_string = True

    def end_control_string(self) -> None:
        self.in_control_string = False

    def draw(self, data: str) -> None:
        if not self.in_control_string:
            super().draw(data)


def _fit_rows(lines: Mapping[int, Line], cursor_row: int, rows: int) -> tuple[dict[int, Line], int]:
    """Returns the lines that fit in rows, moved up just enough to keep cursor_row on screen, and how far they moved."""
    shift = max(cursor_row + 1 - rows, 0)
    return {row - shift: line for row, line in lines.items() if shift <= row < shift + rows}, shift


def _names_alternate_screen(numbers: tuple[int, ...], kwargs: dict[str, Any]) -> bool:
    return bool(kwargs.get("private")) and not ALTERNATE_SCREEN_MODES.isdisjoint(numbers)


class _MirrorStream(pyte.ByteStream):
    """pyte's byte stream, ending control strings at any escape and surviving sequences pyte cannot handle."""

    escape = {
        **pyte.ByteStream.escape,
        "P": "start_control_string",
        "X": "start_control_string",
        "^": "start_control_string",
        "_": "start_control_string",
    }

    listener: _MirrorScreen

    def _send_to_parser(self, data: str) -> bool | None:
        if data == "\x1b":
            self.listener.end_control_string()  # ST is ESC \, and any other escape aborts the string too
        try:
            return super()._send_to_parser(data)
        except (TypeError, ValueError):
            # pyte raises on sequences it cannot dispatch (ESC[?6n, ESC[1;2;3A, a non-ASCII digit).
            # Such a sequence is dropped; pyte has already restarted its parser in plain text.
            return True


class ScreenMirror:
    """The screen of one terminal, fed with the bytes its program writes."""

    def __init__(self, cols: int, rows: int) -> None:
        self._screen = _MirrorScreen(cols, rows)
        self._stream = _MirrorStream(self._screen)
        self._unfinished_query = b""  # the start of a query at the end of the last chunk

    def feed(self, data: bytes) -> None:
        """Updates the screen with output; queries in it go unanswered."""
        self.feed_and_answer(data)

    def feed_and_answer(self, data: bytes) -> bytes:
        """Updates the screen with output; returns what a terminal would reply to the queries in it, b"" if none.

        Each reply is computed after feeding the output up to its query, so a
        cursor position report gives the cursor's position at that moment. A
        query split across chunks is answered with the chunk that finishes it.
        """
        carried = len(self._unfinished_query)
        scanned = self._unfinished_query + data
        replies: list[bytes] = []
        fed = 0
        for query in _QUERY.finditer(scanned):
            end = query.end() - carried
            self._stream.feed(data[fed:end])
            fed = end
            replies.append(self._reply_to(query.group()))
        self._stream.feed(data[fed:])
        unfinished = _QUERY_START.search(scanned)
        self._unfinished_query = unfinished.group() if unfinished else b""
        return b"".join(replies)

    def resize(self, cols: int, rows: int) -> None:
        self._screen.resize(lines=rows, columns=cols)

    def snapshot(self) -> Snapshot:
        """Returns the visible screen: one line per row without trailing spaces, and a 0-based cursor."""
        screen = self._screen
        row, col = self._cursor_position()
        return {
            "cols": screen.columns,
            "rows": screen.lines,
            "lines": [line.rstrip(" ") for line in screen.display],
            "cursor": {"row": row, "col": col},
            "cursorVisible": not screen.cursor.hidden,
            "alternateScreen": screen.in_alternate_screen,
            "title": screen.title,
        }

    def _cursor_position(self) -> tuple[int, int]:
        """Returns the 0-based (row, column) of the cursor, inside the screen."""
        screen = self._screen
        # After writing the last column pyte parks the cursor one past it, waiting to wrap.
        return min(screen.cursor.y, screen.lines - 1), min(screen.cursor.x, screen.columns - 1)

    def _reply_to(self, query: bytes) -> bytes:
        if query.endswith(b"c"):
            return PRIMARY_DEVICE_ATTRIBUTES
        if query.endswith(b"5n"):
            return STATUS_OK
        row, col = self._cursor_position()
        if modes.DECOM in self._screen.mode and self._screen.margins is not None:
            row -= self._screen.margins.top  # in origin mode rows count from the top margin
        return b"\x1b[%d;%dR" % (row + 1, col + 1)
