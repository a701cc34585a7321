"""Terminal output kept in memory, bounded in bytes and lines, addressed by absolute line and byte numbers."""

from __future__ import annotations

import math
from array import array
from bisect import bisect_left
from collections import deque
from dataclasses import dataclass

MODES = ("full", "head", "tail", "head-tail")
NEWLINE = 0x0A


@dataclass(frozen=True)
class LineRead:
    """One slice of output by line number, as the output endpoint returns it."""

    lines: list[str]  # with a "... [N lines omitted] ..." marker in head-tail mode
    lines_shown: int
    total_lines: int
    next_read_from: int
    has_more: bool
    truncated: bool
    lines_omitted: int
    lines_evicted: int
    oldest_line: int

    @property
    def output(self) -> str:
        return "\n".join(self.lines)


@dataclass(frozen=True)
class BufferStats:
    total_lines: int
    total_bytes: int
    buffer_lines: int
    buffer_bytes: int
    oldest_line: int
    newest_line: int
    oldest_byte: int


def estimate_tokens(text: str) -> int:
    """About four characters make a token, as the REST contract says."""
    return math.ceil(len(text) / 4)


def decode(data: bytes | bytearray, *, at_start: bool = False, at_end: bool = False) -> str:
    """Decodes terminal bytes, replacing invalid ones.

    A slice that starts or ends inside a multi-byte character drops the broken
    piece instead of turning it into replacement characters: at_start drops
    leading continuation bytes, at_end drops an unfinished trailing sequence.
    """
    start, end = 0, len(data)
    if at_start:
        start = _skip_continuation_bytes(data, start, end)
    if at_end:
        end = utf8_boundary(data, start, end)
    return bytes(data[start:end]).decode("utf-8", errors="replace")


def utf8_boundary(data: bytes | bytearray, start: int, end: int) -> int:
    """Returns the largest cut <= end that does not split a UTF-8 character."""
    cut = end
    # A character is at most 4 bytes, so at most 3 bytes can belong to an unfinished one.
    while cut > start and end - cut < 4 and _is_continuation(data[cut - 1]):
        cut -= 1
    if cut > start and end - cut < 4:
        lead = data[cut - 1]
        if lead >= 0xC0 and _sequence_length(lead) > end - cut + 1:
            return cut - 1
    return end


def _skip_continuation_bytes(data: bytes | bytearray, start: int, end: int) -> int:
    limit = min(end, start + 3)
    while start < limit and _is_continuation(data[start]):
        start += 1
    return start


def _is_continuation(byte: int) -> bool:
    return 0x80 <= byte < 0xC0


def _sequence_length(lead: int) -> int:
    if lead < 0xC0:
        return 1
    if lead >= 0xF0:
        return 4
    if lead >= 0xE0:
        return 3
    return 2


def choose_lines(mode: str, count: int, head: int, tail: int, limit: int) -> tuple[list[int], int, int]:
    """Picks which of count lines a read shows: (offsets shown, where a head-tail gap marker goes, lines in the gap)."""
    if mode == "full":
        return list(range(min(count, limit))), 0, 0
    if mode == "head":
        return list(range(min(count, head, limit))), 0, 0
    if mode == "tail":
        keep = min(count, tail, limit)
        return list(range(count - keep, count)), 0, 0
    head = min(head, limit)
    tail = min(tail, limit - head)
    if count <= head + tail:
        return list(range(count)), 0, 0
    return list(range(head)) + list(range(count - tail, count)), head, count - head - tail


def shape_lines(lines: list[str], mode: str, head: int, tail: int, limit: int) -> tuple[list[str], int, int]:
    """Applies a read mode to a list of lines: (lines to show with any gap marker, lines shown, lines omitted)."""
    shown, gap_at, gap = choose_lines(mode, len(lines), head, tail, limit)
    result = [lines[offset] for offset in shown]
    if gap:
        result.insert(gap_at, f"... [{gap} lines omitted] ...")
    return result, len(shown), len(lines) - len(shown)


class OutputBuffer:
    """Keeps the newest output of one terminal.

    Appending only counts newlines; the positions of lines are indexed when a
    read needs them, so a flood costs a memcpy and a memchr per chunk, not
    Python work per line. Lines and bytes carry absolute numbers that keep
    counting after the oldest ones are evicted.
    """

    def __init__(self, *, max_lines: int, max_bytes: int) -> None:
        if max_lines < 1 or max_bytes < 1:
            raise ValueError("buffer limits must be positive")
        self.max_lines = max_lines
        self.max_bytes = max_bytes
        self.copy_to: OutputBuffer | None = None  # another buffer that gets every appended byte too
        # Eviction runs once the buffer is this far over its limit, so its cost is amortised: each one moves
        # the bytes kept (and the next append that grows the bytearray moves them again), so a slack of an
        # eighth copied 8-16 bytes per byte of a line-less flood. A quarter: /dev/zero ingest 57-73 -> 86-93 MB/s.
        self._slack = max(4096, max_bytes // 4)
        self._data = bytearray()
        self._front_dropped = 0  # bytes evicted since self._data was last allocated anew
        self._start = 0  # absolute byte number of self._data[0]
        self._first_line = 0  # absolute number of the line that holds self._data[0]
        self._head_cut = False  # the first line lost its beginning to eviction
        self._newlines = 0  # newlines ever appended = finished lines ever
        self._index = array("q")  # absolute offsets of the newlines in [self._start, self._indexed_end)
        self._indexed_end = 0
        self._times: deque[tuple[float, int]] = deque()  # (when, first byte then), one per arrival of output

    def mark_time(self, when: float) -> None:
        """Notes when the output about to be appended arrived (for reads since a time)."""
        if self._times and self._times[-1][1] == self.end:
            self._times[-1] = (when, self.end)  # nothing arrived since the last mark: what comes next arrives now
            return
        self._times.append((when, self.end))
        while len(self._times) > 1 and self._times[1][1] <= self._start:
            self._times.popleft()

    def line_since_time(self, when: float) -> int:
        """The number of the first held line with output that arrived at or after when."""
        self._apply_limits()
        position = bisect_left(self._times, when, key=lambda mark: mark[0])
        offset = self._times[position][1] if position < len(self._times) else self.end
        offset = max(offset, self._start)
        return self._first_line + self._data.count(b"\n", 0, offset - self._start)

    # Writing

    def restart_at(self, offset: int) -> None:
        """Empties the buffer and numbers the next byte offset (a copy of another buffer's output)."""
        self._data = bytearray()
        self._front_dropped = 0
        self._start = self._indexed_end = offset
        self._index = array("q")
        self._times.clear()
        self._head_cut = False

    def append(self, chunk: bytes) -> None:
        if not chunk:
            return
        if self.copy_to is not None:
            # Before eviction: a burst longer than this buffer's line limit still reaches the copy whole.
            self.copy_to.append(chunk)
        self._data += chunk
        self._newlines += chunk.count(b"\n")
        if len(self._data) > self.max_bytes + self._slack:
            self._evict_to(self.end - self.max_bytes, whole_lines=True)

    # Positions

    @property
    def end(self) -> int:
        """Absolute number of the next byte to arrive = bytes ever appended."""
        return self._start + len(self._data)

    @property
    def oldest_byte(self) -> int:
        self._apply_limits()
        return self._start

    @property
    def finished_lines(self) -> int:
        return self._newlines

    @property
    def total_lines(self) -> int:
        """Lines ever seen, counting an unfinished last line."""
        return self._newlines + (1 if self._has_partial_line() else 0)

    def stats(self) -> BufferStats:
        self._apply_limits()
        total = self.total_lines
        return BufferStats(
            total_lines=total,
            total_bytes=self.end,
            buffer_lines=total - self._first_line,
            buffer_bytes=len(self._data),
            oldest_line=self._first_line,
            newest_line=total - 1,
            oldest_byte=self._start,
        )

    # Reading by line

    def read_lines(
        self,
        *,
        since: int | None = None,
        mode: str = "full",
        head_lines: int = 50,
        tail_lines: int = 50,
        max_lines: int = 1000,
    ) -> LineRead:
        """Returns a slice of lines from `since` (default: the oldest held), shaped by `mode`.

        next_read_from only ever passes finished lines, so polling with it
        returns every finished line once; an unfinished last line is shown
        and shown again once it is finished.
        """
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}")
        self._apply_limits()
        self._index_new_lines()
        oldest, finished_end, total = self._first_line, self._newlines, self.total_lines
        requested = oldest if since is None else since
        evicted = max(0, oldest - requested)
        start = min(max(requested, oldest), total)
        count = total - start
        shown, gap_at, gap = choose_lines(mode, count, head_lines, tail_lines, max_lines)
        lines = [self._line_text(start + offset) for offset in shown]
        if gap:
            lines.insert(gap_at, f"... [{gap} lines omitted] ...")
        if mode in ("tail", "head-tail"):
            next_read_from = finished_end
        else:
            next_read_from = min(start + len(shown), finished_end)
        omitted = count - len(shown)
        cut_first = self._head_cut and start == oldest and bool(shown) and shown[0] == 0
        # A read without since asks for all the output: it is incomplete once any was dropped.
        dropped = since is None and self._start > 0
        return LineRead(
            lines=lines,
            lines_shown=len(shown),
            total_lines=total,
            next_read_from=next_read_from,
            has_more=next_read_from < finished_end,
            truncated=evicted > 0 or omitted > 0 or cut_first or dropped,
            lines_omitted=omitted,
            lines_evicted=evicted,
            oldest_line=oldest,
        )

    def _line_text(self, number: int) -> str:
        begin, end, finished = self._line_span(number)
        data = self._data
        first = number == self._first_line
        if finished and end > begin and data[end - 1 - self._start] == 0x0D:
            end -= 1  # the PTY ends lines with \r\n
        return decode(
            memoryview(data)[begin - self._start : end - self._start],
            at_start=first and self._head_cut,
            at_end=not finished,
        )

    def _line_span(self, number: int) -> tuple[int, int, bool]:
        """Returns (start byte, end byte, finished) of a held line; end excludes the newline."""
        i = number - self._first_line
        begin = self._start if i == 0 else self._index[i - 1] + 1
        if i < len(self._index):
            return begin, self._index[i], True
        return begin, self.end, False

    # Reading by byte

    def read_bytes(self, from_byte: int, max_bytes: int, *, complete: bool = False) -> tuple[bytes, int, bool]:
        """Returns (data, start, truncated): up to max_bytes from from_byte, never split inside a character.

        truncated is true when from_byte was already evicted and reading
        started at the oldest byte held. Unless complete (no more output can
        arrive), a character whose last bytes have not arrived yet is held
        back for the next read.
        """
        self._apply_limits()
        truncated = from_byte < self._start
        start = min(max(from_byte, self._start), self.end)
        local_start = start - self._start
        if truncated or (self._head_cut and local_start == 0):
            # Eviction may have cut a character in two: start at the next whole one (only there, so that a
            # reader polling from where it left off never loses a byte).
            local_start = _skip_continuation_bytes(self._data, local_start, len(self._data))
        local_stop = min(local_start + max_bytes, len(self._data))
        if local_stop < len(self._data) or not complete:
            cut = utf8_boundary(self._data, local_start, local_stop)
            if cut == local_start and local_stop < len(self._data):
                # A limit smaller than one character still returns that character, so a reader never stalls,
                # but only once it has arrived: its bytes, or a byte that breaks it off, or no more can come.
                length = _sequence_length(self._data[local_start])
                cut = local_start + 1
                while cut < min(local_start + length, len(self._data)) and _is_continuation(self._data[cut]):
                    cut += 1
                if cut == len(self._data) and cut - local_start < length and not complete:
                    cut = local_start
            local_stop = cut
        return bytes(self._data[local_start:local_stop]), self._start + local_start, truncated

    def text_between(self, start: int, end: int | None) -> tuple[str, bool]:
        """Decodes the bytes from start to end (None: to the newest); truncated when some were evicted."""
        self._apply_limits()
        stop = self.end if end is None else min(end, self.end)
        truncated = start < self._start
        local_start, local_stop = max(start, self._start) - self._start, max(stop - self._start, 0)
        if local_stop <= local_start:
            return "", truncated
        return decode(self._data[local_start:local_stop], at_start=truncated, at_end=end is None), truncated

    # Eviction and indexing

    def _has_partial_line(self) -> bool:
        return bool(self._data) and self._data[-1] != NEWLINE

    def _apply_limits(self) -> None:
        """Makes the oldest held byte the oldest readable one: every read calls this first, so all readers agree.

        Appending evicts only once the buffer is well over its byte limit (see _slack), so it may hold more than
        the limit; a read never sees more than the newest max_bytes bytes and max_lines finished lines.
        """
        excess = (self._newlines - self._first_line) - self.max_lines
        if excess > 0:
            self._evict_to(self._start_of_line(self._first_line + excess), whole_lines=False)
            self._compact()
        if len(self._data) > self.max_bytes:
            # Exactly the newest max_bytes: readers skip what is left of a character cut in two (_head_cut). No
            # _compact: this drops at most the slack, which the memory bound already counts, and copying here
            # would copy the whole buffer every few reads of a flood.
            self._evict_to(self.end - self.max_bytes, whole_lines=False)

    def _compact(self) -> None:
        # Dropping bytes from the front frees no memory: CPython only moves the bytearray's start. A terminal
        # that stopped after a burst would keep that space for good (50 full 10,000-line buffers: 51 MB
        # allocated for 40 MB of output). Reads evict lines a few at a time, so copy only once an eighth of
        # what is held has been dropped since the last copy.
        if self._front_dropped > max(4096, len(self._data) // 8):
            self._data = bytearray(self._data)
            self._front_dropped = 0

    def _start_of_line(self, number: int) -> int:
        """Absolute start of a held line, scanning from whichever end of the buffer is nearer."""
        index_count = len(self._index)
        skip = number - self._first_line
        if skip <= index_count:
            return self._index[skip - 1] + 1
        keep = self._newlines - number  # newlines after the start of that line
        if skip <= keep:
            return self._scan_forward(skip)
        return self._scan_backward(keep)

    def _scan_forward(self, newlines: int) -> int:
        position = -1
        for _ in range(newlines):
            position = self._data.index(b"\n", position + 1)
        return self._start + position + 1

    def _scan_backward(self, newlines: int) -> int:
        position = len(self._data)
        for _ in range(newlines + 1):
            position = self._data.rindex(b"\n", 0, position)
        return self._start + position + 1

    def _evict_to(self, cut: int, *, whole_lines: bool) -> None:
        """Drops every byte before the absolute offset cut (moved to a line start when one is near)."""
        local = cut - self._start
        if local <= 0:
            return
        if whole_lines:
            newline = self._data.find(b"\n", local - 1, local + 4096)
            local = local if newline < 0 else newline + 1
        self._head_cut = self._data[local - 1] != NEWLINE
        self._first_line += self._data.count(b"\n", 0, local)
        del self._data[:local]
        self._front_dropped += local
        self._start += local
        del self._index[: bisect_left(self._index, self._start)]
        self._indexed_end = max(self._indexed_end, self._start)

    def _index_new_lines(self) -> None:
        data, index, base = self._data, self._index, self._start
        position = data.find(b"\n", self._indexed_end - base)
        while position >= 0:
            index.append(base + position)
            position = data.find(b"\n", position + 1)
        self._indexed_end = self.end
