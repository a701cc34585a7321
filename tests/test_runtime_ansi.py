"""strip_ansi: every kind of escape sequence removed, overwrites within a line applied, lines kept, large input fast."""

from __future__ import annotations

import random
import time

import pytest

from terminals.runtime.ansi import newest_plain_text, strip_ansi

# Escape sequences


@pytest.mark.parametrize(
    "sequence",
    ["\x1b[31m", "\x1b[01;38;5;208m", "\x1b[0m", "\x1b[m", "\x1b[2J", "\x1b[10;20H", "\x1b[?2004h", "\x1b[?1049l",
     "\x1b[>4;2m", "\x1b[ q"],
    ids=["sgr", "sgr-256", "sgr-reset", "sgr-empty", "erase-display", "cursor-position", "bracketed-paste",
         "alternate-screen", "modify-other-keys", "intermediate-byte"],
)
def test_csi_sequences_are_removed(sequence: str) -> None:
    """CSI sequences vanish, private modes and intermediate bytes included."""
    assert strip_ansi(f"before{sequence}after") == "beforeafter"


def test_c1_csi_is_removed() -> None:
    """The 8-bit CSI form (\\x9b) is removed like ESC [."""
    assert strip_ansi("\x9b1;31mred\x9b0m") == "red"


@pytest.mark.parametrize(
    "sequence",
    ["\x1b]0;window title\x07", "\x1b]2;title\x1b\\", "\x1b]8;;https://example.com\x1b\\",
     "\x1b]133;A\x07", "\x9d0;title\x9c"],
    ids=["bel", "st", "hyperlink", "shell-integration", "c1"],
)
def test_osc_strings_are_removed(sequence: str) -> None:
    """OSC strings vanish up to BEL or ST."""
    assert strip_ansi(f"a{sequence}b") == "ab"


@pytest.mark.parametrize(
    "sequence",
    ["\x1bP+q544e\x1b\\", "\x1bPq#0;2;0;0;0#1!14~\x1b\\", "\x1bXstart of string\x1b\\", "\x1b^privacy\x1b\\",
     "\x1b_Gf=100;AAAA\x1b\\"],
    ids=["dcs", "sixel", "sos", "pm", "apc"],
)
def test_control_strings_are_removed(sequence: str) -> None:
    """DCS, SOS, PM and APC strings vanish with their payload."""
    assert strip_ansi(f"a{sequence}b") == "ab"


def test_unterminated_osc_ends_at_the_next_escape() -> None:
    """An OSC cut off before its terminator swallows text only up to the next escape."""
    assert strip_ansi("\x1b]0;cut off\x1b[1mbold\x1b[0m") == "bold"


@pytest.mark.parametrize("sequence", ["\x1b(B", "\x1b)0", "\x1b(0", "\x1b#8", "\x1b%G"])
def test_charset_designations_are_removed(sequence: str) -> None:
    """Character set designations and other escapes with an intermediate byte vanish."""
    assert strip_ansi(f"x{sequence}y") == "xy"


@pytest.mark.parametrize("sequence", ["\x1b=", "\x1b>", "\x1b7", "\x1b8", "\x1bM", "\x1bc", "\x1bD", "\x1bE"])
def test_single_character_escapes_are_removed(sequence: str) -> None:
    """Two-byte escapes (keypad modes, cursor save and restore, index, reset) vanish."""
    assert strip_ansi(f"x{sequence}y") == "xy"


def test_lone_escape_is_removed() -> None:
    """An escape that starts no sequence is dropped without taking the newline after it."""
    assert strip_ansi("a\x1b\nb\x1b") == "a\nb"


# Control characters


@pytest.mark.parametrize("character", ["\x07", "\x0e", "\x0f", "\x00", "\x7f", "\x0b", "\x0c"],
                         ids=["bel", "shift-out", "shift-in", "nul", "del", "vt", "ff"])
def test_control_characters_are_removed(character: str) -> None:
    """C0 controls other than newline and tab vanish."""
    assert strip_ansi(f"a{character}b") == "ab"


def test_tabs_and_newlines_are_kept() -> None:
    """Tabs and newlines are text."""
    assert strip_ansi("a\tb\nc") == "a\tb\nc"


# Overwrites within a line


def test_carriage_return_shows_the_later_text() -> None:
    """Text after a carriage return replaces text of the same length."""
    assert strip_ansi("50%\r100%") == "100%"


def test_carriage_return_overwrites_without_truncating() -> None:
    """Shorter text after a carriage return overwrites only its own columns, as on a terminal."""
    assert strip_ansi("abc\rX") == "Xbc"


def test_backspace_steps_back_one_column() -> None:
    """A backspace moves back one column and the next character overwrites it."""
    assert strip_ansi("ab\bc") == "ac"


def test_backspace_stops_at_the_first_column() -> None:
    """Backspaces at the start of a line do nothing."""
    assert strip_ansi("\b\bab") == "ab"


def test_carriage_return_before_newline_keeps_the_line() -> None:
    """The PTY's \\r\\n line ending leaves the line as it was."""
    assert strip_ansi("line\r\nnext\r\n") == "line\nnext\n"


def test_trailing_carriage_return_keeps_the_line() -> None:
    """A carriage return with nothing after it moves the cursor but erases nothing."""
    assert strip_ansi("waiting\r") == "waiting"


def test_carriage_returns_leave_a_progress_bar_final_state() -> None:
    """Carriage returns leave a progress bar's final state."""
    updates = "".join(f"\r\x1b[32m{percent:3d}%\x1b[0m [{'#' * (percent // 10):<10}]" for percent in range(101))
    assert strip_ansi(f"Downloading\n{updates}\nDone\n") == "Downloading\n100% [##########]\nDone\n"


def test_erase_line_after_carriage_return_removes_longer_earlier_text() -> None:
    """CSI K after a carriage return clears what a shorter update would not overwrite."""
    assert strip_ansi("Downloading 99%\r\x1b[Kdone") == "done"
    assert strip_ansi("Downloading 99%\r\x1b[2Kdone") == "done"


def test_erase_line_to_the_left_leaves_blanks() -> None:
    """CSI 1 K blanks the line up to and including the cursor."""
    assert strip_ansi("abcdef\x1b[3G\x1b[1K") == "   def"


def test_move_to_column_overwrites_like_carriage_return() -> None:
    """CSI 1 G, which node's readline uses instead of \\r, returns to the first column."""
    assert strip_ansi("10%\x1b[1G\x1b[0K100%") == "100%"
    assert strip_ansi("abcdef\x1b[3GX") == "abXdef"


def test_move_past_the_end_of_the_line_pads_with_spaces() -> None:
    """Text written after moving beyond the line's end lands in its column."""
    assert strip_ansi("ab\x1b[5GX") == "ab  X"


def test_move_to_a_huge_column_is_bounded() -> None:
    """CSI n G with an absurd n pads to a bounded width instead of allocating n columns."""
    assert len(strip_ansi("\x1b[999999999GX")) <= 1001


def test_colours_inside_an_overwritten_line_do_not_shift_columns() -> None:
    """Escape sequences take no columns when a carriage return overwrites the line."""
    assert strip_ansi("\x1b[1mabc\x1b[0m\r\x1b[31mX\x1b[0m") == "Xbc"


# Line structure


def test_line_count_is_preserved() -> None:
    """The result has as many newlines as the input, whatever the sequences between them."""
    text = "a\r\n\x1b]0;multi\nline title\x07b\n\x1bPdcs\nwith\nlines\x1b\\c\r\n\x1b\n\x0b\n\r\n\b\n"
    assert strip_ansi(text).count("\n") == text.count("\n")


def test_random_terminal_output_keeps_its_line_count() -> None:
    """Random mixes of text, controls and sequence fragments never gain or lose a newline."""
    rnd = random.Random(7)
    pieces = ["a", "bc", "\n", "\r", "\r\n", "\b", "\x1b", "[", "]", "P", "\\", "\x07", "\x9b", "\x9c", "31m",
              "K", "2K", "G", "5G", "?25l", ";", "\t", "é", "\x00"]
    for _ in range(500):
        text = "".join(rnd.choice(pieces) for _ in range(rnd.randint(0, 40)))
        assert strip_ansi(text).count("\n") == text.count("\n"), repr(text)


def test_plain_text_is_unchanged() -> None:
    """Text without controls comes back as it was."""
    text = "hello wörld — 你好\n  indented\n\ttabbed\n"
    assert strip_ansi(text) == text


# Performance


def coloured_listing(size: int) -> str:
    """About size characters of `ls --color` output, with PTY line endings."""
    rnd = random.Random(1)
    colours = ["01;34", "01;32", "0", "01;36", "38;5;208", "40;31;01"]
    lines, total = [], 0
    while total < size:
        names = (f"\x1b[{rnd.choice(colours)}mfile{rnd.randint(0, 99_999)}.txt\x1b[0m" for _ in range(5))
        line = "  ".join(names) + "\r\n"
        lines.append(line)
        total += len(line)
    return "".join(lines)


def test_large_coloured_output_is_stripped_quickly() -> None:
    """A megabyte of coloured listing takes well under the bound (about 0.1 s on a laptop)."""
    text = coloured_listing(1 << 20)
    started = time.perf_counter()
    stripped = strip_ansi(text)
    elapsed = time.perf_counter() - started
    assert "\x1b" not in stripped and "\r" not in stripped
    assert stripped.count("\n") == text.count("\n")
    assert elapsed < 2.0, f"took {elapsed:.2f}s"


def test_large_progress_output_is_stripped_quickly() -> None:
    """A megabyte of one line redrawn with carriage returns and erasures stays fast."""
    text = "".join(f"\r\x1b[2K{percent}% [{'#' * (percent // 2)}]" for percent in range(100)) * 200 + "\n"
    started = time.perf_counter()
    stripped = strip_ansi(text)
    elapsed = time.perf_counter() - started
    assert stripped == f"99% [{'#' * 49}]\n"
    assert elapsed < 2.0, f"took {elapsed:.2f}s"


# The newest plain text within a byte limit (the Agent Client Protocol's terminal/output)


def test_newest_plain_text_renders_and_joins_lines_with_newlines() -> None:
    """Colours go, a redrawn line shows its final state, and PTY line ends become \n."""
    assert newest_plain_text("\x1b[31mred\x1b[0m\r\n10%\r50%\rdone\r\n", 1000) == ("red\ndone\n", False)


def test_newest_plain_text_keeps_the_newest_whole_characters() -> None:
    """Past the limit the oldest text goes; a character the cut would split is left out whole."""
    text, cut = newest_plain_text("a" + "\u20ac" * 20, 10)
    assert (text, cut) == ("\u20ac" * 3, True)


def test_newest_plain_text_counts_the_bytes_it_returns_not_the_escapes() -> None:
    """Escape sequences do not use up the limit: it applies to the text returned."""
    coloured = "".join(f"\x1b[3{digit % 8}m{digit}\x1b[0m" for digit in range(10))
    assert newest_plain_text(coloured, 10) == ("0123456789", False)


def test_newest_plain_text_cuts_padding_a_column_move_added() -> None:
    """A move to a far column lengthens the line; the limit still holds afterwards."""
    text, cut = newest_plain_text("x\x1b[500Gy", 100)
    assert cut is True
    assert len(text.encode()) == 100
    assert text.endswith(" y")
