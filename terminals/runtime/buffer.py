"""Terminal output kept in memory, bounded in bytes and lines, addressed by absolute line and byte numbers."""

from __future__ import annotations

from array import array
from bisect import bisect_left
from dataclasses import dataclass

from .chunk_ring import NEWLINE, ChunkRing
from .line_reads import MODES, LineRead, choose_lines
from .utf8 import decode, is_continuation, sequence_length, skip_continuation_bytes, utf8_boundary


@dataclass(frozen=True)
class BufferStats:
    total_lines: int
    total_bytes: int
    buffer_lines: int
    buffer_bytes: int
    oldest_line: int
    newest_line: int
    oldest_byte: int


class OutputBuffer:
    """Keeps the newest output of one terminal.

    Appending only counts newlines; the positions of lines are indexed when a
    read needs them, so a flood costs at most a memcpy and a memchr per chunk,
    not Python work per line. Lines and bytes carry absolute numbers that keep
    counting after the oldest ones are evicted. The bytes are a ChunkRing, so
    eviction drops old chunks instead of moving the bytes kept.
    """

    def __init__(self, *, max_lines: int, max_bytes: int) -> None:
        if max_lines < 1 or max_bytes < 1:
            raise ValueError("buffer limits must be positive")
        self.max_lines = max_lines
        self.max_bytes = max_bytes
        self.copy_to: OutputBuffer | None = None  # another buffer that gets every appended byte too
        # Appending evicts once the buffer is this far over its limit. With a bytearray this amortised the copy
        # of the bytes kept that every eviction cost; with chunks an eviction copies at most one chunk, but the
        # slack stays so that appending cuts where it did (at a line start, once per slack) and readers see the same.
        self._slack = max(4096, max_bytes // 4)
        self._data = ChunkRing()
        self._start = 0  # absolute byte number of self._data[0]
        self._first_line = 0  # absolute number of the line that holds self._data[0]
        self._head_cut = False  # the first line lost its beginning to eviction
        self._newlines = 0  # newlines ever appended = finished lines ever
        self._index = array("q")  # absolute offsets of the newlines in [self._start, self._indexed_end)
        self._indexed_end = 0
        # (when, first byte then), one per arrival of output. A list: an empty deque already holds a block of 64
        # slots, in every terminal; marks leave from the front in runs, as eviction passes them.
        self._times: list[tuple[float, int]] = []

    @property
    def slack(self) -> int:
        """How far past max_bytes the buffer grows before it evicts: it holds at most max_bytes + slack."""
        return self._slack

    def mark_time(self, when: float) -> None:
        """Notes when the output about to be appended arrived (for reads since a time)."""
        if self._times and self._times[-1][1] == self.end:
            self._times[-1] = (when, self.end)  # nothing arrived since the last mark: what comes next arrives now
            return
        self._times.append((when, self.end))
        passed = 0
        while passed + 1 < len(self._times) and self._times[passed + 1][1] <= self._start:
            passed += 1
        if passed:
            del self._times[:passed]

    def line_since_time(self, when: float) -> int:
        """The number of the first held line with output that arrived at or after when."""
        self._apply_limits()
        position = bisect_left(self._times, when, key=lambda mark: mark[0])
        offset = self._times[position][1] if position < len(self._times) else self.end
        offset = max(offset, self._start)
        return self._first_line + self._data.count_newlines(0, offset - self._start)

    # Writing

    def restart_at(self, offset: int) -> None:
        """Empties the buffer and numbers the next byte offset (a copy of another buffer's output)."""
        self._data = ChunkRing()
        self._start = self._indexed_end = offset
        self._first_line = self._newlines  # the lines before are gone; their count goes on
        self._index = array("q")
        self._times.clear()
        self._head_cut = False

    def resume(self, offset: int, newlines_before: int, data: bytes) -> None:
        """Continues the buffer another process kept (an adoption, adoption.py): data is its bytes from offset on,
        after newlines_before finished lines. The first line may have lost its beginning before offset."""
        self._newlines = newlines_before
        self.restart_at(offset)
        self._head_cut = offset > 0
        self.append(data)

    def append(self, chunk: bytes) -> None:
        if not chunk:
            return
        if type(chunk) is not bytes:
            chunk = bytes(chunk)  # the chunk is kept as it is: it must not change afterwards
        if self.copy_to is not None:
            # Before eviction: a burst longer than this buffer's line limit still reaches the copy whole.
            self.copy_to.append(chunk)
        newlines = chunk.count(b"\n")
        self._data.append(chunk, newlines)
        self._newlines += newlines
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
        runs = [shown[:gap_at], shown[gap_at:]] if gap else [shown]  # the offsets shown are one or two runs
        lines = [text for run in runs if run for text in self._line_texts(start + run[0], len(run))]
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

    def _line_texts(self, first: int, count: int) -> list[str]:
        """The texts of count held lines from line number first on."""
        # One copy out of the chunks for them all, then each line is a slice of it.
        begin, end = self._line_span(first)[0], self._line_span(first + count - 1)[1]
        span = self._data.copy(begin - self._start, end - self._start)
        texts = []
        for number in range(first, first + count):
            line_begin, line_end, finished = self._line_span(number)
            raw = span[line_begin - begin : line_end - begin]
            if finished and raw.endswith(b"\r"):
                raw = raw[:-1]  # the PTY ends lines with \r\n
            texts.append(decode(raw, at_start=number == self._first_line and self._head_cut, at_end=not finished))
        return texts

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
            local_start = skip_continuation_bytes(self._data, local_start, len(self._data))
        local_stop = min(local_start + max_bytes, len(self._data))
        if local_stop < len(self._data) or not complete:
            cut = utf8_boundary(self._data, local_start, local_stop)
            if cut == local_start and local_stop < len(self._data):
                # A limit smaller than one character still returns that character, so a reader never stalls,
                # but only once it has arrived: its bytes, or a byte that breaks it off, or no more can come.
                length = sequence_length(self._data[local_start])
                cut = local_start + 1
                while cut < min(local_start + length, len(self._data)) and is_continuation(self._data[cut]):
                    cut += 1
                if cut == len(self._data) and cut - local_start < length and not complete:
                    cut = local_start
            local_stop = cut
        return self._data[local_start:local_stop], self._start + local_start, truncated

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
        return len(self._data) > 0 and self._data[-1] != NEWLINE

    def _apply_limits(self) -> None:
        """Makes the oldest held byte the oldest readable one: every read calls this first, so all readers agree.

        Appending evicts only once the buffer is well over its byte limit (see _slack), so it may hold more than
        the limit; a read never sees more than the newest max_bytes bytes and max_lines finished lines.
        """
        excess = (self._newlines - self._first_line) - self.max_lines
        if excess > 0:
            self._evict_to(self._start_of_line(self._first_line + excess), whole_lines=False)
        if len(self._data) > self.max_bytes:
            # Exactly the newest max_bytes: readers skip what is left of a character cut in two (_head_cut).
            self._evict_to(self.end - self.max_bytes, whole_lines=False)

    def _start_of_line(self, number: int) -> int:
        """Absolute start of a held line after the first: it follows newline number skip - 1 of those held."""
        skip = number - self._first_line
        if skip <= len(self._index):
            return self._index[skip - 1] + 1
        return self._start + self._data.nth_newline(skip - 1) + 1

    def _evict_to(self, cut: int, *, whole_lines: bool) -> None:
        """Drops every byte before the absolute offset cut (moved to a line start when one is near)."""
        local = cut - self._start
        if local <= 0:
            return
        if whole_lines:
            newline = self._data.find_newline(local - 1, local + 4096)
            local = local if newline < 0 else newline + 1
        self._head_cut = self._data[local - 1] != NEWLINE
        self._first_line += self._data.drop_front(local)
        self._start += local
        del self._index[: bisect_left(self._index, self._start)]
        self._indexed_end = max(self._indexed_end, self._start)

    def _index_new_lines(self) -> None:
        self._index.extend(self._data.newline_positions(self._indexed_end - self._start, origin=self._start))
        self._indexed_end = self.end
