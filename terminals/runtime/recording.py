"""A terminal's recording as an asciicast v2 file: what it showed, with its timing, replayable by asciinema.

The read path only appends to a list (`output`, `resize`, `input`, `exit` take the time the bytes were read); the
file is written by `flush()`, which the worker calls at least once a second and at the end, so the PTY's reader
never waits on the disk and a crash loses at most the last second. Output is decoded as UTF-8 across reads (a
character cut between two reads is kept whole). A recording stops at `max_bytes`: a marker event says so, and
later events are counted, not written. The exit, which asciicast v2 has no event for, is a marker `exit <code>` or
`exit <signal>`. Plain Python: the worker owns the files, the core records where they are.
"""

from __future__ import annotations

import codecs
import json
import os
from dataclasses import dataclass, field

MARKER = "m"


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
    _pending: list = field(default_factory=list)
    _decoder: codecs.IncrementalDecoder = field(default_factory=lambda: codecs.getincrementaldecoder("utf-8")("replace"))

    def __post_init__(self) -> None:
        header = {"version": 2, "width": self.cols, "height": self.rows, "timestamp": self.timestamp,
                  "env": {"TERM": "xterm-256color"}}
        # Created for the service's account only: a recording can hold what a terminal showed.
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            line = json.dumps(header) + "\n"
            file.write(line)
        self.written = len(line.encode())

    # Events, from the read path: no disk access here.

    def output(self, data: bytes, at: float) -> None:
        text = self._decoder.decode(data)
        if text:
            self._pending.append((at, "o", text))

    def input(self, data: str, at: float) -> None:
        if self.record_input:
            self._pending.append((at, "i", data))

    def resize(self, cols: int, rows: int, at: float) -> None:
        self._pending.append((at, "r", f"{cols}x{rows}"))

    def exit(self, code: int | None, signal: str | None, at: float) -> None:
        rest = self._decoder.decode(b"", final=True)
        if rest:
            self._pending.append((at, "o", rest))
        self._pending.append((at, MARKER, f"exit {signal}" if signal else f"exit {code}"))

    # The file, from the worker's flusher.

    def flush(self) -> int:
        """Appends the pending events to the file; returns how many were written."""
        events, self._pending = self._pending, []
        if not events:
            return 0
        lines = []
        for at, kind, data in events:
            if self.capped:
                self.dropped_events += 1
                continue
            line = json.dumps([round(max(0.0, at - self.started), 6), kind, data], ensure_ascii=False) + "\n"
            size = len(line.encode())
            if self.max_bytes and self.written + size > self.max_bytes:
                self.capped = True
                self.dropped_events += 1
                note = json.dumps([round(max(0.0, at - self.started), 6), MARKER,
                                   f"recording stopped: it reached its size cap of {self.max_bytes} bytes"]) + "\n"
                lines.append(note)
                self.written += len(note.encode())
                continue
            lines.append(line)
            self.written += size
        if lines:
            with open(self.path, "a", encoding="utf-8") as file:
                file.write("".join(lines))
        return len(lines)
