"""Bytes kept as a list of chunks and read like one bytearray: the store under a terminal's output buffer."""

from __future__ import annotations

import sys
from bisect import bisect_right
from collections.abc import Iterator

NEWLINE = 0x0A
# Output arrives in chunks of a few KiB (one PTY read) to about a MiB (pipe reads batched per wakeup). A chunk is
# copied onto the newest one when both fit in a block of this size, so any two neighbours hold more than a block: a
# buffer of 5 MiB is at most 162 chunks however small the reads, and a search over it makes that many C calls.
BLOCK = 64 << 10


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
