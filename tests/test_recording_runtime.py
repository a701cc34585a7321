"""The asciicast writer (terminals/runtime/asciicast.py), alone: what it writes parses as asciicast v2, the real
asciinema tool (2.4.0, from PyPI) reads it and gives back the output bytes in order, times count from the start and
never go back, the read path never touches the disk, input stays out unless asked for, and the size cap holds and
is marked in the file."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

from terminals.runtime.asciicast import Recording

ASCIINEMA = str(Path(sys.executable).parent / "asciinema")


def events(path: Path) -> tuple[dict, list]:
    header, *lines = path.read_text(encoding="utf-8").splitlines()
    return json.loads(header), [json.loads(line) for line in lines]


def test_a_recording_replays_its_output_bytes_in_order_with_asciinema(tmp_path):
    path = tmp_path / "t.cast"
    recording = Recording(str(path), cols=80, rows=24, started=100.0, timestamp=1_790_000_000)
    euro = "\u20ac".encode()
    chunks = [b"hello ", euro[:1], euro[1:] + b"\r\n", b"\x1b[31mred\x1b[0m\r\n"]
    for number, chunk in enumerate(chunks):
        recording.output(chunk, at=100.0 + number * 0.25)
    recording.resize(120, 40, at=101.5)
    recording.output(b"after resize\r\n", at=101.75)
    recording.exit(3, None, at=102.0)
    assert events(path)[1] == []  # nothing on disk before a flush: the read path only appends to a list
    recording.flush()

    header, written = events(path)
    assert header["version"] == 2 and (header["width"], header["height"]) == (80, 24)
    times = [event[0] for event in written]
    assert times == sorted(times) and times[0] == 0.0 and times[-1] == 2.0
    # The euro sign's first byte alone makes no event: the character comes whole with the next read.
    assert [event[1:] for event in written[:2]] == [["o", "hello "], ["o", "\u20ac\r\n"]]
    assert [event[1] for event in written] == ["o", "o", "o", "r", "o", "m"]
    assert ["r", "120x40"] == written[3][1:] and written[-1][1:] == ["m", "exit 3"]
    replayed = subprocess.run([ASCIINEMA, "cat", str(path)], capture_output=True, check=True).stdout
    assert replayed == b"".join(chunks) + b"after resize\r\n"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


def test_input_is_left_out_unless_asked_for(tmp_path):
    quiet = Recording(str(tmp_path / "quiet.cast"), cols=80, rows=24, started=0.0)
    loud = Recording(str(tmp_path / "loud.cast"), cols=80, rows=24, started=0.0, record_input=True)
    for recording in (quiet, loud):
        recording.input("secret-password\r", at=0.5)
        recording.flush()
    assert events(tmp_path / "quiet.cast")[1] == []
    assert events(tmp_path / "loud.cast")[1] == [[0.5, "i", "secret-password\r"]]


def test_the_size_cap_holds_and_is_marked(tmp_path):
    path = tmp_path / "capped.cast"
    recording = Recording(str(path), cols=80, rows=24, started=0.0, max_bytes=2000)
    for number in range(100):
        recording.output(f"line {number:03d} {'x' * 40}\r\n".encode(), at=number * 0.01)
    recording.flush()
    recording.output(b"later\r\n", at=5.0)
    recording.flush()
    _, written = events(path)
    assert written[-1][1] == "m" and "size cap of 2000 bytes" in written[-1][2]
    assert sum(1 for event in written if event[1] == "m") == 1
    assert path.stat().st_size <= 2000 + len(json.dumps(written[-1])) + 1
    # Output after the cap is not even kept in memory until the next flush.
    assert recording.capped and recording.dropped_events == 100 - (len(written) - 1)
    replayed = subprocess.run([ASCIINEMA, "cat", str(path)], capture_output=True, check=True).stdout
    assert replayed.startswith(b"line 000 ") and b"later" not in replayed


def test_output_faster_than_the_flusher_is_dropped_beyond_the_pending_bound_and_marked(tmp_path, monkeypatch):
    from terminals.runtime import asciicast as module

    monkeypatch.setattr(module, "PENDING_LIMIT", 1000)
    path = tmp_path / "flood.cast"
    recording = Recording(str(path), cols=80, rows=24, started=0.0)
    for number in range(30):
        recording.output(b"y\n" * 50, at=number * 0.001)  # 100 bytes each: ten fit
    events_taken = recording.take()  # on the loop: the list only
    assert len(events_taken) == 11 and recording.take() == []
    recording.write(events_taken)  # in a thread, later
    _, written = events(path)
    assert [event[1] for event in written].count("o") == 10
    assert written[-1][1:] == ["m", "recording skipped 2000 bytes of output: it arrived faster than it could be written"]


def test_the_exit_comes_after_the_last_bytes_and_only_once(tmp_path):
    path = tmp_path / "exit.cast"
    recording = Recording(str(path), cols=80, rows=24, started=0.0)
    recording.output("\u20ac".encode()[:2], at=0.1)  # cut short by the exit: replaced, not lost silently
    recording.exit(None, "SIGKILL", at=0.2)
    recording.exit(0, None, at=0.3)
    recording.flush()
    _, written = events(path)
    assert written == [[0.2, "o", "\ufffd"], [0.2, "m", "exit SIGKILL"]]
