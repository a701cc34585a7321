"""Command terminals: a program run directly (no shell), on a PTY or on pipes, its input, output, limit and exit;
and the usage examples of seed 002 (quick command, interactive session, streaming) through the REST API."""

from __future__ import annotations

import re
import time

import pytest

from terminals.models import AuditEvent

from .client import Api
from .helpers import names_field
from .servers import wait_for

SLACK = 4096  # the output buffer evicts once it is this far over its byte limit (at least 4096 bytes)


def assert_invalid(response, field: str | None = None) -> dict:
    assert response.status_code == 400, response.text
    body = response.json()
    assert body["success"] is False
    assert body["error"]["code"] == "INVALID_INPUT"
    if field is not None:
        assert names_field(body["error"], field), body
        assert field in body["error"]["message"]
    return body["error"]


def wait_exit(api: Api, terminal: str, timeout_ms: int = 10000) -> dict:
    response = api.post(f"/api/terminals/{terminal}/wait", params={"timeoutMs": timeout_ms})
    assert response.status_code == 200, response.text
    return response.json()["data"]


def created_terminals(api: Api) -> set[str]:
    listed = api.get("/api/terminals", params={"status": "all"}).json()["data"]["terminals"]
    return {item["terminalId"] for item in listed}


def stream(api: Api, terminal: str, name: str, **params) -> str:
    return api.output(terminal, stream=name, **params)["output"]


# Running a program directly


def test_command_runs_without_a_shell_and_waits_for_exit(alice):
    """{"command": "echo", "args": ["a b", "c"]} runs echo itself: "a b c", and wait reports exit 0."""
    created = alice.create(command="echo", args=["a b", "c"])
    terminal = created["terminalId"]
    assert created["command"].endswith("/echo")
    assert created["command"].startswith("/")
    assert created["args"] == ["a b", "c"]
    assert created["shell"] == ""
    assert created["pty"] is True
    started = time.monotonic()
    waited = wait_exit(alice, terminal, 5000)
    assert waited == {"terminalId": terminal, "exitCode": 0, "signal": None, "timedOut": False}
    assert time.monotonic() - started < 5
    output = alice.output(terminal)
    assert output["output"] == "a b c"
    assert output["exitStatus"] == {"exitCode": 0, "signal": None}
    assert output["isActive"] is False
    record = alice.wait_status(terminal, "exited")
    assert record["exitCode"] == 0
    assert record["command"] == created["command"]


def test_command_arguments_reach_the_program_unexpanded(alice):
    """Arguments are passed as they are: no globbing, no variable expansion, no word splitting."""
    terminal = alice.create(command="printf", args=["[%s]\\n", "*", "$HOME", "two words", ""])["terminalId"]
    wait_exit(alice, terminal)
    assert alice.output(terminal)["output"] == "[*]\n[$HOME]\n[two words]\n[]"


def test_command_missing_program_is_refused_naming_command(orm, alice):
    """A program that is not on PATH, or a path that is not executable, is 400 naming command; nothing is created."""
    before = created_terminals(alice)
    for command in ("no-such-program-4f1c", "/etc/passwd", "./missing"):
        error = assert_invalid(alice.post("/api/terminals", json={"command": command}), "command")
        assert command in error["message"]
    assert created_terminals(alice) == before


def test_command_and_shell_together_are_refused(alice):
    """Giving both a shell and a command is 400 INVALID_INPUT naming command."""
    assert_invalid(alice.post("/api/terminals", json={"shell": "/bin/bash", "command": "echo"}), "command")


def test_command_args_without_command_are_refused(alice):
    """args without a command is 400 naming args."""
    assert_invalid(alice.post("/api/terminals", json={"args": ["x"]}), "args")


def test_command_env_as_a_list_of_name_value_pairs(orm, alice):
    """env may be the Agent Client Protocol's list of {name, value}: FOO=bar reaches the program."""
    terminal = alice.create(command="sh", args=["-c", "echo $FOO-$BAZ"],
                            env=[{"name": "FOO", "value": "bar"}, {"name": "BAZ", "value": "qux"}])["terminalId"]
    assert wait_exit(alice, terminal)["exitCode"] == 0
    assert alice.output(terminal)["output"] == "bar-qux"
    event = AuditEvent.objects.get(terminal_id=terminal, action="create")
    assert event.details["env"] == ["BAZ", "FOO"]
    assert "bar" not in str(event.details)


def test_command_env_as_an_object_works_too(alice):
    """env may also be an object of names to values."""
    terminal = alice.create(command="sh", args=["-c", "echo $FOO"], env={"FOO": "object"})["terminalId"]
    wait_exit(alice, terminal)
    assert alice.output(terminal)["output"] == "object"


@pytest.mark.parametrize("env", [[{"name": "FOO"}], [{"name": "FOO", "value": 1}], ["FOO=bar"],
                                 [{"name": "1BAD", "value": "x"}], "FOO=bar"])
def test_command_malformed_env_is_refused(alice, env):
    """An env list item without both name and value, a non-string value or a bad name is 400 naming env."""
    assert_invalid(alice.post("/api/terminals", json={"command": "true", "env": env}), "env")


def test_command_wait_with_short_timeout_times_out(alice):
    """Waiting 200 ms on `sleep 5` answers timedOut true with no exit status, after about 200 ms."""
    terminal = alice.create(command="sleep", args=["5"])["terminalId"]
    started = time.monotonic()
    waited = wait_exit(alice, terminal, 200)
    took = time.monotonic() - started
    assert waited == {"terminalId": terminal, "timedOut": True, "exitCode": None, "signal": None}
    assert 0.2 <= took < 3
    assert alice.get(f"/api/terminals/{terminal}").json()["data"]["status"] == "active"
    response = alice.delete(f"/api/terminals/{terminal}")
    assert response.status_code == 200, response.text


def test_command_wait_with_zero_timeout_reports_an_exit_that_already_happened(alice):
    """timeoutMs=0 polls without waiting: on a program that has already exited it answers its exit status, not a timeout."""
    terminal = alice.create(command="sh", args=["-c", "exit 4"])["terminalId"]
    assert wait_exit(alice, terminal, 5000)["exitCode"] == 4
    alice.wait_status(terminal, "exited")
    waited = wait_exit(alice, terminal, 0)
    assert waited == {"terminalId": terminal, "timedOut": False, "exitCode": 4, "signal": None}


def test_command_wait_with_zero_timeout_on_a_running_program_times_out_at_once(alice):
    """timeoutMs=0 on a running program answers timedOut true straight away."""
    terminal = alice.create(command="sleep", args=["30"])["terminalId"]
    started = time.monotonic()
    waited = wait_exit(alice, terminal, 0)
    assert waited == {"terminalId": terminal, "timedOut": True, "exitCode": None, "signal": None}
    assert time.monotonic() - started < 2


@pytest.mark.parametrize(
    "args, status",
    [
        (["-c", "echo three; exit 3"], {"exitCode": 3, "signal": None}),
        (["-c", "kill -TERM $$"], {"exitCode": None, "signal": "SIGTERM"}),
    ],
    ids=["exit-code", "signal"],
)
def test_command_exit_status_shows_in_output_wait_and_record(alice, args, status):
    """An exited command terminal reports {exitCode, signal} in output, wait and its record (status exited)."""
    terminal = alice.create(command="sh", args=args)["terminalId"]
    waited = wait_exit(alice, terminal)
    assert {"exitCode": waited["exitCode"], "signal": waited["signal"]} == status
    assert alice.output(terminal)["exitStatus"] == status
    assert alice.output(terminal, fromByte=0)["exitStatus"] == status
    stats = alice.get(f"/api/terminals/{terminal}/stats").json()["data"]
    assert stats["exitStatus"] == status
    assert stats["isActive"] is False
    record = alice.wait_status(terminal, "exited")
    assert {"exitCode": record["exitCode"], "signal": record["signal"]} == status


def test_command_cwd_applies(alice, tmp_path):
    """A command terminal runs in the cwd it is given."""
    terminal = alice.create(command="pwd", cwd=str(tmp_path))["terminalId"]
    wait_exit(alice, terminal)
    assert alice.output(terminal)["output"] == str(tmp_path.resolve())


# The output byte limit


def test_output_byte_limit_bounds_the_buffer_and_reports_truncation(alice):
    """3000 "€" with outputByteLimit 1024: the buffer stays within the limit plus slack, reads say truncated, and
    what is kept starts on a whole character."""
    created = alice.create(command="sh", args=["-c", "printf '€%.0s' $(seq 1 3000)"], outputByteLimit=1024)
    terminal = created["terminalId"]
    assert created["outputByteLimit"] == 1024
    assert wait_exit(alice, terminal)["exitCode"] == 0
    stats = alice.get(f"/api/terminals/{terminal}/stats").json()["data"]
    assert stats["totalBytes"] == 9000
    assert stats["bufferBytes"] <= 1024 + SLACK
    assert stats["oldestByte"] > 0
    output = alice.output(terminal)
    assert output["truncated"] is True
    assert output["output"]
    assert set(output["output"]) == {"€"}
    assert len(output["output"].encode()) <= 1024 + SLACK
    chunk = alice.output(terminal, fromByte=0)
    assert chunk["truncated"] is True
    assert set(chunk["chunk"]) == {"€"}
    assert alice.get(f"/api/terminals/{terminal}").json()["data"]["outputByteLimit"] == 1024


def test_output_byte_limit_below_one_is_refused(alice):
    """outputByteLimit must be a positive integer."""
    assert_invalid(alice.post("/api/terminals", json={"command": "true", "outputByteLimit": 0}), "outputByteLimit")


# Pipes instead of a PTY


def test_pipes_keep_stdout_and_stderr_apart(alice):
    """With pty false, stream=stdout has only "out", stream=stderr only "err", stream=both both."""
    created = alice.create(command="sh", args=["-c", "echo out; echo err >&2"], pty=False)
    terminal = created["terminalId"]
    assert created["pty"] is False
    assert wait_exit(alice, terminal)["exitCode"] == 0
    assert stream(alice, terminal, "stdout") == "out"
    assert stream(alice, terminal, "stderr") == "err"
    assert sorted(stream(alice, terminal, "both").split("\n")) == ["err", "out"]
    assert sorted(alice.output(terminal)["output"].split("\n")) == ["err", "out"]
    assert alice.output(terminal, fromByte=0, stream="stdout")["chunk"] == "out\n"
    assert alice.output(terminal, fromByte=0, stream="stderr")["chunk"] == "err\n"
    assert alice.output(terminal, fromByte=0, stream="stdout")["eof"] is True


def test_pipes_stdin_reaches_the_program_and_eof_ends_it(orm, alice):
    """`cat` on pipes echoes the input it is sent; input "" with eof true closes its stdin, and it exits 0."""
    terminal = alice.create(command="cat", pty=False)["terminalId"]
    sent = alice.send(terminal, "hello").json()["data"]
    assert sent["bytesWritten"] == 6
    wait_for(lambda: stream(alice, terminal, "stdout") == "hello", 10, "hello on stdout")
    assert detail_status(alice, terminal) == "active"
    closed = alice.send(terminal, "", eof=True).json()["data"]
    assert closed["bytesWritten"] == 0
    waited = wait_exit(alice, terminal)
    assert waited["exitCode"] == 0
    assert waited["signal"] is None
    assert stream(alice, terminal, "stdout") == "hello"
    assert stream(alice, terminal, "stderr") == ""
    closes = [event for event in AuditEvent.objects.filter(terminal_id=terminal, action="input")
              if event.details.get("close")]
    assert len(closes) == 1


def detail_status(api: Api, terminal: str) -> str:
    return api.get(f"/api/terminals/{terminal}").json()["data"]["status"]


def test_pipes_wc_counts_exactly_the_bytes_sent_before_eof(alice):
    """`wc -c` counts every byte sent (without added newlines when appendNewline is false) and the eof input itself."""
    terminal = alice.create(command="wc", args=["-c"], pty=False)["terminalId"]
    alice.send(terminal, "abc", appendNewline=False)
    alice.send(terminal, "€", appendNewline=False)
    alice.send(terminal, "x" * 60000, appendNewline=False)
    alice.send(terminal, "line")  # the added newline counts: 5 bytes
    alice.send(terminal, "tail", eof=True)  # no newline is added to the eof input
    assert wait_exit(alice, terminal)["exitCode"] == 0
    assert stream(alice, terminal, "stdout").strip() == str(3 + 3 + 60000 + 5 + 4)


def test_pipes_input_after_eof_is_refused(alice):
    """Once stdin is closed, more input to a still-running program is refused, not silently dropped."""
    terminal = alice.create(command="sh", args=["-c", "cat; sleep 30"], pty=False)["terminalId"]
    alice.send(terminal, "", eof=True)
    response = alice.post(f"/api/terminals/{terminal}/input", json={"input": "late"})
    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] == "INVALID_INPUT"
    assert "closed" in response.json()["error"]["message"]


def test_pipes_without_a_command_are_refused_naming_pty(alice):
    """pty false with a shell (no command) is 400 naming pty."""
    assert_invalid(alice.post("/api/terminals", json={"pty": False}), "pty")
    assert_invalid(alice.post("/api/terminals", json={"shell": "/bin/bash", "pty": False}), "pty")


def test_pipes_have_no_size_in_create_list_and_detail(orm, alice):
    """A pty:false terminal shows cols and rows as null in the answer to create, in the list and in the detail
    alike; giving a size with pty false is refused and creates nothing."""
    created = alice.create(command="cat", pty=False)
    terminal = created["terminalId"]
    listed = [item for item in alice.get("/api/terminals").json()["data"]["terminals"] if item["terminalId"] == terminal]
    detail = alice.get(f"/api/terminals/{terminal}").json()["data"]
    for shown in (created, listed[0], detail):
        assert (shown["cols"], shown["rows"]) == (None, None), shown
    pty = alice.create(command="cat", cols=100, rows=30)
    assert (pty["cols"], pty["rows"]) == (100, 30)

    before = alice.get("/api/terminals").json()["data"]["count"]
    assert_invalid(alice.post("/api/terminals", json={"command": "cat", "pty": False, "cols": 100}), "cols")
    assert_invalid(alice.post("/api/terminals", json={"command": "cat", "pty": False, "rows": 30}), "rows")
    assert alice.get("/api/terminals").json()["data"]["count"] == before


def test_pipes_have_no_screen_and_no_size(orm, alice):
    """A pty:false terminal answers 400 to screen and resize; its record has no resize."""
    terminal = alice.create(command="cat", pty=False)["terminalId"]
    assert_invalid(alice.get(f"/api/terminals/{terminal}/screen"))
    assert_invalid(alice.post(f"/api/terminals/{terminal}/resize", json={"cols": 100, "rows": 30}))
    assert not AuditEvent.objects.filter(terminal_id=terminal, action="resize", outcome="ok").exists()
    alice.send(terminal, "still here")
    wait_for(lambda: stream(alice, terminal, "stdout") == "still here", 10, "cat to keep working")


def test_pipes_signal_reaches_the_program(alice):
    """A signal to a pty:false terminal goes to the program's own process group."""
    created = alice.create(command="sleep", args=["30"], pty=False)
    terminal = created["terminalId"]
    response = alice.post(f"/api/terminals/{terminal}/signal", json={"signal": "SIGTERM"})
    assert response.status_code == 200, response.text
    assert response.json()["data"]["processGroup"] == created["pid"]
    assert wait_exit(alice, terminal)["signal"] == "SIGTERM"


def test_pty_eof_is_refused(alice):
    """eof on a PTY terminal is 400 (send Ctrl-D instead); the terminal keeps working."""
    terminal = alice.create(command="cat")["terminalId"]
    assert_invalid(alice.post(f"/api/terminals/{terminal}/input", json={"input": "", "eof": True}))
    alice.send(terminal, "pty-alive")
    wait_for(lambda: alice.output(terminal)["output"].count("pty-alive") == 2, 10, "cat's echo and reply")


def test_pty_eof_refusal_sends_none_of_the_input(alice):
    """A refused eof request on a PTY terminal has no effect: its input text is not typed either."""
    terminal = alice.create(command="cat")["terminalId"]
    response = alice.post(f"/api/terminals/{terminal}/input", json={"input": "leaked", "eof": True})
    assert_invalid(response)
    alice.send(terminal, "marker")
    wait_for(lambda: alice.output(terminal)["output"].count("marker") == 2, 10, "cat's echo and reply")
    assert "leaked" not in alice.output(terminal)["output"]


@pytest.mark.parametrize("params", [{"stream": "stdout"}, {"stream": "stderr"}, {"stream": "stdout", "fromByte": 0}])
def test_pty_stream_selection_is_refused(alice, params):
    """stream=stdout or stderr on a PTY terminal (one merged stream) is 400."""
    terminal = alice.create(command="echo", args=["merged"])["terminalId"]
    wait_exit(alice, terminal)
    assert_invalid(alice.get(f"/api/terminals/{terminal}/output", params=params))
    assert alice.output(terminal, stream="both")["output"] == "merged"


def test_unknown_stream_is_refused_naming_stream(alice):
    """A stream other than both, stdout and stderr is 400 naming stream."""
    terminal = alice.create(command="true", pty=False)["terminalId"]
    assert_invalid(alice.get(f"/api/terminals/{terminal}/output", params={"stream": "stdin"}), "stream")


def test_commands_endpoint_refuses_a_command_terminal(alice):
    """POST /commands needs a shell terminal: on a command terminal it is 400."""
    terminal = alice.create(command="cat")["terminalId"]
    assert_invalid(alice.post(f"/api/terminals/{terminal}/commands", json={"command": "echo hi"}))


# Seed 002's usage examples through the REST API


def test_usage_quick_single_command(alice):
    """Quick single command: create an `uptime` terminal, wait for it, read its output, delete it."""
    terminal = alice.create(command="uptime")["terminalId"]
    waited = wait_exit(alice, terminal)
    assert waited["exitCode"] == 0
    output = alice.output(terminal)
    assert "load average" in output["output"]
    assert output["exitStatus"] == {"exitCode": 0, "signal": None}
    deleted = alice.delete(f"/api/terminals/{terminal}")
    assert deleted.status_code == 200, deleted.text
    assert deleted.json()["data"]["status"] == "exited"
    assert deleted.json()["data"]["released"] is not None
    after = alice.get(f"/api/terminals/{terminal}/output")
    assert after.status_code == 409
    assert after.json()["error"]["code"] == "TERMINAL_INACTIVE"


def test_usage_interactive_session_runs_commands_in_turn(alice, tmp_path):
    """Interactive session: one shell, three commands through POST /commands, each with its own output and exit code."""
    (tmp_path / "notes.txt").write_text("first\nsecond\n")
    terminal = alice.create(shell="/bin/bash", cwd=str(tmp_path))["terminalId"]
    expected = [
        ("pwd", str(tmp_path.resolve()), 0),
        ("wc -l < notes.txt", "2", 0),
        ("cat missing.txt", "cat: missing.txt: No such file or directory", 1),
    ]
    for command, output, code in expected:
        response = alice.post(f"/api/terminals/{terminal}/commands", json={"command": command, "stripAnsi": True})
        assert response.status_code == 200, response.text
        data = response.json()["data"]
        assert data["status"] == "completed", data
        assert data["timedOut"] is False
        assert data["exitCode"] == code, data
        assert data["output"].strip() == output, data
    listed = alice.get(f"/api/terminals/{terminal}/commands").json()["data"]
    assert [item["command"] for item in listed["commands"] if item["source"] == "api"] == [c for c, _, _ in expected]
    deleted = alice.delete(f"/api/terminals/{terminal}")
    assert deleted.status_code == 200, deleted.text


def test_usage_streaming_output_by_polling_since(alice):
    """Streaming: a tick loop started with wait false, polled with since=nextReadFrom until it completes; every tick-N
    is seen exactly once and in order."""
    terminal = alice.create(shell="/bin/bash")["terminalId"]
    alice.run(terminal, "true")
    since = alice.output(terminal)["nextReadFrom"]
    response = alice.post(
        f"/api/terminals/{terminal}/commands",
        json={"command": "for i in $(seq 1 30); do echo tick-$i; sleep 0.02; done", "wait": False},
    )
    assert response.status_code == 200, response.text
    started = response.json()["data"]
    assert started["status"] == "running"
    command_id = started["commandId"]
    ticks: list[str] = []

    def poll() -> bool:
        nonlocal since
        # The command's state is read before the output, so the last poll sees everything it printed.
        done = alice.get(f"/api/terminals/{terminal}/commands/{command_id}").json()["data"]["status"] == "completed"
        read = alice.output(terminal, since=since, stripAnsi="true")
        finished = read["output"].split("\n")[: read["nextReadFrom"] - since] if read["output"] else []
        ticks.extend(line for line in finished if re.fullmatch(r"tick-\d+", line))
        since = read["nextReadFrom"]
        return done

    wait_for(poll, 15, f"command {command_id} to complete")
    assert ticks == [f"tick-{number}" for number in range(1, 31)]
    final = alice.get(f"/api/terminals/{terminal}/commands/{command_id}").json()["data"]
    assert final["exitCode"] == 0
    assert [line for line in final["output"].split("\n") if line.startswith("tick-")] == ticks
