"""A terminal's recording as an asciicast v2 file: what it showed, with its timing, replayable by asciinema.

The read path only appends to a list (`output`, `resize`, `input`, `exit` take the time the bytes were read). The
worker's flusher, at least once a second and at the end, takes that list on the event loop (`take`) and writes it
in a thread (`write`): the PTY's reader never waits on the disk, and a crash loses at most the last second.

Output is decoded as UTF-8 when written, across reads (a character cut between two reads is kept whole). Two
bounds keep a flood from costing memory or disk without a word in the file:
- `max_bytes`: the file stops there; a marker event says so, and later events are counted, not written;
- PENDING_LIMIT: output that arrives faster than the flusher writes it, beyond this much, is dropped and a marker
  says how many bytes.
The exit, which asciicast v2 has no event for, is a marker `exit <code>` or `exit <signal>`. Plain Python: the
worker owns the files, the core records where they are.
"""

from __future__ import annotations

import codecs
import hashlib
import json
import os
from dataclasses import dataclass, field

MARKER = "m"
PENDING_LIMIT = 16 << 20  # bytes of output waiting for the flusher, at most


@dataclass
class Recording:
    path: str
    cols: int
    rows: int
    started: float  # the clock's time at the start: event times count from it
    max_bytes: int = 0  # 0: no cap
    record_input: bool = False
    timestamp: int = 0  # the start as Unix time, for the header
    written: int = 0
    capped: bool = False
    dropped_events: int = 0
    finished: bool = False  # the exit is in the pending events or the file
    resumed: bool = False  # a recording another worker began (adoption.py): its file exists, header and all
    _pending: list = field(default_factory=list)
    _pending_bytes: int = 0
    _skipped_bytes: int = 0  # output dropped since the last take, beyond PENDING_LIMIT
    _decoder: codecs.IncrementalDecoder = field(default_factory=lambda: codecs.getincrementaldecoder("utf-8")("replace"))

    def __post_init__(self) -> None:
        if self.resumed:
            return
        header = {"version": 2, "width": self.cols, "height": self.rows, "timestamp": self.timestamp,
                  "env": {"TERM": "xterm-256color"}}
        # Created for the service's account only: a recording can hold what a terminal showed.
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            line = json.dumps(header) + "\n"
            file.write(line)
        self.written = len(line.encode())

    # Events, from the read path: no disk access, no decoding here.

    def output(self, data: bytes, at: float) -> None:
        if self.capped:
            return
        if self._pending_bytes + len(data) > PENDING_LIMIT:
            self._skipped_bytes += len(data)
            return
        self._pending.append((at, "o", data))
        self._pending_bytes += len(data)

    def input(self, data: str, at: float) -> None:
        if self.record_input:
            self._pending.append((at, "i", data))

    def resize(self, cols: int, rows: int, at: float) -> None:
        self._pending.append((at, "r", f"{cols}x{rows}"))

    def exit(self, code: int | None, signal: str | None, at: float) -> None:
        if not self.finished:
            self.finished = True
            self._pending.append((at, "x", f"exit {signal}" if signal else f"exit {code}"))

    # The file, from the worker's flusher.

    def take(self) -> list:
        """The events since the last take, for write(); call it on the thread that records events."""
        events, self._pending, self._pending_bytes = self._pending, [], 0
        if self._skipped_bytes:
            at = events[-1][0] if events else self.started
            events.append((at, MARKER, f"recording skipped {self._skipped_bytes} bytes of output: it arrived faster "
                                       "than it could be written"))
            self._skipped_bytes = 0
        return events

    def write(self, events: list) -> int:
        """Appends events (from take) to the file; returns how many lines it wrote. Any thread, one at a time."""
        lines = []
        for at, kind, data in events:
            if kind == "o":
                data = self._decoder.decode(data)
                if not data:
                    continue  # a character's first bytes: it comes whole with the next read
            elif kind == "x":
                rest = self._decoder.decode(b"", final=True)
                if rest:
                    self._add(lines, at, "o", rest)
                kind = MARKER
            self._add(lines, at, kind, data)
        if lines:
            with open(self.path, "a", encoding="utf-8") as file:
                file.write("".join(lines))
        return len(lines)

    def _add(self, lines: list, at: float, kind: str, data: str) -> None:
        if self.capped:
            self.dropped_events += 1
            return
        offset = round(max(0.0, at - self.started), 6)
        line = json.dumps([offset, kind, data], ensure_ascii=False) + "\n"
        size = len(line.encode())
        if self.max_bytes and self.written + size > self.max_bytes:
            self.capped = True
            self.dropped_events += 1
            note = json.dumps([offset, MARKER, f"recording stopped: it reached its size cap of {self.max_bytes} bytes"])
            lines.append(note + "\n")
            self.written += len(note) + 1
            return
        lines.append(line)
        self.written += size

    def flush(self) -> int:
        """take() and write() at once, for a caller on one thread."""
        return self.write(self.take())


def digest(path: str) -> tuple[int, str]:
    """The file's size and SHA-256, as the audit trail keeps them for a finished recording."""
    sha = hashlib.sha256()
    size = 0
    with open(path, "rb") as file:
        while block := file.read(1 << 20):
            sha.update(block)
            size += len(block)
    return size, sha.hexdigest()
