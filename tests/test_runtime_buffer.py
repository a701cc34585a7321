"""OutputBuffer: absolute line numbers, polling with nextReadFrom, read modes, decoding, eviction and byte reads.

The comparison with a reference model over arbitrary output and reads is in test_buffer_properties.py.
"""

from __future__ import annotations

import random
import sys

import pytest

from terminals.runtime.buffer import BufferStats, OutputBuffer

BIG = 1 << 30  # a byte limit that never evicts anything in these tests


def numbered(count: int, *, first: int = 0, ending: bytes = b"\n") -> bytes:
    return b"".join(b"line%d%s" % (number, ending) for number in range(first, first + count))


def names(first: int, last: int) -> list[str]:
    """["line<first>", ..., "line<last>"], both ends included."""
    return [f"line{number}" for number in range(first, last + 1)]


def random_chunks(data: bytes, rnd: random.Random, largest: int) -> list[bytes]:
    """Splits data at random points, which fall inside lines and inside multi-byte characters."""
    chunks, position = [], 0
    while position < len(data):
        size = rnd.randint(1, largest)
        chunks.append(data[position : position + size])
        position += size
    return chunks


def poll(buffer: OutputBuffer, since: int, finished: list[str]) -> tuple[int, list[str]]:
    """Reads from since like a polling client; appends the finished lines to finished.

    Returns the next since and the unfinished line shown (as a list of zero or one line).
    """
    read = buffer.read_lines(since=since)
    assert read.truncated is False
    assert read.lines_evicted == 0
    done = read.next_read_from - since
    assert 0 <= done <= len(read.lines)
    assert len(read.lines) - done <= 1, "only the last line can be unfinished"
    finished.extend(read.lines[:done])
    return read.next_read_from, read.lines[done:]


# Absolute line numbers


def test_buffer_keeps_counting_lines_after_eviction():
    """Line numbers are absolute: evicting old lines does not renumber the newer ones."""
    buffer = OutputBuffer(max_lines=3, max_bytes=BIG)
    buffer.append(numbered(10))

    read = buffer.read_lines()
    assert read.lines == names(7, 9)
    assert read.oldest_line == 7
    assert read.total_lines == 10
    assert read.next_read_from == 10

    buffer.append(numbered(2, first=10))
    assert buffer.read_lines(since=10).lines == names(10, 11)
    assert buffer.read_lines().oldest_line == 9
    assert buffer.read_lines(since=11).lines == ["line11"]


def test_buffer_counts_an_unfinished_last_line():
    """total_lines counts an unfinished last line; finished_lines does not."""
    buffer = OutputBuffer(max_lines=10, max_bytes=BIG)
    buffer.append(b"one\ntwo")
    assert buffer.finished_lines == 1
    assert buffer.total_lines == 2
    buffer.append(b"\n")
    assert buffer.finished_lines == 2
    assert buffer.total_lines == 2


# Polling with next_read_from


def test_buffer_polling_returns_every_finished_line_exactly_once():
    """Polling with since=next_read_from while chunks arrive split anywhere returns each finished line once."""
    text = "".join(f"line {number} é€😀 {'x' * (number % 7)}\r\n" for number in range(300))
    expected = [line.removesuffix("\r") for line in text.split("\n")[:-1]]
    data = text.encode()
    for seed in range(20):
        rnd = random.Random(seed)
        buffer = OutputBuffer(max_lines=100_000, max_bytes=BIG)
        finished: list[str] = []
        since = 0
        for chunk in random_chunks(data, rnd, largest=rnd.choice([1, 3, 17, 200])):
            buffer.append(chunk)
            for _ in range(rnd.randint(0, 2)):
                since, _unfinished = poll(buffer, since, finished)
        since, unfinished = poll(buffer, since, finished)
        assert finished == expected
        assert unfinished == []
        assert since == 300


def test_buffer_polling_with_a_small_read_limit_skips_no_line():
    """When max_lines stops a read early, has_more is true and the next poll continues where it stopped."""
    buffer = OutputBuffer(max_lines=1000, max_bytes=BIG)
    buffer.append(numbered(25))
    seen: list[str] = []
    since = 0
    for _ in range(10):
        read = buffer.read_lines(since=since, max_lines=4)
        seen += read.lines
        since = read.next_read_from
        if read.has_more is False:
            break
    assert seen == names(0, 24)
    assert since == 25


def test_buffer_shows_an_unfinished_line_and_shows_it_again_once_finished():
    """An unfinished last line is shown, next_read_from stays on it, and the finished line is shown again."""
    buffer = OutputBuffer(max_lines=100, max_bytes=BIG)
    buffer.append(b"first\nsec")

    read = buffer.read_lines(since=0)
    assert read.lines == ["first", "sec"]
    assert read.next_read_from == 1
    assert read.has_more is False

    read = buffer.read_lines(since=1)
    assert read.lines == ["sec"]
    assert read.next_read_from == 1

    buffer.append(b"ond\nthi")
    read = buffer.read_lines(since=1)
    assert read.lines == ["second", "thi"]
    assert read.next_read_from == 2


def test_buffer_polling_never_shows_half_a_character():
    """An unfinished line that ends inside a multi-byte character is shown without the broken piece."""
    buffer = OutputBuffer(max_lines=100, max_bytes=BIG)
    buffer.append(b"caf\xc3")
    assert buffer.read_lines(since=0).lines == ["caf"]
    buffer.append(b"\xa9 \xf0\x9f")
    assert buffer.read_lines(since=0).lines == ["café "]
    buffer.append(b"\x98\x80\n")
    read = buffer.read_lines(since=0)
    assert read.lines == ["café 😀"]
    assert read.next_read_from == 1


def test_buffer_polling_after_eviction_reports_the_lost_lines():
    """A poller that fell behind gets truncated=true and lines_evicted counting the lines it missed."""
    buffer = OutputBuffer(max_lines=5, max_bytes=BIG)
    buffer.append(numbered(3))
    since = buffer.read_lines(since=0).next_read_from
    assert since == 3

    buffer.append(numbered(17, first=3))
    read = buffer.read_lines(since=since)
    assert read.truncated is True
    assert read.lines_evicted == 12  # lines 3..14
    assert read.oldest_line == 15
    assert read.lines == names(15, 19)
    assert read.next_read_from == 20


# Modes


@pytest.fixture
def ten_lines() -> OutputBuffer:
    buffer = OutputBuffer(max_lines=1000, max_bytes=BIG)
    buffer.append(numbered(10))
    return buffer


def test_buffer_full_mode_returns_everything_from_since(ten_lines):
    """Full mode returns every line from since when they fit under max_lines."""
    read = ten_lines.read_lines(since=4, mode="full")
    assert read.lines == names(4, 9)
    assert read.lines_shown == 6
    assert read.lines_omitted == 0
    assert read.has_more is False
    assert read.truncated is False
    assert read.next_read_from == 10
    assert read.output == "\n".join(names(4, 9))


def test_buffer_full_mode_stops_at_max_lines(ten_lines):
    """Full mode shows at most max_lines from since; the rest is omitted and has_more is true."""
    read = ten_lines.read_lines(mode="full", max_lines=4)
    assert read.lines == names(0, 3)
    assert read.lines_shown == 4
    assert read.lines_omitted == 6
    assert read.has_more is True
    assert read.truncated is True
    assert read.next_read_from == 4


def test_buffer_head_mode_returns_the_first_lines(ten_lines):
    """Head mode shows the first head_lines lines and continues after them."""
    read = ten_lines.read_lines(mode="head", head_lines=3)
    assert read.lines == names(0, 2)
    assert read.lines_omitted == 7
    assert read.has_more is True
    assert read.truncated is True
    assert read.next_read_from == 3

    assert ten_lines.read_lines(mode="head", head_lines=3, max_lines=2).lines == names(0, 1)
    everything = ten_lines.read_lines(mode="head", head_lines=50)
    assert everything.lines == names(0, 9)
    assert everything.has_more is False
    assert everything.truncated is False


def test_buffer_tail_mode_returns_the_last_lines(ten_lines):
    """Tail mode shows the last tail_lines lines and jumps next_read_from to the end."""
    read = ten_lines.read_lines(mode="tail", tail_lines=3)
    assert read.lines == names(7, 9)
    assert read.lines_shown == 3
    assert read.lines_omitted == 7
    assert read.has_more is False
    assert read.truncated is True
    assert read.next_read_from == 10

    assert ten_lines.read_lines(mode="tail", tail_lines=3, max_lines=2).lines == names(8, 9)
    assert ten_lines.read_lines(since=8, mode="tail", tail_lines=5).lines == names(8, 9)


def test_buffer_tail_mode_includes_an_unfinished_line_and_shows_it_again(ten_lines):
    """In tail mode the unfinished last line is shown, and next_read_from stays on it."""
    ten_lines.append(b"prompt$ ")
    read = ten_lines.read_lines(mode="tail", tail_lines=2)
    assert read.lines == ["line9", "prompt$ "]
    assert read.next_read_from == 10
    assert read.total_lines == 11


def test_buffer_head_tail_mode_marks_the_omitted_middle(ten_lines):
    """Head-tail mode shows both ends with a marker saying how many lines were left out."""
    read = ten_lines.read_lines(mode="head-tail", head_lines=2, tail_lines=3)
    assert read.lines == ["line0", "line1", "... [5 lines omitted] ...", "line7", "line8", "line9"]
    assert read.lines_shown == 5
    assert read.lines_omitted == 5
    assert read.has_more is False
    assert read.truncated is True
    assert read.next_read_from == 10


def test_buffer_head_tail_mode_without_a_gap_has_no_marker(ten_lines):
    """When head and tail cover every line, head-tail mode shows them all without a marker."""
    read = ten_lines.read_lines(mode="head-tail", head_lines=5, tail_lines=5)
    assert read.lines == names(0, 9)
    assert read.lines_omitted == 0
    assert read.truncated is False


def test_buffer_head_tail_mode_respects_max_lines(ten_lines):
    """max_lines caps head first, then tail gets what is left."""
    read = ten_lines.read_lines(mode="head-tail", head_lines=3, tail_lines=3, max_lines=4)
    assert read.lines == ["line0", "line1", "line2", "... [6 lines omitted] ...", "line9"]
    assert read.lines_shown == 4
    assert read.lines_omitted == 6


def test_buffer_rejects_an_unknown_mode(ten_lines):
    """An unknown mode raises ValueError."""
    with pytest.raises(ValueError, match="sideways"):
        ten_lines.read_lines(mode="sideways")


def test_buffer_since_on_evicted_lines_is_truncated():
    """since before the oldest held line reads from the oldest, with truncated and lines_evicted set."""
    buffer = OutputBuffer(max_lines=5, max_bytes=BIG)
    buffer.append(numbered(20))

    read = buffer.read_lines(since=3)
    assert read.truncated is True
    assert read.lines_evicted == 12
    assert read.oldest_line == 15
    assert read.lines == names(15, 19)

    for since in (15, 17):
        read = buffer.read_lines(since=since)
        assert read.truncated is False
        assert read.lines_evicted == 0
    # Without since a read asks for all the output, and some of it is gone.
    read = buffer.read_lines()
    assert read.truncated is True
    assert read.lines_evicted == 0


def test_buffer_since_past_the_end_returns_nothing(ten_lines):
    """since at or past the end returns no lines and no error."""
    for since in (10, 50):
        read = ten_lines.read_lines(since=since)
        assert read.lines == []
        assert read.lines_shown == 0
        assert read.has_more is False
        assert read.truncated is False


# Decoding


def test_buffer_strips_crlf_line_endings():
    """The PTY's "\\r\\n" line ending is stripped; a carriage return inside a line is kept."""
    buffer = OutputBuffer(max_lines=10, max_bytes=BIG)
    buffer.append(b"alpha\r\nbeta\r\n\r\nx\ry\r\nplain\n")
    assert buffer.read_lines().lines == ["alpha", "beta", "", "x\ry", "plain"]


def test_buffer_strips_a_crlf_split_across_appends():
    """A "\\r" and its "\\n" arriving in different chunks still make one line ending."""
    buffer = OutputBuffer(max_lines=10, max_bytes=BIG)
    buffer.append(b"alpha\r")
    buffer.append(b"\nbeta")
    assert buffer.read_lines().lines == ["alpha", "beta"]


def test_buffer_replaces_invalid_bytes():
    """Invalid UTF-8 becomes U+FFFD and never raises, in line reads and in stats."""
    buffer = OutputBuffer(max_lines=10, max_bytes=BIG)
    buffer.append(b"ok\xff\xfe\n\x80bad\n\xc3(\n\xed\xa0\x80\n")
    assert buffer.read_lines().lines == ["ok\ufffd\ufffd", "\ufffdbad", "\ufffd(", "\ufffd\ufffd\ufffd"]
    assert buffer.stats().total_lines == 4
    data, start, truncated = buffer.read_bytes(0, 1000)
    assert data.startswith(b"ok\xff\xfe\n")
    assert (start, truncated) == (0, False)


def test_buffer_never_mangles_a_character_split_across_appends():
    """A multi-byte character cut at any point by two appends decodes to itself."""
    text = "aé€😀z\n"
    data = text.encode()
    for first in range(1, len(data)):
        for second in range(first, len(data)):
            buffer = OutputBuffer(max_lines=10, max_bytes=BIG)
            for chunk in (data[:first], data[first:second], data[second:]):
                buffer.append(chunk)
            assert buffer.read_lines().lines == ["aé€😀z"], (first, second)


# Eviction and memory


def test_buffer_evicts_by_max_lines():
    """Only the newest max_lines finished lines (and an unfinished one) are held."""
    buffer = OutputBuffer(max_lines=4, max_bytes=BIG)
    buffer.append(numbered(100))
    buffer.append(b"partial")
    stats = buffer.stats()
    assert stats.oldest_line == 96
    assert stats.buffer_lines == 5
    assert buffer.read_lines().lines == [*names(96, 99), "partial"]


def test_buffer_evicts_by_max_bytes_and_stays_bounded():
    """Appending far more than max_bytes keeps the data within max_bytes plus the eviction slack."""
    max_bytes = 10_000
    buffer = OutputBuffer(max_lines=1_000_000, max_bytes=max_bytes)
    rnd = random.Random(7)
    appended = 0
    number = 0
    while appended < 5_000_000:
        chunk = b"".join(b"%d:%s\n" % (number + i, b"#" * rnd.randint(0, 300)) for i in range(50))
        number += 50
        buffer.append(chunk)
        appended += len(chunk)
        assert len(buffer._data) <= max_bytes + buffer._slack

    stats = buffer.stats()
    assert stats.total_bytes == appended
    assert stats.oldest_byte > 0
    assert stats.buffer_bytes <= max_bytes + buffer._slack
    read = buffer.read_lines(since=0, max_lines=1_000_000)
    assert read.truncated is True
    assert read.lines_evicted == read.oldest_line > 0
    # Eviction moves to a line start, so every held line is whole.
    numbers = [int(line.split(":")[0]) for line in read.lines]
    assert numbers == list(range(read.oldest_line, number))
    assert all(set(line.split(":")[1]) <= {"#"} for line in read.lines)


def test_buffer_keeps_memory_bounded_for_one_huge_line():
    """10 MB without a newline keeps the data bounded; the line shown is its newest part, marked truncated."""
    max_bytes = 1 << 20
    buffer = OutputBuffer(max_lines=1000, max_bytes=max_bytes)
    block = b"0" * 65536
    for _ in range(160):  # 10 MiB
        buffer.append(block)
        assert len(buffer._data) <= max_bytes + buffer._slack

    read = buffer.read_lines()
    assert read.total_lines == 1
    assert read.next_read_from == 0
    assert read.truncated is True
    assert len(read.lines) == 1
    assert 0 < len(read.lines[0]) <= max_bytes + buffer._slack
    assert set(read.lines[0]) == {"0"}

    buffer.append(b"0" * 10_000_000)  # one append bigger than the whole limit
    assert len(buffer._data) <= max_bytes + buffer._slack
    buffer.append(b"\ndone\n")
    assert buffer.read_lines(since=1).lines == ["done"]


def test_buffer_cut_line_starts_at_a_character_boundary():
    """A line that lost its beginning to eviction does not start with a broken character."""
    buffer = OutputBuffer(max_lines=10, max_bytes=1001)  # odd, so the cut falls inside a two-byte character
    for _ in range(50):
        buffer.append("é".encode() * 500)
    read = buffer.read_lines()
    assert read.truncated is True
    assert read.lines[0] and set(read.lines[0]) == {"é"}


def test_buffer_rejects_non_positive_limits():
    """Limits below one raise ValueError."""
    with pytest.raises(ValueError):
        OutputBuffer(max_lines=0, max_bytes=10)
    with pytest.raises(ValueError):
        OutputBuffer(max_lines=10, max_bytes=0)


# Reading by byte


def test_read_bytes_returns_bytes_from_a_position():
    """read_bytes returns up to max_bytes from from_byte with its start position."""
    buffer = OutputBuffer(max_lines=10, max_bytes=BIG)
    buffer.append(b"hello world")
    assert buffer.read_bytes(0, 5) == (b"hello", 0, False)
    assert buffer.read_bytes(6, 100) == (b"world", 6, False)
    assert buffer.read_bytes(11, 100) == (b"", 11, False)
    assert buffer.read_bytes(99, 100) == (b"", 11, False)


def test_read_bytes_never_splits_a_character():
    """Reading the output in small pieces cuts only between characters and loses nothing."""
    text = "aé€😀" * 40
    buffer = OutputBuffer(max_lines=10, max_bytes=BIG)
    buffer.append(text.encode())
    for limit in range(1, 12):
        pieces, position = [], 0
        while position < buffer.end:
            data, start, truncated = buffer.read_bytes(position, limit)
            assert start == position
            assert truncated is False
            assert data, "a read must always make progress"
            pieces.append(data.decode("utf-8"))  # strict: a split character would raise
            position += len(data)
        assert "".join(pieces) == text


def test_read_bytes_holds_back_a_character_that_has_not_fully_arrived():
    """Output that ends inside a multi-byte character is returned only up to the last whole character."""
    buffer = OutputBuffer(max_lines=10, max_bytes=BIG)
    buffer.append(b"x\xe2\x82")  # the first two bytes of the euro sign
    data, start, _ = buffer.read_bytes(0, 1024)
    assert data == b"x"
    buffer.append(b"\xac")
    data, start, _ = buffer.read_bytes(start + len(data), 1024)
    assert data.decode("utf-8") == "€"


def test_read_bytes_reports_truncated_when_from_byte_was_evicted():
    """A from_byte that was evicted reads from the oldest byte held and reports truncated."""
    buffer = OutputBuffer(max_lines=100_000, max_bytes=1000)
    buffer.append(numbered(2000))
    oldest = buffer.stats().oldest_byte
    assert oldest > 0

    data, start, truncated = buffer.read_bytes(0, 50)
    assert truncated is True
    assert start == oldest
    assert data == buffer.read_bytes(oldest, 50)[0]
    assert buffer.read_bytes(oldest, 50)[2] is False


def test_read_bytes_after_eviction_starts_at_a_character_boundary():
    """When reading restarts at the oldest byte held, it does not start inside a character."""
    buffer = OutputBuffer(max_lines=10, max_bytes=1001)  # odd, so the cut falls inside a two-byte character
    for _ in range(50):
        buffer.append("é".encode() * 500)
    data, start, truncated = buffer.read_bytes(0, 100)
    assert truncated is True
    assert data.decode("utf-8") == "é" * (len(data) // 2)


# Stats


def test_buffer_stats_describe_the_held_output():
    """stats() counts lines and bytes ever seen and those held, with the oldest positions."""
    buffer = OutputBuffer(max_lines=4, max_bytes=BIG)
    assert buffer.stats() == BufferStats(
        total_lines=0, total_bytes=0, buffer_lines=0, buffer_bytes=0, oldest_line=0, newest_line=-1, oldest_byte=0
    )
    buffer.append(numbered(10))  # "line0\n" .. "line9\n": 6 bytes each
    buffer.append(b"tail")
    assert buffer.stats() == BufferStats(
        total_lines=11,
        total_bytes=64,
        buffer_lines=5,
        buffer_bytes=4 * 6 + 4,
        oldest_line=6,
        newest_line=10,
        oldest_byte=36,
    )
    assert buffer.end == 64
    assert buffer.oldest_byte == 36



def test_lines_evicted_by_a_read_give_their_memory_back():
    """Evicting from the front only moves a bytearray's start; a buffer that stopped growing must not keep it."""
    buffer = OutputBuffer(max_lines=10_000, max_bytes=4 << 20)
    output = b"".join(b"%078d\r\n" % number for number in range(12_000))
    for offset in range(0, len(output), 4095):
        buffer.append(output[offset : offset + 4095])
    buffer.read_lines(mode="tail", tail_lines=5)
    held = buffer.stats().buffer_bytes
    assert held == 10_000 * 80
    assert sys.getsizeof(buffer._data) < held * 1.05  # 1.27x before: the 2,000 dropped lines stayed allocated



# Storage in chunks (small appends merged into blocks, big ones kept as they came; eviction drops chunks from the front)


def chunk_sizes(buffer: OutputBuffer) -> list[int]:
    return [len(chunk) for chunk in buffer._data._chunks]


def test_buffer_reads_span_many_chunks():
    """Lines, bytes, text and reads since a time over output held in many chunks of very different sizes."""
    rnd = random.Random(3)
    data = "".join(f"{number} {'é' * (number % 5)}{'x' * rnd.randint(0, 3000)}\r\n" for number in range(2000)).encode()
    buffer = OutputBuffer(max_lines=100_000, max_bytes=BIG)
    arrivals, position = [], 0
    while position < len(data):
        size = rnd.choice([1, 7, 4095, 65536, 200_000])
        buffer.mark_time(float(position))
        arrivals.append(position)
        buffer.append(data[position : position + size])
        position += size
    assert len(chunk_sizes(buffer)) > 20

    expected = [line.removesuffix(b"\r").decode() for line in data.split(b"\n")[:-1]]
    assert buffer.read_lines(since=0, max_lines=100_000).lines == expected
    read = buffer.read_lines(mode="head-tail", head_lines=3, tail_lines=3)
    assert read.lines == [*expected[:3], "... [1994 lines omitted] ...", *expected[-3:]]
    assert buffer.read_bytes(0, BIG) == (data, 0, False)
    for start in rnd.sample(range(len(data)), 50):
        piece, at, truncated = buffer.read_bytes(start, rnd.randint(1, 300_000), complete=True)
        assert (at, truncated) == (start, False)
        assert piece == data[start : start + len(piece)]
    assert buffer.text_between(1000, 500_000) == (data[1000:500_000].decode("utf-8", "replace"), False)
    for when in rnd.sample(range(len(data)), 20):
        first_byte = min(offset for offset in arrivals if offset >= when) if when <= arrivals[-1] else len(data)
        assert buffer.line_since_time(float(when)) == data[:first_byte].count(b"\n")


def test_buffer_evicts_across_chunk_boundaries():
    """Eviction drops whole chunks and cuts the oldest kept one mid-way: what is held is exactly the newest output,
    with the same line numbers, and nothing dropped stays in memory."""
    max_bytes = 300_000
    buffer = OutputBuffer(max_lines=1_000_000, max_bytes=max_bytes)
    data = b"".join(b"%d:%s\n" % (number, b"#" * (number % 97)) for number in range(40_000))
    rnd = random.Random(5)
    position = 0
    while position < len(data):
        chunk = data[position : position + rnd.choice([100, 4095, 65536, 150_000])]
        buffer.append(chunk)
        position += len(chunk)
        stats = buffer.stats()  # a read: from now on at most the newest max_bytes are held
        oldest = stats.oldest_byte
        # Appending may have moved the cut on to a line start (at most 4 KiB further).
        assert max(0, position - max_bytes) <= oldest <= max(0, position - max_bytes + 4096)
        held = data[oldest:position]
        assert buffer.read_bytes(oldest, BIG, complete=True) == (held, oldest, False)
        assert sum(chunk_sizes(buffer)) == stats.buffer_bytes == len(held)
        assert stats.oldest_line == data[:oldest].count(b"\n")
        assert stats.total_lines == data[:position].count(b"\n") + (data[position - 1] != 0x0A)
        assert buffer.read_lines(since=stats.oldest_line + 1, max_lines=3).lines == [
            line.decode() for line in held.split(b"\n")[1:4]
        ]
    assert len(chunk_sizes(buffer)) > 3
    assert sys.getsizeof(buffer._data) < max_bytes * 1.05


def test_buffer_cuts_one_huge_chunk_down_to_what_it_holds():
    """An append far bigger than the limit is kept as one chunk, cut down to the newest bytes, and the rest freed."""
    buffer = OutputBuffer(max_lines=10, max_bytes=1 << 20)
    huge = b"0123456789abcdef" * 625_000  # 10 MB without a newline
    buffer.append(huge)
    assert buffer.read_bytes(0, BIG, complete=True) == (huge[-(1 << 20) :], len(huge) - (1 << 20), True)
    assert chunk_sizes(buffer) == [1 << 20]
    assert sys.getsizeof(buffer._data) < (1 << 20) * 1.01
    buffer.append(b"\nend\n")
    assert buffer.read_lines(since=1).lines == ["end"]
    assert buffer.stats().oldest_line == 0


def test_a_restarted_buffer_holds_and_reads_only_what_came_after():
    """restart_at empties the buffer (the live feed's copy does it when a burst outran the terminal's own buffer):
    its lines, as well as its bytes, start again, with the line count going on. Before, it kept the line count of
    what it had emptied and a line read failed with an IndexError."""
    buffer = OutputBuffer(max_lines=3, max_bytes=1000)
    buffer.append(b"a\nb\nc\n")
    buffer.restart_at(100)
    buffer.append(b"x\ny\n")
    assert buffer.read_lines(since=None, mode="full", max_lines=10).lines == ["x", "y"]
    assert buffer.stats() == BufferStats(total_lines=5, total_bytes=104, buffer_lines=2, buffer_bytes=4,
                                         oldest_line=3, newest_line=4, oldest_byte=100)
    buffer.append(b"z\nw\n")  # past max_lines: the oldest new line goes
    assert buffer.read_lines(since=None, mode="full", max_lines=10).lines == ["y", "z", "w"]
    assert buffer.read_bytes(0, 100, complete=True) == (b"y\nz\nw\n", 102, True)
