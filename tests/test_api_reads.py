"""Reading output: by byte offset (eof, truncation, slices that never split a character), stripAnsi, sinceTime, screen."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from .client import Api
from .helpers import clean, printed
from .servers import wait_for


def read_bytes(api: Api, terminal: str, from_byte: int, max_bytes: int = 65536, **params) -> dict:
    return api.output(terminal, fromByte=from_byte, maxBytes=max_bytes, **params)


def wait_exit(api: Api, terminal: str) -> dict:
    response = api.post(f"/api/terminals/{terminal}/wait", json={"timeoutMs": 10000})
    assert response.status_code == 200, response.text
    data = response.json()["data"]
    assert data["timedOut"] is False
    return data


def screen(api: Api, terminal: str) -> dict:
    response = api.get(f"/api/terminals/{terminal}/screen")
    assert response.status_code == 200, response.text
    return response.json()["data"]


def wait_screen(api: Api, terminal: str, predicate, what: str, timeout: float = 10.0) -> dict:
    return wait_for(lambda: (lambda data: data if predicate(data) else None)(screen(api, terminal)), timeout, what)


def seq_bytes(first: int, last: int) -> int:
    """Bytes `seq first last` prints on a PTY (each line ends in \\r\\n)."""
    return sum(len(str(number)) + 2 for number in range(first, last + 1))


# Reading by byte offset


def test_bytes_eof_is_false_while_running_and_true_once_exited_and_read(alice):
    """eof stays false while the program runs, even with everything read; once it exits, the read reaching the end says eof."""
    terminal = alice.create(command="sh", args=["-c", "stty -echo; echo first; read line; echo second"])["terminalId"]
    first = wait_for(
        lambda: (lambda data: data if data["chunk"] == "first\r\n" else None)(read_bytes(alice, terminal, 0)),
        10, "first",
    )
    assert first["fromByte"] == 0
    assert first["nextByte"] == 7
    assert first["eof"] is False
    assert first["truncated"] is False
    assert first["oldestByte"] == 0
    assert first["totalBytes"] == 7
    assert first["isActive"] is True
    assert first["exitStatus"] is None
    at_end = read_bytes(alice, terminal, first["nextByte"])
    assert at_end["chunk"] == ""
    assert at_end["fromByte"] == at_end["nextByte"] == 7
    assert at_end["eof"] is False

    alice.send(terminal, "go")
    assert wait_exit(alice, terminal)["exitCode"] == 0
    rest = read_bytes(alice, terminal, first["nextByte"])
    assert rest["chunk"] == "second\r\n"
    assert rest["fromByte"] == 7
    assert rest["nextByte"] == 15
    assert rest["eof"] is True
    assert rest["isActive"] is False
    assert rest["exitStatus"] == {"exitCode": 0, "signal": None}
    # Not everything read yet: no eof, even though the program has ended.
    partial = read_bytes(alice, terminal, 0, 3)
    assert partial["chunk"] == "fir"
    assert partial["nextByte"] == 3
    assert partial["eof"] is False
    # Past the end: an empty chunk at the end, eof.
    beyond = read_bytes(alice, terminal, 1000)
    assert beyond["chunk"] == ""
    assert beyond["fromByte"] == beyond["nextByte"] == 15
    assert beyond["eof"] is True


def test_bytes_read_in_slices_of_seven_reassemble_the_output_exactly(alice):
    """Reading a finished output 7 bytes at a time never splits a "€" and the chunks concatenate to the whole text."""
    text = "".join(f"line {number}: {'€' * (number % 5)} ok {'é' * (number % 3)}\n" for number in range(40))
    terminal = alice.create(command="printf", args=["%s", text])["terminalId"]
    wait_exit(alice, terminal)
    expected = text.replace("\n", "\r\n")
    whole = read_bytes(alice, terminal, 0)
    assert whole["chunk"] == expected
    assert whole["eof"] is True
    assert whole["totalBytes"] == len(expected.encode())

    chunks, position, shorter = [], 0, 0
    for _ in range(len(expected.encode())):
        data = read_bytes(alice, terminal, position, 7)
        chunk = data["chunk"]
        size = len(chunk.encode())
        assert data["fromByte"] == position
        assert data["nextByte"] == position + size
        assert 0 < size <= 7, data
        assert "\ufffd" not in chunk
        assert data["truncated"] is False
        shorter += size < 7
        chunks.append(chunk)
        position = data["nextByte"]
        if data["eof"]:
            break
        assert position < whole["totalBytes"]
    assert "".join(chunks) == expected
    assert position == whole["totalBytes"]
    assert shorter > 1  # slices were cut short rather than split a character


def test_bytes_slices_of_one_byte_still_return_whole_characters(alice):
    """maxBytes smaller than a character returns that one character, so a reader never stalls."""
    terminal = alice.create(command="printf", args=["%s", "€a€"])["terminalId"]
    wait_exit(alice, terminal)
    first = read_bytes(alice, terminal, 0, 1)
    assert first["chunk"] == "€"
    assert first["nextByte"] == 3
    second = read_bytes(alice, terminal, 3, 1)
    assert second["chunk"] == "a"
    third = read_bytes(alice, terminal, 4, 2)
    assert third["chunk"] == "€"
    assert third["nextByte"] == 7
    assert third["eof"] is True


def test_bytes_evicted_offset_is_truncated_and_starts_at_oldest_byte(alice):
    """With outputByteLimit 2048, `seq 1 20000` evicts its start: fromByte 0 reads from oldestByte, truncated true."""
    terminal = alice.create(command="sh", args=["-c", "seq 1 20000"], outputByteLimit=2048)["terminalId"]
    wait_exit(alice, terminal)
    total = seq_bytes(1, 20000)
    stats = alice.get(f"/api/terminals/{terminal}/stats").json()["data"]
    assert stats["totalBytes"] == total
    assert stats["oldestByte"] > 0
    assert stats["bufferBytes"] == total - stats["oldestByte"]
    assert stats["bufferBytes"] <= 2048 + 4096  # the limit plus the eviction slack

    read = read_bytes(alice, terminal, 0)
    assert read["truncated"] is True
    assert read["fromByte"] == stats["oldestByte"]
    assert read["oldestByte"] == stats["oldestByte"]
    assert read["nextByte"] == total
    assert read["eof"] is True
    lines = read["chunk"].split("\r\n")
    assert lines[-1] == ""
    # The limit is exact, so the first line may be the end of a number cut in two: every whole line after it runs
    # on without a gap to the last, and the cut one is the end of the number before them.
    numbers = [int(line) for line in lines[1:-1]]
    assert numbers == list(range(numbers[0], 20001))
    assert numbers[0] > 1 and str(numbers[0] - 1).endswith(lines[0])

    inside = read_bytes(alice, terminal, stats["oldestByte"], 10)
    assert inside["truncated"] is False
    assert inside["fromByte"] == stats["oldestByte"]


def test_bytes_read_while_printing_follows_without_gaps(alice):
    """Polling fromByte=nextByte while a program prints collects every byte once, in order, until eof."""
    script = "for i in $(seq 1 200); do echo tock-$i-€; done"
    terminal = alice.create(command="sh", args=["-c", script])["terminalId"]
    collected, position = [], 0

    def step():
        nonlocal position
        data = read_bytes(alice, terminal, position, 100)
        assert data["fromByte"] == position
        assert "\ufffd" not in data["chunk"]
        collected.append(data["chunk"])
        position = data["nextByte"]
        return data["eof"]

    wait_for(step, 15, "eof")
    assert "".join(collected) == "".join(f"tock-{i}-€\r\n" for i in range(1, 201))


def test_bytes_polling_a_large_fast_output_until_eof_gets_every_byte(alice):
    """A program writing 400 KB at full speed and exiting: polling fromByte=nextByte until eof yields it all, intact."""
    line = "€" * 30 + "x" * 50
    terminal = alice.create(command="sh", args=["-c", f"yes '{line}' | head -n 5000"])["terminalId"]
    collected, position = [], 0

    def step():
        nonlocal position
        data = read_bytes(alice, terminal, position)
        assert data["truncated"] is False
        collected.append(data["chunk"])
        position = data["nextByte"]
        return data["eof"]

    wait_for(step, 15, "eof")
    text = "".join(collected)
    assert "\ufffd" not in text
    assert text == (line + "\r\n") * 5000
    assert alice.post(f"/api/terminals/{terminal}/wait", json={"timeoutMs": 1000}).json()["data"]["exitCode"] == 0


@pytest.mark.parametrize("value", [-1, "x"])
def test_bytes_bad_offset_is_refused(alice, value):
    """A negative or non-numeric fromByte is 400 naming fromByte."""
    terminal = alice.create(command="true")["terminalId"]
    response = alice.get(f"/api/terminals/{terminal}/output", params={"fromByte": value})
    assert response.status_code == 400, response.text
    assert "fromByte" in response.json()["error"]["details"]["fields"]


@pytest.mark.parametrize("value", [0, 1048577])
def test_bytes_bad_max_bytes_is_refused(alice, value):
    """maxBytes below 1 or above TERMINALS_MAX_READ_BYTES (1 MiB) is 400 naming maxBytes."""
    terminal = alice.create(command="true")["terminalId"]
    response = alice.get(f"/api/terminals/{terminal}/output", params={"fromByte": 0, "maxBytes": value})
    assert response.status_code == 400, response.text
    assert "maxBytes" in response.json()["error"]["details"]["fields"]


# Stripping escape sequences


PROGRESS = "printf '\\033[1;31mred alert\\033[0m\\nprogress 10%%\\rprogress 100%%\\n'"


def test_strip_ansi_on_line_reads_removes_colours_and_applies_carriage_returns(alice):
    """stripAnsi=true on a line read gives "red alert" and "progress 100%": no colours, the carriage return applied."""
    terminal = alice.create(command="sh", args=["-c", PROGRESS])["terminalId"]
    wait_exit(alice, terminal)
    raw = alice.output(terminal)["output"]
    assert "\x1b[1;31m" in raw
    assert "progress 10%\rprogress 100%" in raw
    stripped = alice.output(terminal, stripAnsi="true")
    assert stripped["output"] == "red alert\nprogress 100%"
    assert stripped["stats"]["totalBytes"] == len("red alert\nprogress 100%")


def test_strip_ansi_on_byte_reads_removes_colours_and_applies_carriage_returns(alice):
    """stripAnsi=true on a byte read strips the chunk the same way; offsets still count the raw bytes."""
    terminal = alice.create(command="sh", args=["-c", PROGRESS])["terminalId"]
    wait_exit(alice, terminal)
    raw = read_bytes(alice, terminal, 0)
    stripped = read_bytes(alice, terminal, 0, stripAnsi="true")
    assert stripped["chunk"] == "red alert\nprogress 100%\n"
    assert stripped["nextByte"] == raw["nextByte"] == len(raw["chunk"].encode())
    assert stripped["eof"] is True


def test_strip_ansi_on_byte_slices_leaves_no_fragment_of_a_split_sequence(alice):
    """Reading coloured output in 4-byte slices with stripAnsi: no slice shows the tail of a colour sequence cut by the
    slice before it, so the stripped slices concatenate to the plain text."""
    coloured = "\\033[1;31mred\\033[0m \\033[32mgreen\\033[0m\\n"
    terminal = alice.create(command="sh", args=["-c", f"for i in 1 2 3 4 5; do printf '{coloured}'; done"])["terminalId"]
    wait_exit(alice, terminal)
    assert read_bytes(alice, terminal, 0, stripAnsi="true")["chunk"] == "red green\n" * 5
    chunks, position = [], 0
    for _ in range(200):
        data = read_bytes(alice, terminal, position, 4, stripAnsi="true")
        chunks.append(data["chunk"])
        position = data["nextByte"]
        if data["eof"]:
            break
    assert "".join(chunks) == "red green\n" * 5, chunks


def test_strip_ansi_in_a_shell_reads_progress_as_its_final_state(alice):
    """In a shell, the progress printf reads as "progress 100%" with stripAnsi, and the typed command stays legible."""
    terminal = alice.create(shell="/bin/bash")["terminalId"]
    alice.run(terminal, "true")
    alice.send(terminal, "printf 'progress 10%%\\rprogress 100%%\\n'")

    def final():
        text = alice.output(terminal, stripAnsi="true", maxLines=10000)["output"]
        return text if "progress 100%" in text.split("\n") else None

    text = wait_for(final, 10, "progress 100%")
    assert "progress 10%" not in text.split("\n")
    assert "\x1b" not in text
    assert "\r" not in text


# Reading since a time


def test_since_time_returns_only_lines_from_that_time(alice):
    """sinceTime=<ISO 8601> returns the lines that arrived at or after it: "after" and not "before"."""
    terminal = alice.create(shell="/bin/bash")["terminalId"]
    alice.run(terminal, "true")
    alice.send(terminal, "echo before-''mark")
    alice.wait_output(terminal, lambda out: printed(out, "before-mark"), what="before-mark")
    moment = datetime.now(timezone.utc)
    alice.send(terminal, "echo after-''mark")
    alice.wait_output(terminal, lambda out: printed(out, "after-mark"), what="after-mark")

    read = alice.output(terminal, sinceTime=moment.isoformat())
    lines = [clean(line) for line in read["output"].split("\n")]
    assert "after-mark" in lines, read
    assert "before-mark" not in lines, read
    zulu = alice.output(terminal, sinceTime=moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ"))
    assert zulu["output"] == read["output"]


def test_since_time_misses_no_line_that_arrived_after_it(alice):
    """While a program prints a line every 10 ms, every line that arrived after t is in a sinceTime=t read."""
    script = "i=0; while [ $i -lt 400 ]; do echo flow-$i; i=$((i+1)); sleep 0.01; done"
    terminal = alice.create(command="sh", args=["-c", script])["terminalId"]
    alice.wait_output(terminal, lambda out: "flow-20" in out, what="flow-20")
    moment = datetime.now(timezone.utc)
    # Every line beyond what a read started after `moment` shows arrived after `moment`.
    seen = [line for line in alice.output(terminal, maxLines=10000)["output"].split("\n") if line.startswith("flow-")]
    last_seen = int(seen[-1].removeprefix("flow-")) if seen else -1
    alice.wait_output(terminal, lambda out: f"flow-{last_seen + 30}" in out, what="30 more lines")

    read = alice.output(terminal, sinceTime=moment.isoformat(), maxLines=10000)
    numbers = [int(line.removeprefix("flow-")) for line in read["output"].split("\n") if line.startswith("flow-")]
    assert numbers, read
    assert numbers == list(range(numbers[0], numbers[-1] + 1))
    assert numbers[0] <= last_seen + 1, f"lines {last_seen + 1}..{numbers[0] - 1} arrived after sinceTime but are missing"


def test_since_time_in_the_future_is_empty_and_bad_time_is_refused(alice):
    """A sinceTime later than all output returns nothing; one that is not a date is 400 naming sinceTime."""
    terminal = alice.create(command="echo", args=["old"])["terminalId"]
    wait_exit(alice, terminal)
    future = alice.output(terminal, sinceTime="2999-01-01T00:00:00Z")
    assert future["output"] == ""
    past = alice.output(terminal, sinceTime="2000-01-01T00:00:00Z")
    assert past["output"] == "old"
    response = alice.get(f"/api/terminals/{terminal}/output", params={"sinceTime": "yesterday"})
    assert response.status_code == 400, response.text
    assert "sinceTime" in response.json()["error"]["details"]["fields"]


# The screen


def test_screen_shows_text_drawn_after_a_clear(alice):
    """After `printf '\\033[2J\\033[Hhello screen'` the first screen line starts with "hello screen"."""
    terminal = alice.create(shell="/bin/bash", cols=90, rows=20)["terminalId"]
    alice.run(terminal, "true")
    alice.send(terminal, "printf '\\033[2J\\033[Hhello screen'")
    data = wait_screen(alice, terminal, lambda s: s["lines"][0].startswith("hello screen"), "hello screen on line 0")
    assert data["terminalId"] == terminal
    assert (data["cols"], data["rows"]) == (90, 20)
    assert len(data["lines"]) == 20
    assert data["alternateScreen"] is False
    assert data["cursor"]["row"] == 0
    assert data["cursor"]["col"] >= len("hello screen")
    assert all(line == "" for line in data["lines"][1:])


def test_screen_cursor_position_follows_the_program(alice):
    """The cursor is reported 0-based where the program left it; a hidden cursor is reported hidden."""
    terminal = alice.create(command="printf", args=["\\033[2J\\033[5;10Hxy\\033[?25l"], cols=40, rows=10)["terminalId"]
    wait_exit(alice, terminal)
    data = screen(alice, terminal)
    assert data["lines"][4] == " " * 9 + "xy"
    assert data["cursor"] == {"row": 4, "col": 11}
    assert data["cursorVisible"] is False


def test_screen_alternate_screen_enters_and_leaves(alice):
    """ESC[?1049h shows the alternate screen ("in alt"); ESC[?1049l brings back the shell's own lines."""
    terminal = alice.create(shell="/bin/bash")["terminalId"]
    alice.run(terminal, "echo main-''screen-line")
    wait_screen(alice, terminal, lambda s: "main-screen-line" in s["lines"], "main-screen-line on the screen")
    alice.send(terminal, "printf '\\033[?1049h\\033[Hin alt'")
    alt = wait_screen(alice, terminal, lambda s: s["alternateScreen"] is True and s["lines"][0].startswith("in alt"),
                      "the alternate screen")
    assert "main-screen-line" not in alt["lines"]

    alice.send(terminal, "printf '\\033[?1049l'")
    back = wait_screen(alice, terminal, lambda s: s["alternateScreen"] is False and "main-screen-line" in s["lines"],
                       "the main screen back")
    assert not any(line.startswith("in alt") for line in back["lines"])


def test_screen_shows_less_on_the_alternate_screen_until_q(alice):
    """`less /etc/passwd` draws the file on the alternate screen; "q" quits it and the shell's screen returns."""
    terminal = alice.create(shell="/bin/bash", cols=100, rows=20)["terminalId"]
    alice.run(terminal, "echo before-''less")
    alice.send(terminal, "less /etc/passwd")
    shown = wait_screen(alice, terminal, lambda s: s["alternateScreen"] is True and s["lines"][0].startswith("root:"),
                        "less showing /etc/passwd")
    with open("/etc/passwd") as passwd:
        first = passwd.readline().rstrip("\n")
    assert shown["lines"][0] == first[:100]
    alice.send(terminal, "q", appendNewline=False)
    back = wait_screen(alice, terminal, lambda s: s["alternateScreen"] is False, "less to quit")
    assert "before-less" in back["lines"]
    assert not any(line.startswith("root:") for line in back["lines"])
    assert alice.run(terminal, "echo after-$((2+2))") == "after-4"


def test_screen_of_an_exited_program_stays_readable(alice):
    """The screen of a program that has exited (not yet deleted) still answers with its last frame."""
    terminal = alice.create(command="echo", args=["last frame"])["terminalId"]
    wait_exit(alice, terminal)
    data = screen(alice, terminal)
    assert data["lines"][0] == "last frame"
    assert data["cursor"] == {"row": 1, "col": 0}
