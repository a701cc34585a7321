"""A terminal's newest output in memory that outlives the process that wrote it: a memfd another process holds.

The worker writes every byte it keeps for a terminal here before its own buffer gets it, so that when the worker
is killed (SIGKILL, the OOM killer) the keeper (keeper.py), which holds the memfd, still has every byte a client
could have read; the worker that adopts the terminal next reads them back into its buffer (snapshot()). Nothing
touches a disk: a memfd is anonymous memory, and its pages are allocated only as output fills them.

The layout: a header (magic, version, capacity, the absolute offset of the next byte, the newlines ever written),
then `capacity` bytes in which absolute byte `o` sits at `o % capacity`. The header's counts are written after
the bytes they cover, so a writer killed in the middle of an append leaves a ring that says what it holds.
"""

from __future__ import annotations

import mmap
import os
import struct

MAGIC = b"TERMRING"
VERSION = 1
_HEADER = struct.Struct("<8sIIQQ")  # magic, version, capacity, end (next absolute byte), newlines ever written
HEADER_BYTES = 64  # the header's room; the bytes start here


class RingFormatError(ValueError):
    """The memfd does not hold a ring this code can read (another version's, or not a ring at all)."""


class OutputRing:
    """The newest capacity bytes of one terminal's output, in a memfd (fd), mapped shared."""

    def __init__(self, fd: int, *, capacity: int | None = None) -> None:
        """With capacity, makes a new ring in fd (an empty memfd); without, maps the ring fd already holds."""
        self.fd = fd
        if capacity is not None:
            os.ftruncate(fd, HEADER_BYTES + capacity)
            self._map = mmap.mmap(fd, HEADER_BYTES + capacity)
            self.capacity, self.end, self.newlines = capacity, 0, 0
            self._write_header()
            return
        size = os.fstat(fd).st_size
        if size < HEADER_BYTES:
            raise RingFormatError(f"a ring is at least {HEADER_BYTES} bytes; this memfd has {size}")
        self._map = mmap.mmap(fd, size)
        magic, version, capacity, end, newlines = _HEADER.unpack_from(self._map, 0)
        if magic != MAGIC or version != VERSION or HEADER_BYTES + capacity != size:
            self._map.close()
            raise RingFormatError(f"not a version {VERSION} output ring (magic {magic!r}, version {version})")
        self.capacity, self.end, self.newlines = capacity, end, newlines

    @classmethod
    def create(cls, capacity: int, name: str = "terminal-output") -> OutputRing:
        """A new ring in a new memfd, closed on exec (it is passed to the keeper over a socket, never inherited)."""
        fd = os.memfd_create(name, os.MFD_CLOEXEC)
        try:
            return cls(fd, capacity=capacity)
        except BaseException:
            os.close(fd)
            raise

    def append(self, chunk: bytes, newlines: int | None = None) -> None:
        """Writes chunk after what the ring holds (only its last capacity bytes, when it is longer)."""
        if not chunk:
            return
        if newlines is None:
            newlines = chunk.count(b"\n")
        end = self.end + len(chunk)
        if len(chunk) > self.capacity:
            chunk = chunk[-self.capacity :]
        start = (end - len(chunk)) % self.capacity
        first = min(len(chunk), self.capacity - start)
        base = HEADER_BYTES
        self._map[base + start : base + start + first] = chunk[:first]
        if first < len(chunk):
            self._map[base : base + len(chunk) - first] = chunk[first:]
        self.end, self.newlines = end, self.newlines + newlines
        self._write_header()

    def snapshot(self) -> tuple[int, int, bytes]:
        """(the absolute offset of the first byte held, the newlines written before it, the bytes held)."""
        held = min(self.end, self.capacity)
        first = self.end - held
        start = first % self.capacity
        base = HEADER_BYTES
        if start + held <= self.capacity:
            data = self._map[base + start : base + start + held]
        else:
            data = self._map[base + start : base + self.capacity] + self._map[base : base + held - (self.capacity - start)]
        return first, self.newlines - data.count(b"\n"), data

    def _write_header(self) -> None:
        _HEADER.pack_into(self._map, 0, MAGIC, VERSION, self.capacity, self.end, self.newlines)

    def close(self) -> None:
        """Unmaps the ring and closes this process's fd (the memory lives on while another process holds one)."""
        if self.fd >= 0:
            self._map.close()
            os.close(self.fd)
            self.fd = -1
