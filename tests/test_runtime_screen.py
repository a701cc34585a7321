"""ScreenMirror: text, cursor, resizing, the alternate screen, titles, answered queries, bad input and a real bash."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable

import pytest

from terminals.runtime.buffer import OutputBuffer
from terminals.runtime.pty import PtySession, SpawnSpec
from terminals.runtime.screen import ScreenMirror, Snapshot

CURSOR_REPORT = b"\x1b[6n"


def mirror_of(data: bytes, *, cols: int = 20, rows: int = 5) -> ScreenMirror:
    mirror = ScreenMirror(cols, rows)
    mirror.feed(data)
    return mirror


def cursor_of(mirror: ScreenMirror) -> tuple[int, int]:
    cursor = mirror.snapshot()["cursor"]
    return cursor["row"], cursor["col"]


# Text and cursor


def test_snapshot_has_every_field() -> None:
    """A fresh screen is blank, with the cursor visible at the top left."""
    assert ScreenMirror(10, 3).snapshot() == {
        "cols": 10,
        "rows": 3,
        "lines": ["", "", ""],
        "cursor": {"row": 0, "col": 0},
        "cursorVisible": True,
        "alternateScreen": False,
        "title": "",
    }


def test_plain_text_fills_rows_without_trailing_spaces() -> None:
    """Each row is one line with its trailing blanks stripped."""
    snapshot = mirror_of(b"hello\r\n  world  \r\n").snapshot()
    assert snapshot["lines"] == ["hello", "  world", "", "", ""]


def test_colours_do_not_appear_in_lines() -> None:
    """SGR sequences change attributes, not text."""
    assert mirror_of(b"\x1b[1;31mred\x1b[0m plain").snapshot()["lines"][0] == "red plain"


def test_cursor_follows_text_and_moves() -> None:
    """The cursor is 0-based and follows writes and cursor positioning."""
    mirror = mirror_of(b"ab\r\ncde")
    assert cursor_of(mirror) == (1, 3)
    mirror.feed(b"\x1b[4;7H")
    assert cursor_of(mirror) == (3, 6)


def test_cursor_after_the_last_column_stays_on_screen() -> None:
    """A full row leaves the cursor in the last column, not one past it."""
    assert cursor_of(mirror_of(b"0123456789", cols=10)) == (0, 9)


def test_cursor_visibility_follows_dectcem() -> None:
    """ESC[?25l hides the cursor and ESC[?25h shows it again."""
    mirror = mirror_of(b"\x1b[?25l")
    assert mirror.snapshot()["cursorVisible"] is False
    mirror.feed(b"\x1b[?25h")
    assert mirror.snapshot()["cursorVisible"] is True


def test_output_scrolls_off_the_top() -> None:
    """More lines than rows leaves the newest rows on screen."""
    data = b"".join(b"line%d\r\n" % number for number in range(8))
    assert mirror_of(data, rows=3).snapshot()["lines"] == ["line6", "line7", ""]


def test_clear_screen_blanks_every_row() -> None:
    """ESC[H ESC[2J, which `clear` prints, blanks the screen and homes the cursor."""
    mirror = mirror_of(b"one\r\ntwo\r\nthree\x1b[H\x1b[2J")
    assert mirror.snapshot()["lines"] == ["", "", "", "", ""]
    assert cursor_of(mirror) == (0, 0)


# Resizing


def test_resize_changes_size_and_cuts_long_lines() -> None:
    """Narrowing cuts rows at the new width; the snapshot reports the new size."""
    mirror = mirror_of(b"0123456789abcdef\r\nxyz")
    mirror.resize(8, 3)
    snapshot = mirror.snapshot()
    assert (snapshot["cols"], snapshot["rows"]) == (8, 3)
    assert snapshot["lines"] == ["01234567", "xyz", ""]


def test_resize_keeps_the_cursor_on_screen() -> None:
    """A cursor beyond the new edges moves to them."""
    mirror = mirror_of(b"\x1b[5;20H")
    mirror.resize(10, 3)
    assert cursor_of(mirror) == (2, 9)


def test_resize_to_fewer_rows_keeps_the_cursor_row() -> None:
    """Fewer rows drop the rows below the cursor first, and rows above it only as far as needed."""
    near_top = mirror_of(b"one\r\ntwo\r\nthree\x1b[1;1H")
    near_top.resize(20, 2)
    assert near_top.snapshot()["lines"] == ["one", "two"]
    assert cursor_of(near_top) == (0, 0)
    at_bottom = mirror_of(b"a\r\nb\r\nc\r\nd\r\n$ ")
    at_bottom.resize(20, 2)
    assert at_bottom.snapshot()["lines"] == ["d", "$"]
    assert cursor_of(at_bottom) == (1, 2)


def test_resize_to_the_same_size_keeps_a_pending_wrap() -> None:
    """A resize that changes nothing leaves the next character wrapping to the next row."""
    mirror = mirror_of(b"0123456789", cols=10)
    mirror.resize(10, 5)
    mirror.feed(b"X")
    assert mirror.snapshot()["lines"][:2] == ["0123456789", "X"]


def test_resize_wider_leaves_room_for_longer_lines() -> None:
    """After widening, text runs into the new columns without wrapping."""
    mirror = mirror_of(b"", cols=5)
    mirror.resize(12, 5)
    mirror.feed(b"hello world!")
    assert mirror.snapshot()["lines"][0] == "hello world!"


# The alternate screen

MAIN_SCREEN = b"$ ls\r\nREADME\r\n$ vim"


@pytest.mark.parametrize("mode", [1049, 1047, 47])
def test_alternate_screen_shows_its_own_content(mode: int) -> None:
    """Entering the alternate screen starts from a blank screen that the program draws on."""
    mirror = mirror_of(MAIN_SCREEN + b"\x1b[?%dh\x1b[Hediting" % mode)
    snapshot = mirror.snapshot()
    assert snapshot["alternateScreen"] is True
    assert snapshot["lines"] == ["editing", "", "", "", ""]


@pytest.mark.parametrize("mode", [1049, 1047, 47])
def test_leaving_the_alternate_screen_restores_the_main_screen(mode: int) -> None:
    """After a full-screen program exits, the shell's screen is back, not the program's last frame."""
    mirror = mirror_of(MAIN_SCREEN + b"\x1b[?%dh\x1b[H\x1b[2Jediting\r\n~\r\n~\x1b[?%dl" % (mode, mode))
    snapshot = mirror.snapshot()
    assert snapshot["alternateScreen"] is False
    assert snapshot["lines"] == ["$ ls", "README", "$ vim", "", ""]


def test_leaving_1049_restores_the_cursor() -> None:
    """Mode 1049 puts the cursor back where the shell left it."""
    mirror = mirror_of(MAIN_SCREEN + b"\x1b[?1049h\x1b[4;8Hx\x1b[?1049l")
    assert cursor_of(mirror) == (2, 5)


def test_entering_twice_keeps_the_first_main_screen() -> None:
    """A second enter while already in the alternate screen does not save the alternate content as main."""
    mirror = mirror_of(MAIN_SCREEN + b"\x1b[?1049halternate\x1b[?1049h\x1b[?1049l")
    assert mirror.snapshot()["lines"][:3] == ["$ ls", "README", "$ vim"]


def test_leaving_without_entering_changes_nothing() -> None:
    """A stray leave on the main screen keeps its content."""
    mirror = mirror_of(MAIN_SCREEN + b"\x1b[?1049l")
    assert mirror.snapshot()["lines"][:3] == ["$ ls", "README", "$ vim"]


def test_shrinking_in_the_alternate_screen_keeps_the_bottom_of_the_main_screen() -> None:
    """A resize while a program runs shrinks the restored screen as it would the live one, keeping the prompt."""
    mirror = mirror_of(MAIN_SCREEN + b"\x1b[?1049h", cols=20, rows=5)
    mirror.resize(4, 2)
    mirror.feed(b"\x1b[?1049l")
    snapshot = mirror.snapshot()
    assert snapshot["lines"] == ["READ", "$ vi"]
    assert snapshot["cursor"] == {"row": 1, "col": 3}


def test_full_reset_returns_to_the_main_screen() -> None:
    """ESC c leaves the alternate screen, as xterm's full reset does."""
    mirror = mirror_of(MAIN_SCREEN + b"\x1b[?1049h\x1bc")
    assert mirror.snapshot()["alternateScreen"] is False


# Titles


@pytest.mark.parametrize("sequence", [b"\x1b]0;my title\x07", b"\x1b]2;my title\x07", b"\x1b]2;my title\x1b\\"],
                         ids=["osc0-bel", "osc2-bel", "osc2-st"])
def test_title_is_set_by_osc_0_and_2(sequence: bytes) -> None:
    """OSC 0 and OSC 2 set the title, ended by BEL or ST, and draw nothing."""
    snapshot = mirror_of(b"a" + sequence + b"b").snapshot()
    assert snapshot["title"] == "my title"
    assert snapshot["lines"][0] == "ab"


# Queries


def test_cursor_position_report_gives_the_cursor_at_the_query() -> None:
    """ESC[6n is answered with the 1-based position reached by the output before it."""
    mirror = ScreenMirror(20, 5)
    assert mirror.feed_and_answer(b"$ ls\r\n$ " + CURSOR_REPORT) == b"\x1b[2;3R"


def test_each_query_is_answered_with_the_state_at_that_point() -> None:
    """Several queries in one chunk get replies in order, each for the cursor where it was asked."""
    mirror = ScreenMirror(20, 5)
    replies = mirror.feed_and_answer(b"ab" + CURSOR_REPORT + b"cd\r\n" + CURSOR_REPORT + b"\x1b[c\x1b[0c\x1b[5n")
    assert replies == b"\x1b[1;3R" + b"\x1b[2;1R" + b"\x1b[?1;2c" * 2 + b"\x1b[0n"


def test_output_without_queries_gets_no_reply() -> None:
    """Plain output and look-alikes that are not queries (ESC[>c, ESC[6m) get b""."""
    mirror = ScreenMirror(20, 5)
    assert mirror.feed_and_answer(b"hello \x1b[6mblink\x1b[>c\x1b[?6n") == b""


@pytest.mark.parametrize("split", [1, 2, 3])
def test_query_split_across_chunks_is_answered_once_complete(split: int) -> None:
    """A query cut between two feeds is answered with the chunk that finishes it."""
    mirror = ScreenMirror(20, 5)
    data = b"abc" + CURSOR_REPORT + b"def"
    cut = 3 + split
    assert mirror.feed_and_answer(data[:cut]) == b""
    assert mirror.feed_and_answer(data[cut:]) == b"\x1b[1;4R"
    assert mirror.snapshot()["lines"][0] == "abcdef"


def test_query_split_after_plain_feed_is_still_answered() -> None:
    """feed() keeps track of an unfinished query for the next feed_and_answer()."""
    mirror = ScreenMirror(20, 5)
    mirror.feed(b"x\x1b[")
    assert mirror.feed_and_answer(b"6n") == b"\x1b[1;2R"


def test_cursor_report_in_the_last_column_stays_on_screen() -> None:
    """A full row reports the last column, as xterm does."""
    mirror = ScreenMirror(10, 3)
    assert mirror.feed_and_answer(b"0123456789" + CURSOR_REPORT) == b"\x1b[1;10R"


# Robustness


def test_invalid_utf8_is_replaced() -> None:
    """Bytes that are not UTF-8 show as replacement characters and the rest still draws."""
    assert mirror_of(b"\xff\xfe ok \xc3(").snapshot()["lines"][0] == "\ufffd\ufffd ok \ufffd("


def test_character_split_across_chunks_is_joined() -> None:
    """A multi-byte character cut between feeds draws once, whole."""
    mirror = ScreenMirror(20, 5)
    for byte in "é€😀".encode():
        mirror.feed(bytes([byte]))
    assert mirror.snapshot()["lines"][0].replace(" ", "") == "é€😀"


def test_sequence_split_across_chunks_is_applied() -> None:
    """An escape sequence cut between feeds acts as if it came whole."""
    mirror = ScreenMirror(20, 5)
    for byte in b"\x1b[3;5Hx\x1b]2;split title\x07":
        mirror.feed(bytes([byte]))
    snapshot = mirror.snapshot()
    assert snapshot["lines"][2] == "    x"
    assert snapshot["title"] == "split title"


@pytest.mark.parametrize("sequence", [b"\x1b[?6n", b"\x1b[1;2;3A", b"\x1b[?4m", "\x1b[²m".encode()],
                         ids=["private-cursor-report", "extra-parameters", "private-sgr", "non-ascii-digit"])
def test_sequences_pyte_cannot_dispatch_are_dropped(sequence: bytes) -> None:
    """Sequences that make pyte raise are skipped and the output after them still draws."""
    assert mirror_of(b"before" + sequence + b"after").snapshot()["lines"][0] == "beforeafter"


@pytest.mark.parametrize("sequence", [b"\x1bP+q544e\x1b\\", b"\x1b_Gf=100;AAAA\x1b\\", b"\x1b^private\x1b\\"],
                         ids=["dcs", "apc", "pm"])
def test_control_string_payload_is_not_drawn(sequence: bytes) -> None:
    """DCS, APC and PM payloads (terminfo queries, graphics) stay off the screen."""
    assert mirror_of(b"a" + sequence + b"b").snapshot()["lines"][0] == "ab"


def test_control_string_without_terminator_ends_at_the_next_escape() -> None:
    """An unterminated DCS stops swallowing text at the next escape sequence."""
    assert mirror_of(b"\x1bPcut off\x1b[1mvisible").snapshot()["lines"][0] == "visible"


# A real shell

ENV = {"PATH": os.environ["PATH"], "TERM": "xterm-256color", "PS1": "$ ", "HOME": "/tmp"}


class MirroredShell:
    """A bash on a real PTY whose output is fed, as it arrives, into a ScreenMirror."""

    def __init__(self, cols: int = 80, rows: int = 24) -> None:
        spec = SpawnSpec(argv=["bash", "--norc", "--noprofile"], cwd="/tmp", env=dict(ENV), cols=cols, rows=rows)
        self.session = PtySession(spec, buffer=OutputBuffer(max_lines=10_000, max_bytes=1 << 20))
        self.mirror = ScreenMirror(cols, rows)
        self._next_byte = 0

    def _catch_up(self) -> Snapshot:
        data, _, _ = self.session.buffer.read_bytes(self._next_byte, 1 << 20)
        self._next_byte += len(data)
        self.mirror.feed(data)
        return self.mirror.snapshot()

    async def wait_for_screen(
        self, condition: Callable[[Snapshot], bool], what: str, timeout: float = 10.0
    ) -> Snapshot:
        """Returns the first snapshot that meets condition; fails after timeout seconds."""
        deadline = time.monotonic() + timeout
        while not condition(snapshot := self._catch_up()):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"timed out waiting for {what}; screen: {snapshot['lines']!r}")
            await self.session.wait_for_output(min(remaining, 0.1))
        return snapshot

    async def stop(self) -> None:
        if self.session.is_alive:
            await self.session.terminate(grace=1.0)
        self.session.close()


def shows(text: str) -> Callable[[Snapshot], bool]:
    return lambda snapshot: text in snapshot["lines"]


def run(scenario: Callable[[MirroredShell], object], timeout: float = 30.0) -> None:
    """Runs an async scenario against a fresh mirrored bash, with an overall deadline."""

    async def bounded() -> None:
        shell = MirroredShell()
        shell.session.start()
        try:
            await asyncio.wait_for(scenario(shell), timeout)
        finally:
            await shell.stop()

    asyncio.run(bounded())


def test_real_bash_output_shows_as_plain_text() -> None:
    """Coloured printf output from bash appears on the mirrored screen as its text."""

    async def scenario(shell: MirroredShell) -> None:
        await shell.wait_for_screen(shows("$"), "the prompt")
        shell.session.write(b"printf 'hello\\033[31m red\\033[0m\\n'\n")
        snapshot = await shell.wait_for_screen(shows("hello red"), "the printed line")
        assert snapshot["alternateScreen"] is False

    run(scenario)


def test_real_bash_full_screen_program_leaves_the_shell_screen() -> None:
    """tput smcup / rmcup around output switch to the alternate screen and back to the shell's lines."""

    async def scenario(shell: MirroredShell) -> None:
        await shell.wait_for_screen(shows("$"), "the prompt")
        shell.session.write(b"echo be''fore; tput smcup; echo in''side; read answer; tput rmcup; echo af''ter\n")
        inside = await shell.wait_for_screen(shows("inside"), "the alternate screen")
        assert inside["alternateScreen"] is True
        assert "before" not in inside["lines"]
        shell.session.write(b"\n")
        after = await shell.wait_for_screen(shows("after"), "the main screen again")
        assert after["alternateScreen"] is False
        assert "before" in after["lines"]
        assert "inside" not in after["lines"]

    run(scenario)
