"""Reading a terminal's output: the four modes, their counters, incremental polling with since, encodings and stats."""

from __future__ import annotations

import json
import re
from datetime import datetime

import pytest
import requests

from .client import Api
from .helpers import clean
from .servers import wait_for

NUMBERED = 100  # lines the shared numbered terminal prints: "1" .. "100"


def finished_lines(read: dict, since: int) -> list[str]:
    """The lines of a full-mode read from `since` that are finished: those before nextReadFrom."""
    return read["output"].split("\n")[: read["nextReadFrom"] - since] if read["output"] else []


def print_and_hold(api: Api, terminal: str, command: str, last_line: str) -> int:
    """Runs command, then keeps the shell busy so no prompt follows; returns the number of its first output line."""
    api.send(terminal, f"echo held-''start; {command}; sleep 60")

    def settled():
        read = api.output(terminal, maxLines=10000)
        lines = read["output"].split("\n")
        done = lines[-1] == last_line and read["nextReadFrom"] == read["totalLines"]
        return read if done and "held-start" in read["output"] else None

    read = wait_for(settled, 15, f"{last_line!r} as the last finished line")
    lines = read["output"].split("\n")
    start = max(index for index, line in enumerate(lines) if clean(line) == "held-start")
    return read["oldestLine"] + start + 1


@pytest.fixture(scope="module")
def numbered(server, keys):
    """Alice's terminal that printed "1" .. "100" and then went quiet: (client, terminal id, number of line "1")."""
    api = Api(server.url, keys["alice"])
    terminal = api.create(shell="/bin/bash")["terminalId"]
    first = print_and_hold(api, terminal, f"seq 1 {NUMBERED}", str(NUMBERED))
    yield api, terminal, first
    api.cleanup()


# (query, numbers shown with None for the omission marker, linesOmitted, hasMore, truncated, nextReadFrom offset)
MODE_CASES = {
    "full": ({"mode": "full"}, list(range(1, 101)), 0, False, False, 100),
    "full-maxLines": ({"mode": "full", "maxLines": 30}, list(range(1, 31)), 70, True, True, 30),
    "default-mode-maxLines": ({"maxLines": 5}, list(range(1, 6)), 95, True, True, 5),
    "head": ({"mode": "head", "headLines": 10}, list(range(1, 11)), 90, True, True, 10),
    "head-default": ({"mode": "head"}, list(range(1, 51)), 50, True, True, 50),
    "head-maxLines": ({"mode": "head", "headLines": 10, "maxLines": 4}, list(range(1, 5)), 96, True, True, 4),
    "head-all": ({"mode": "head", "headLines": 500}, list(range(1, 101)), 0, False, False, 100),
    "tail": ({"mode": "tail", "tailLines": 7}, list(range(94, 101)), 93, False, True, 100),
    "tail-default": ({"mode": "tail"}, list(range(51, 101)), 50, False, True, 100),
    "tail-maxLines": ({"mode": "tail", "tailLines": 20, "maxLines": 5}, list(range(96, 101)), 95, False, True, 100),
    "tail-all": ({"mode": "tail", "tailLines": 500}, list(range(1, 101)), 0, False, False, 100),
    "head-tail": (
        {"mode": "head-tail", "headLines": 5, "tailLines": 5},
        [*range(1, 6), None, *range(96, 101)], 90, False, True, 100,
    ),
    "head-tail-maxLines": (
        {"mode": "head-tail", "headLines": 20, "tailLines": 20, "maxLines": 30},
        [*range(1, 21), None, *range(91, 101)], 70, False, True, 100,
    ),
    "head-tail-no-head": (
        {"mode": "head-tail", "headLines": 0, "tailLines": 3},
        [None, *range(98, 101)], 97, False, True, 100,
    ),
    "head-tail-overlap": (
        {"mode": "head-tail", "headLines": 60, "tailLines": 60}, list(range(1, 101)), 0, False, False, 100,
    ),
}


@pytest.mark.parametrize("case", MODE_CASES.values(), ids=MODE_CASES.keys())
def test_output_modes_shape_lines_and_counters(numbered, case):
    """Each mode shows the lines it promises from `since`, and its counters say what was shown and left out."""
    api, terminal, first = numbered
    query, shown, omitted, has_more, truncated, next_offset = case
    read = api.output(terminal, since=first, **query)
    lines = read["output"].split("\n")
    assert len(lines) == len(shown)
    for line, number in zip(lines, shown):
        if number is None:
            assert "omitted" in line and str(omitted) in line, line
        else:
            assert line == str(number)
    assert read["stats"]["linesShown"] == len([number for number in shown if number is not None])
    assert read["stats"]["linesOmitted"] == omitted
    assert read["hasMore"] is has_more
    assert read["truncated"] is truncated
    assert read["nextReadFrom"] == first + next_offset
    assert read["totalLines"] == first + NUMBERED
    assert read["oldestLine"] == 0
    assert read["linesEvicted"] == 0
    assert read["stats"]["totalBytes"] == len(read["output"].encode("utf-8"))
    assert abs(read["stats"]["estimatedTokens"] - len(read["output"]) / 4) <= 1


def test_output_tail_without_since_reads_the_end(numbered):
    """mode=tail without since shows the newest lines, as the contract's first example reads a dev server."""
    api, terminal, first = numbered
    read = api.output(terminal, mode="tail", tailLines=3)
    assert read["output"] == "98\n99\n100"
    assert read["stats"]["linesOmitted"] == first + NUMBERED - 3
    assert read["nextReadFrom"] == read["totalLines"] == first + NUMBERED


def test_output_since_pages_through_every_line_once(numbered):
    """Following nextReadFrom with a small maxLines visits every line once and then reports nothing more."""
    api, terminal, first = numbered
    since, seen, pages = first, [], 0
    while True:
        read = api.output(terminal, since=since, maxLines=30)
        seen += finished_lines(read, since)
        pages += 1
        if read["hasMore"] is False:
            break
        assert read["nextReadFrom"] > since
        since = read["nextReadFrom"]
    assert seen == [str(number) for number in range(1, NUMBERED + 1)]
    assert pages == 4


def test_output_since_beyond_end_is_empty(numbered):
    """A since at or past the end returns no lines and nothing more to read."""
    api, terminal, first = numbered
    for since in (first + NUMBERED, first + NUMBERED + 1, 10**9):
        read = api.output(terminal, since=since)
        assert read["output"] == ""
        assert read["stats"]["linesShown"] == 0
        assert read["stats"]["totalBytes"] == 0
        assert read["hasMore"] is False
        assert read["nextReadFrom"] <= read["totalLines"] == first + NUMBERED


def test_stats_match_printed_lines(numbered):
    """The stats endpoint counts the lines and bytes the terminal printed."""
    api, terminal, first = numbered
    response = api.get(f"/api/terminals/{terminal}/stats")
    assert response.status_code == 200, response.text
    stats = response.json()["data"]
    assert stats["terminalId"] == terminal
    assert stats["totalLines"] == first + NUMBERED
    assert stats["newestLine"] == first + NUMBERED - 1
    assert stats["oldestLine"] == 0
    assert stats["bufferSize"] == first + NUMBERED
    assert stats["isActive"] is True
    everything = api.output(terminal, maxLines=10000)
    shown_bytes = len(everything["output"].encode("utf-8"))
    # Every line here is finished: the raw bytes add the last line's "\n" and each line's "\r" before it.
    assert shown_bytes < stats["totalBytes"] <= shown_bytes + stats["totalLines"] + 1
    assert stats["bufferBytes"] == stats["totalBytes"]
    assert abs(stats["estimatedTokens"] - stats["totalBytes"] / 4) <= 1


def test_stats_report_inactive_after_exit(alice):
    """Once the shell exits, stats say the terminal is no longer active and how it ended."""
    terminal = alice.create(shell="/bin/bash")["terminalId"]
    alice.send(terminal, "exit 4")
    alice.wait_status(terminal, "exited")
    stats = alice.get(f"/api/terminals/{terminal}/stats").json()["data"]
    assert stats["isActive"] is False
    assert stats["exitStatus"] == {"exitCode": 4, "signal": None}


def test_output_polling_with_since_returns_each_finished_line_once(alice):
    """Polling with since=nextReadFrom while a program prints slowly yields every finished line once, in order."""
    terminal = alice.create(shell="/bin/bash")["terminalId"]
    alice.run(terminal, "true")
    since = alice.output(terminal)["nextReadFrom"]
    alice.send(terminal, "for i in $(seq 1 200); do echo line-$i; sleep 0.005; done; echo loop-''over")
    collected: list[str] = []
    polls = {"count": 0, "since": since}

    def poll():
        read = alice.output(terminal, since=polls["since"], maxLines=25)
        assert read["nextReadFrom"] >= polls["since"]
        assert read["linesEvicted"] == 0
        collected.extend(finished_lines(read, polls["since"]))
        polls["since"] = read["nextReadFrom"]
        polls["count"] += 1
        return any(clean(line) == "loop-over" for line in collected)

    wait_for(poll, 30, "the loop to finish", interval=0.01)
    numbers = [int(match.group(1)) for line in collected if (match := re.fullmatch(r"line-(\d+)", clean(line)))]
    assert numbers == list(range(1, 201))
    assert polls["count"] > 2


def test_output_contract_example_two_polls_with_the_key_header(alice):
    """The contract's second example, with the key header: create, send a command, poll since the last nextReadFrom."""
    headers = {"X-API-Key": alice.key, "Content-Type": "application/json"}
    created = requests.post(f"{alice.url}/api/terminals", headers=headers, data=json.dumps({"cwd": "/tmp"}), timeout=30)
    assert created.status_code == 201, created.text
    assert created.json()["success"] is True
    terminal_id = created.json()["data"]["terminalId"]
    alice.created.append(terminal_id)

    sent = requests.post(
        f"{alice.url}/api/terminals/{terminal_id}/input",
        headers=headers,
        data=json.dumps({"input": "for i in $(seq 1 40); do echo tick-$i; sleep 0.02; done; echo ticks-''done"}),
        timeout=30,
    )
    assert sent.status_code == 200, sent.text
    assert sent.json()["success"] is True
    assert sent.json()["message"] == "Input sent successfully"

    state = {"last_line": 0, "finished": []}

    def poll():
        response = requests.get(
            f"{alice.url}/api/terminals/{terminal_id}/output?since={state['last_line']}", headers=headers, timeout=30
        )
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["success"] is True
        data = body["data"]
        assert {"output", "totalLines", "nextReadFrom", "hasMore", "truncated", "stats"} <= set(data)
        assert {"totalBytes", "estimatedTokens", "linesShown", "linesOmitted"} <= set(data["stats"])
        assert data["nextReadFrom"] >= state["last_line"]
        state["finished"] += finished_lines(data, state["last_line"])
        state["last_line"] = data["nextReadFrom"]
        return any(clean(line) == "ticks-done" for line in state["finished"])

    wait_for(poll, 20, "the ticks to finish", interval=0.05)
    ticks = [clean(line) for line in state["finished"] if clean(line).startswith("tick-")]
    assert ticks == [f"tick-{number}" for number in range(1, 41)]


def test_output_unfinished_prompt_line_is_shown_again_once_finished(alice):
    """An unfinished last line (the prompt) is shown but not passed by nextReadFrom, and comes back finished."""
    terminal = alice.create(shell="/bin/bash")["terminalId"]
    alice.run(terminal, "true")

    def prompt_shown():
        data = alice.output(terminal)
        last = data["output"].split("\n")[-1]
        return data if "__end_" not in last and last.rstrip().endswith(("#", "$")) else None

    read = wait_for(prompt_shown, 15, "the prompt after the command")
    assert read["nextReadFrom"] == read["totalLines"] - 1
    prompt = read["output"].split("\n")[-1]
    since = read["nextReadFrom"]

    again = alice.output(terminal, since=since)
    assert again["output"] == prompt
    assert again["stats"]["linesShown"] == 1
    assert again["nextReadFrom"] == since
    assert again["hasMore"] is False

    alice.send(terminal, "echo finished-$((20+22))")
    after = alice.wait_output(terminal, lambda out: "\nfinished-42" in out or "\rfinished-42" in out)
    assert after
    read = alice.output(terminal, since=since)
    lines = read["output"].split("\n")
    assert lines[0].startswith(prompt)
    assert "echo finished-$((20+22))" in lines[0]
    assert read["nextReadFrom"] > since
    assert "finished-42" in [clean(line) for line in lines]


def test_output_multibyte_utf8_comes_back_intact(alice):
    """Long runs of 3- and 4-byte characters survive PTY reads and buffer slicing unchanged."""
    terminal = alice.create(shell="/bin/bash")["terminalId"]
    assert alice.run(terminal, "printf '€%.0s' $(seq 1 5000); echo") == "€" * 5000
    assert alice.run(terminal, "printf '😀%.0s' $(seq 1 3000); echo") == "😀" * 3000
    assert alice.run(terminal, "echo 'Grüße, 世界'") == "Grüße, 世界"
    read = alice.output(terminal, maxLines=10000)
    line = next(line for line in read["output"].split("\n") if clean(line) == "€" * 5000)
    number = read["oldestLine"] + read["output"].split("\n").index(line)
    single = alice.output(terminal, since=number, maxLines=1)
    assert clean(single["output"]) == "€" * 5000
    assert single["stats"]["totalBytes"] == len(single["output"].encode("utf-8"))
    assert single["stats"]["totalBytes"] >= 15000
    # Tokens are estimated from characters, not bytes.
    assert abs(single["stats"]["estimatedTokens"] - len(single["output"]) / 4) <= 1


def test_output_multibyte_utf8_read_while_printing_is_never_broken(alice):
    """Reads taken while long lines of multi-byte characters arrive never show a broken character."""
    terminal = alice.create(shell="/bin/bash")["terminalId"]
    alice.run(terminal, "true")
    alice.send(terminal, "for i in $(seq 1 40); do printf '€😀%.0s' $(seq 1 3000); echo; done; echo wide-''done")
    reads: list[str] = []

    def poll():
        read = alice.output(terminal, mode="tail", tailLines=2)
        reads.append(read["output"])
        return "wide-done" in [clean(line) for line in read["output"].split("\n")]

    wait_for(poll, 30, "wide-done", interval=0.005)
    assert reads  # how many land while the lines arrive depends on the machine's load; none may be broken
    assert [read for read in reads if "\ufffd" in read] == []
    lines = [clean(line) for line in alice.full_output(terminal).split("\n")]
    assert lines.count("€😀" * 3000) == 40


def test_output_invalid_bytes_become_replacement_characters(alice):
    """Bytes that are not UTF-8 come back as U+FFFD and the terminal's output stays readable."""
    terminal = alice.create(shell="/bin/bash")["terminalId"]
    assert alice.run(terminal, r"printf '\xff\xfe ok\n'") == "\ufffd\ufffd ok"
    assert alice.run(terminal, r"printf 'caf\xe9 \xc3 end\n'") == "caf\ufffd \ufffd end"
    assert alice.run(terminal, "echo still-$((1+2))") == "still-3"
    response = alice.get(f"/api/terminals/{terminal}/output", params={"mode": "tail", "tailLines": 20})
    assert response.status_code == 200
    assert "\ufffd\ufffd ok" in response.json()["data"]["output"]
    assert response.json()["data"]["stats"]["totalBytes"] == len(response.json()["data"]["output"].encode("utf-8"))


def test_terminal_detail_returns_the_record(alice):
    """GET /api/terminals/{id} returns the terminal's record; input moves lastActivity forward."""
    created = alice.create(shell="/bin/bash", name="reader", cols=120, rows=40)
    terminal = created["terminalId"]
    response = alice.get(f"/api/terminals/{terminal}")
    assert response.status_code == 200, response.text
    record = response.json()["data"]
    assert record["terminalId"] == terminal
    assert record["name"] == "reader"
    assert record["cols"] == 120
    assert record["rows"] == 40
    assert record["status"] == "active"
    assert record["pid"] == created["pid"]
    assert record["created"] == created["created"]
    assert record["lastActivity"].endswith("Z")
    before = datetime.fromisoformat(record["lastActivity"].replace("Z", "+00:00"))
    assert before >= datetime.fromisoformat(record["created"].replace("Z", "+00:00"))

    assert alice.run(terminal, "stty size") == "40 120"
    after = alice.get(f"/api/terminals/{terminal}").json()["data"]
    assert datetime.fromisoformat(after["lastActivity"].replace("Z", "+00:00")) > before
    assert after["status"] == "active"


# A terminal's outputByteLimit, whatever its buffer holds for a while

LIMIT = 101
FORTY_LINES = "i=0; while [ $i -lt 40 ]; do printf 'line-%03d\\n' $i; i=$((i+1)); done"  # 400 bytes on a PTY


def test_every_read_honours_the_output_byte_limit_and_says_output_was_dropped(alice):
    """A terminal with outputByteLimit 101 whose program printed 400 bytes: no read mode returns more than the
    newest 101 bytes, and each says truncated; stats count only those; a command's output is clamped the same."""
    terminal = alice.create(command="/bin/sh", args=["-c", FORTY_LINES], outputByteLimit=LIMIT)["terminalId"]
    alice.wait_status(terminal, "exited")
    stats = alice.get(f"/api/terminals/{terminal}/stats").json()["data"]
    assert stats["totalBytes"] == 400
    assert (stats["oldestByte"], stats["bufferBytes"]) == (400 - LIMIT, LIMIT)

    # The newest 101 bytes: the \n ending line 29, then lines 30 to 39.
    newest = "\n" + "".join(f"line-{number:03d}\r\n" for number in range(30, 40))
    assert len(newest.encode()) == LIMIT
    for params in ({}, {"mode": "head", "headLines": 50}, {"mode": "tail", "tailLines": 50},
                   {"mode": "head-tail", "headLines": 3, "tailLines": 3}, {"since": 0}, {"since": 5},
                   {"sinceTime": "2000-01-01T00:00:00Z"}):
        read = alice.output(terminal, **params)
        assert len(read["output"].encode()) <= LIMIT, (params, read)
        assert "line-029" not in read["output"], (params, read)
        assert read["truncated"] is True, (params, read)
        assert read["oldestLine"] == 29, (params, read)
    assert alice.output(terminal)["output"] == newest.replace("\r\n", "\n").rstrip("\n")

    chunk = alice.output(terminal, fromByte=0, maxBytes=100000)
    assert (chunk["chunk"], chunk["fromByte"], chunk["truncated"]) == (newest, 400 - LIMIT, True)
    assert alice.output(terminal, fromByte=400 - LIMIT - 1, maxBytes=5)["truncated"] is True


def test_a_command_reads_no_more_than_the_output_byte_limit(alice):
    """A command's output in a terminal with outputByteLimit 101 is the newest 101 bytes at most, truncated."""
    terminal = alice.create(shell="/bin/sh", outputByteLimit=LIMIT)["terminalId"]
    response = alice.post(f"/api/terminals/{terminal}/commands", json={"command": FORTY_LINES})
    assert response.status_code == 200, response.text
    data = response.json()["data"]
    assert data["exitCode"] == 0, data
    assert len(data["output"].encode()) <= LIMIT and "line-039" in data["output"], data
    assert "line-000" not in data["output"] and data["truncated"] is True, data
