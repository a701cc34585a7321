"""The screen a terminal would show for a PTY's output, and the replies it would send to the program's queries."""

from __future__ import annotations

import copy
import re
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


@dataclass(frozen=True)
class _SavedScreen:
    lines: dict[int, StaticDefaultDict[int, Char]]
    cursor: Cursor
    rows: int


class _MirrorScreen(pyte.Screen):
    """pyte's screen with an alternate screen, and blind to the payload of control strings.

    pyte keeps one buffer and ignores the alternate screen modes, so a
    full-screen program would leave its last frame behind; here the main
    screen is saved on entering and put back on leaving.
    """

    in_alternate_screen: bool
    in_control_string: bool
    _saved_main: _SavedScreen | None

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
        self._saved_main = _SavedScreen(lines=lines, cursor=copy.copy(self.cursor), rows=self.lines)
        self.in_alternate_screen = True
        # Always starts blank: the previous alternate content is not kept, so 47 and 1047 clear as 1049 does.
        self.erase_in_display(2)

    def _leave_alternate_screen(self, *, restore_cursor: bool) -> None:
        saved = self._saved_main
        assert saved is not None
        # Rows lost to shrinking while in the alternate screen go from the top, as pyte's resize drops them.
        dropped = max(saved.rows - self.lines, 0)
        self.buffer.clear()
        self.buffer.update(self._fit_to_screen(saved.lines, dropped))
        if restore_cursor:
            self.cursor = saved.cursor
            self.cursor.y -= dropped
        self.ensure_hbounds()
        self.ensure_vbounds()
        self.dirty.update(range(self.lines))
        self.in_alternate_screen = False
        self._saved_main = None

    def _fit_to_screen(
        self, lines: dict[int, StaticDefaultDict[int, Char]], dropped: int
    ) -> dict[int, StaticDefaultDict[int, Char]]:
        """Returns the lines moved up by dropped rows and cut at the screen's current width."""
        fitted = {}
        for row, line in lines.items():
            if row >= dropped:
                for column in [column for column in line if column >= self.columns]:
                    del line[column]
                fitted[row - dropped] = line
        return fitted

    # Control strings (DCS, SOS, PM, APC): pyte does not know them and would draw their payload.

    def start_control_string(self) -> None:
        self.in_control_string = True

    def end_control_string(self) -> None:
        self.in_control_string = False

    def draw(self, data: str) -> None:
        if not self.in_control_string:
            super().draw(data)


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
        replies = []
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
        self._screen.ensure_hbounds()
        self._screen.ensure_vbounds()

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
