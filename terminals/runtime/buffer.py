"""Terminal output kept in memory, bounded in bytes and lines, addressed by absolute line and byte numbers."""

from __future__ import annotations

import math
import sys
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from dataclasses import dataclass

MODES = ("full", "head", "tail", "head-tail")
NEWLINE = 0x0A
# Output arrives in chunks of a few KiB (one PTY read) to about a MiB (pipe reads batched per wakeup). A chunk is
# copied onto the newest one when both fit in a block of this size, so any two neighbours hold more than a block: a
# buffer of 5 MiB is at most 162 chunks however small the reads, and a search over it makes that many C calls.
BLOCK = 64 << 10


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


def _nth_newline_in(chunk: bytes | bytearray, n: int, count: int) -> int:
    """The offset of chunk's newline number n (from 0) of count, searched for from the nearer end."""
    if n < count - n:
        found = chunk.find(b"\n")
        for _ in range(n):
            found = chunk.find(b"\n", found + 1)
        return found
    found = chunk.rfind(b"\n")
    for _ in range(count - 1 - n):
        found = chunk.rfind(b"\n", 0, found)
    return found


class ChunkRing:
    """Bytes kept as a list of chunks, read like one bytearray: len, indexing, slicing (to bytes) and newline
    searches, at positions counted from the oldest byte held.

    A bytearray that drops its front moves every byte it keeps (at once, or at its next growth); here dropping the
    front drops whole chunks and slices at most one. Appending keeps a big chunk as it came and copies a small one
    into the newest chunk, a bytearray while its block fills (copied once more into bytes when it is done); every
    other chunk is bytes and never changes. Each chunk's newlines are counted once, on arrival, so dropping chunks
    and counting lines over whole chunks scan nothing.
    """

    def __init__(self) -> None:
        # Parallel lists, not deques: reads bisect the starts and index the chunks, and dropping from the front of
        # a list moves a few hundred pointers, never the bytes.
        self._chunks: list[bytes | bytearray] = []
        self._starts: list[int] = []  # where each chunk starts, counted from the first byte ever appended here
        self._newlines: list[int] = []  # how many newlines each chunk holds
        self._dropped = 0  # bytes dropped from the front: where self._chunks[0] starts
        self._length = 0
        self.newlines = 0  # newlines held

    def __len__(self) -> int:
        return self._length

    def __sizeof__(self) -> int:
        """The memory held, chunks and their bookkeeping included, so that sys.getsizeof shows what a buffer costs."""
        lists = (self._chunks, self._starts, self._newlines)
        return object.__sizeof__(self) + sum(sys.getsizeof(items) + sum(map(sys.getsizeof, items)) for items in lists)

    def append(self, chunk: bytes, newlines: int | None = None) -> None:
        """Adds chunk (bytes: it is kept, not copied, unless it merges into the newest chunk); newlines is
        chunk.count(b"\\n") when the caller has counted them already."""
        if not chunk:
            return
        if newlines is None:
            newlines = chunk.count(b"\n")
        chunks = self._chunks
        if chunks and len(chunks[-1]) + len(chunk) <= BLOCK:
            newest = chunks[-1]
            if type(newest) is bytes:
                newest = chunks[-1] = bytearray(newest)
            newest += chunk
            self._newlines[-1] += newlines
        else:
            self._seal_newest()
            chunks.append(chunk)
            self._starts.append(self._dropped + self._length)
            self._newlines.append(newlines)
        self._length += len(chunk)
        self.newlines += newlines

    def _seal_newest(self) -> None:
        # A filled block becomes bytes: exactly its size in memory (a grown bytearray keeps up to an eighth more),
        # and safe to hand out without a copy.
        if self._chunks and type(self._chunks[-1]) is bytearray:
            self._chunks[-1] = bytes(self._chunks[-1])

    def drop_front(self, count: int) -> int:
        """Forgets the oldest count bytes and returns how many newlines went with them: the chunks they fill go,
        and the chunk cut in two keeps its newer part."""
        count = min(count, self._length)
        if count <= 0:
            return 0
        held_before = self.newlines
        self._dropped += count
        self._length -= count
        gone = bisect_right(self._starts, self._dropped) - 1  # chunks wholly before the new oldest byte
        if not self._length:
            gone = len(self._chunks)
        self.newlines -= sum(self._newlines[:gone])
        del self._chunks[:gone], self._starts[:gone], self._newlines[:gone]
        if self._chunks and self._dropped > self._starts[0]:
            self._trim_first(self._dropped - self._starts[0])
        return held_before - self.newlines

    def _trim_first(self, cut: int) -> None:
        """Drops the first cut bytes of the oldest chunk."""
        chunk = self._chunks[0]
        # Count on the shorter side of the cut.
        if cut <= len(chunk) // 2:
            dropped = chunk.count(b"\n", 0, cut)
        else:
            dropped = self._newlines[0] - chunk.count(b"\n", cut)
        # A copy of the rest of this one chunk, so that the dropped part is freed now.
        self._chunks[0] = chunk[cut:]
        self._starts[0] += cut
        self._newlines[0] -= dropped
        self.newlines -= dropped

    # Reading

    def __getitem__(self, key: int | slice) -> int | bytes:
        """A byte, or a copy of a range as bytes (only that range is copied)."""
        if isinstance(key, slice):
            start, stop, step = key.indices(self._length)
            if step != 1:
                raise ValueError("a ChunkRing slice has no step")
            return self.copy(start, stop)
        position = key + self._length if key < 0 else key
        if not 0 <= position < self._length:
            raise IndexError("ChunkRing index out of range")
        index, offset = self._locate(position)
        return self._chunks[index][offset]

    def copy(self, start: int, stop: int) -> bytes:
        """The bytes in [start, stop), for 0 <= start <= stop <= len(self): self[start:stop] without its checks."""
        if stop <= start:
            return b""
        index, lo = self._locate(start)
        chunk = self._chunks[index]
        hi = lo + stop - start
        if hi <= len(chunk):  # within one chunk, as most lines are
            return chunk[lo:hi] if type(chunk) is bytes else bytes(memoryview(chunk)[lo:hi])
        chunks = self._chunks
        return b"".join([memoryview(chunks[index])[lo:hi] for index, lo, hi, _ in self._pieces(start, stop)])

    def count_newlines(self, start: int, stop: int) -> int:
        """How many newlines [start, stop) holds (those of whole chunks were counted on arrival)."""
        total = 0
        for index, lo, hi, _ in self._pieces(start, stop):
            chunk = self._chunks[index]
            total += self._newlines[index] if lo == 0 and hi == len(chunk) else chunk.count(b"\n", lo, hi)
        return total

    def find_newline(self, start: int, stop: int | None = None) -> int:
        """The position of the first newline in [start, stop), or -1."""
        for index, lo, hi, base in self._pieces(start, self._length if stop is None else stop):
            found = self._chunks[index].find(b"\n", lo, hi)
            if found >= 0:
                return base + found
        return -1

    def newline_positions(self, start: int, origin: int = 0) -> list[int]:
        """The positions of the newlines at or after start, each plus origin (what the caller numbers byte 0)."""
        positions = []
        for index, lo, hi, base in self._pieces(start, self._length):
            chunk, base = self._chunks[index], origin + base
            found = chunk.find(b"\n", lo, hi)
            while found >= 0:
                positions.append(base + found)
                found = chunk.find(b"\n", found + 1, hi)
        return positions

    def nth_newline(self, n: int) -> int:
        """The position of the newline with n newlines held before it: chunks are skipped by their counts, from
        whichever end is nearer, and only the chunk that holds it is searched."""
        if not 0 <= n < self.newlines:
            raise IndexError("ChunkRing has no such newline")
        counts = self._newlines
        if n < self.newlines - n:
            index = 0
            while n >= counts[index]:
                n -= counts[index]
                index += 1
        else:
            index, after = len(counts) - 1, self.newlines - 1 - n  # after: newlines held after the one wanted
            while after >= counts[index]:
                after -= counts[index]
                index -= 1
            n = counts[index] - 1 - after
        return self._starts[index] - self._dropped + _nth_newline_in(self._chunks[index], n, counts[index])

    def _locate(self, position: int) -> tuple[int, int]:
        """(index of the chunk that holds a position, offset in it), for 0 <= position < len(self)."""
        absolute = self._dropped + position
        index = bisect_right(self._starts, absolute) - 1
        return index, absolute - self._starts[index]

    def _pieces(self, start: int, stop: int) -> Iterator[tuple[int, int, int, int]]:
        """Yields (index, lo, hi, base) for the parts self._chunks[index][lo:hi] that hold [start, stop), base
        being the position of the chunk's first byte; start and stop are clamped like a slice's."""
        start, stop = max(start, 0), min(stop, self._length)
        if stop <= start:
            return
        index, lo = self._locate(start)
        base = start - lo
        while base < stop:
            size = len(self._chunks[index])
            yield index, lo, min(size, stop - base), base
            base += size
            lo = 0
            index += 1


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
