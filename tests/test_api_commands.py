"""Running commands through the REST API: exact output, exit codes and signals, prompts waiting for input,
timeouts, history and the non-interactive defaults, in bash, zsh and dash alike."""

from __future__ import annotations

import re
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from terminals.models import AuditEvent

from .client import Api, elapsed
from .servers import wait_for

BASH, ZSH, DASH = "/bin/bash", "/usr/bin/zsh", "/bin/dash"
SHELLS = [BASH, ZSH, DASH]
HOOKED_SHELLS = [BASH, ZSH]  # shells whose hooks report commands typed by people
shells = pytest.mark.parametrize("shell", SHELLS, ids=lambda path: path.rsplit("/", 1)[-1])
hooked_shells = pytest.mark.parametrize("shell", HOOKED_SHELLS, ids=lambda path: path.rsplit("/", 1)[-1])

ESC = "\x1b"
# An end marker with a token the service never handed out: it must stay plain output.
FAKE_END = f"{ESC}]6973;fake;E;0\x07"


# Helpers


def commands_path(terminal: str, command_id: str = "") -> str:
    return f"/api/terminals/{terminal}/commands" + (f"/{command_id}" if command_id else "")


def post_command(api: Api, terminal: str, command: str, **body):
    return api.post(commands_path(terminal), json={"command": command, **body})


def run_done(api: Api, terminal: str, command: str, **body) -> dict:
    """Runs a command that must finish within its timeout; returns its data."""
    data = api.command(terminal, command, **body)
    assert data["status"] == "completed", data
    assert data["timedOut"] is False, data
    return data


def wait_command(api: Api, terminal: str, command_id: str, timeout_ms: int = 10_000, **params) -> dict:
    response = api.post(f"{commands_path(terminal, command_id)}/wait", params={"timeoutMs": timeout_ms, **params})
    assert response.status_code == 200, response.text
    return response.json()["data"]


def get_command(api: Api, terminal: str, command_id: str, **params) -> dict:
    response = api.get(commands_path(terminal, command_id), params=params)
    assert response.status_code == 200, response.text
    return response.json()["data"]


def history(api: Api, terminal: str) -> dict:
    response = api.get(commands_path(terminal))
    assert response.status_code == 200, response.text
    return response.json()["data"]


def terminal_record(api: Api, terminal: str) -> dict:
    response = api.get(f"/api/terminals/{terminal}")
    assert response.status_code == 200, response.text
    return response.json()["data"]


def shell_terminal(api: Api, shell: str, **body) -> str:
    return api.create(shell=shell, **body)["terminalId"]


def slow_start_env(shell: str, folder) -> dict[str, str]:
    """Environment for a shell whose own startup file prints a line and takes half a second,
    so a command sent right after creation is typed before the first prompt."""
    # A command substitution keeps the sleep in the shell's own process group: no foreground program
    # (which would rightly make the terminal busy), just a shell not yet at its prompt.
    startup = "echo startup-noise; : $(sleep 0.5)\n"
    if shell == BASH:
        (folder / ".bashrc").write_text(startup)
        return {"HOME": str(folder)}
    if shell == ZSH:
        (folder / ".zshrc").write_text(startup)
        return {"ZDOTDIR": str(folder)}
    (folder / "envrc").write_text(startup)
    return {"ENV": str(folder / "envrc")}


# Exact output


@shells
def test_command_output_is_exactly_what_the_command_printed(alice, shell):
    """The first command of a fresh shell returns its output alone: no typed line, no prompt, no startup text."""
    terminal = shell_terminal(alice, shell)
    data = run_done(alice, terminal, "echo hello")
    assert data["output"] == "hello\n"
    assert data["exitCode"] == 0
    assert data["signal"] is None
    assert data["command"] == "echo hello"
    assert data["source"] == "api"
    assert data["commandId"]
    assert data["waitingForInput"] is False
    assert data["truncated"] is False
    assert (data["totalLines"], data["linesShown"], data["linesOmitted"]) == (1, 1, 0)
    assert data["startedAt"].endswith("Z") and data["finishedAt"].endswith("Z")
    assert data["durationMs"] >= 0
    # The next command shows nothing of the previous one or of the prompt in between.
    assert run_done(alice, terminal, "echo second")["output"] == "second\n"


@shells
def test_command_sent_during_startup_excludes_startup_output(alice, shell, tmp_path):
    """A command typed while the shell still runs its startup file returns only its own output."""
    terminal = shell_terminal(alice, shell, env=slow_start_env(shell, tmp_path))
    data = run_done(alice, terminal, "echo hello")
    assert data["output"] == "hello\n"
    assert data["exitCode"] == 0
    assert "startup-noise" in alice.full_output(terminal)


@shells
def test_command_without_output_returns_empty_output(alice, shell):
    """A command that prints nothing returns an empty output, not a prompt or the typed line."""
    terminal = shell_terminal(alice, shell)
    data = run_done(alice, terminal, "true")
    assert data["output"] == ""
    assert data["totalLines"] == 0
    assert data["exitCode"] == 0


# Exit codes and signals


@shells
@pytest.mark.parametrize(
    ("command", "exit_code"),
    [("true", 0), ("false", 1), ("(exit 42)", 42), ("no-such-command-xyz", 127), ("true | false", 1)],
    ids=["true", "false", "exit-42", "missing-command", "pipeline"],
)
def test_command_exit_code_is_the_shells_status(alice, shell, command, exit_code):
    """The exit code is the shell's own $? for the command: plain, failing, subshell, missing, pipeline."""
    terminal = shell_terminal(alice, shell)
    data = run_done(alice, terminal, command)
    assert data["exitCode"] == exit_code
    assert data["signal"] is None


@shells
@pytest.mark.parametrize(
    ("command", "exit_code", "signal"),
    [("sh -c 'kill -TERM $$'", 143, "SIGTERM"), ("bash -c 'kill -9 $$'", 137, "SIGKILL")],
    ids=["SIGTERM", "SIGKILL"],
)
def test_command_killed_by_signal_reports_the_signal(alice, shell, command, exit_code, signal):
    """A command killed by a signal reports 128 + N as its exit code and names the signal."""
    terminal = shell_terminal(alice, shell)
    data = run_done(alice, terminal, command)
    assert data["exitCode"] == exit_code
    assert data["signal"] == signal
    # The shell survives: the next command runs normally.
    assert run_done(alice, terminal, "echo alive")["output"] == "alive\n"


# Marker-like and escape-sequence output


@shells
def test_command_printing_fake_end_marker_does_not_end_early(alice, shell):
    """An end marker with a token the service never handed out is plain output; the command runs on."""
    terminal = shell_terminal(alice, shell)
    data = run_done(alice, terminal, r"printf '\033]6973;fake;E;0\007'; echo after")
    assert data["output"] == FAKE_END + "after\n"
    assert data["exitCode"] == 0


@shells
def test_command_printing_marker_with_guessed_token_does_not_end_early(alice, shell):
    """A marker-like sequence with an arbitrary hex token (like a nonce) neither ends the command nor vanishes."""
    terminal = shell_terminal(alice, shell)
    data = run_done(alice, terminal, r"printf 'x\033]6973;%s;E;0\007' deadbeef; (exit 4)")
    assert data["output"] == f"x{ESC}]6973;deadbeef;E;0\x07"
    assert data["exitCode"] == 4
    after = run_done(alice, terminal, r"printf 'x\033]6973;%s;E;0\007' deadbeef; echo after")
    assert after["output"] == f"x{ESC}]6973;deadbeef;E;0\x07after\n"
    assert after["exitCode"] == 0


@shells
def test_command_printing_fake_end_marker_then_exit_reports_the_shells_exit(alice, shell):
    """A fake end marker followed by `exit 3`: the command reports 3 and the terminal is exited with 3."""
    terminal = shell_terminal(alice, shell)
    data = run_done(alice, terminal, r"printf '\033]6973;fake;E;0\007'; exit 3")
    assert data["exitCode"] == 3
    assert data["signal"] is None
    assert data["output"].startswith(FAKE_END)
    record = alice.wait_status(terminal, "exited")
    assert record["exitCode"] == 3
    assert record["signal"] is None


# Multi-line commands, here-documents, comments, partial lines, colours, malformed lines


@shells
def test_command_spanning_several_lines_returns_all_output(alice, shell):
    """A command of several lines runs as one command; its output holds no continuation prompts."""
    terminal = shell_terminal(alice, shell)
    data = run_done(alice, terminal, "echo one\necho two\n(exit 6)")
    assert data["output"] == "one\ntwo\n"
    assert data["exitCode"] == 6


@shells
def test_command_with_here_document_returns_its_lines(alice, shell):
    """A here-document ending at the command's last line is closed properly and printed as is."""
    terminal = shell_terminal(alice, shell)
    data = run_done(alice, terminal, "cat <<'EOF'\nline1\nline2\nEOF")
    assert data["output"] == "line1\nline2\n"
    assert data["exitCode"] == 0
    assert run_done(alice, terminal, "echo next")["output"] == "next\n"


@shells
def test_command_ending_in_comment_still_completes(alice, shell):
    """A trailing comment does not swallow the end marker: the command completes with its status."""
    terminal = shell_terminal(alice, shell)
    data = run_done(alice, terminal, "echo hi # a comment", timeoutMs=5000)
    assert data["output"] == "hi\n"
    assert data["exitCode"] == 0
    failed = run_done(alice, terminal, "(exit 2) # another comment", timeoutMs=5000)
    assert failed["output"] == ""
    assert failed["exitCode"] == 2


@shells
def test_command_output_without_final_newline_is_kept_exact(alice, shell):
    """Output that does not end in a newline is returned as printed, with nothing appended."""
    terminal = shell_terminal(alice, shell)
    data = run_done(alice, terminal, "printf abc")
    assert data["output"] == "abc"
    assert data["totalLines"] == 1
    assert run_done(alice, terminal, "echo def")["output"] == "def\n"


@shells
def test_command_coloured_output_raw_or_stripped(alice, shell):
    """Coloured output keeps its escapes by default; stripAnsi=true removes them."""
    terminal = shell_terminal(alice, shell)
    raw = run_done(alice, terminal, r"printf '\033[31mred\033[0m\n'")
    assert raw["output"] == f"{ESC}[31mred{ESC}[0m\n"
    stripped = run_done(alice, terminal, r"printf '\033[31mred\033[0m\n'", stripAnsi=True)
    assert stripped["output"] == "red\n"
    again = get_command(alice, terminal, raw["commandId"], stripAnsi="true")
    assert again["output"] == "red\n"


@shells
def test_command_with_syntax_error_reports_the_shells_message(alice, shell):
    """A line the shell refuses completes with a non-zero status and the shell's error message as its output."""
    terminal = shell_terminal(alice, shell)
    assert run_done(alice, terminal, "true")["exitCode"] == 0  # the shell is at its prompt
    data = run_done(alice, terminal, "fi", timeoutMs=5000)
    assert data["exitCode"] in (1, 2)
    assert "error" in data["output"].lower(), data["output"]
    assert "fi" in data["output"], data["output"]
    assert run_done(alice, terminal, "echo next")["output"] == "next\n"


@shells
def test_command_with_syntax_error_before_first_prompt_completes(alice, shell, tmp_path):
    """A line the shell refuses, typed before its first prompt, still completes with the shell's status."""
    terminal = shell_terminal(alice, shell, env=slow_start_env(shell, tmp_path))
    data = alice.command(terminal, "fi", timeoutMs=5000)
    assert data["status"] == "completed", data
    assert data["exitCode"] in (1, 2)
    assert run_done(alice, terminal, "echo next")["output"] == "next\n"


def sleeping_bashrc(folder, seconds: float) -> dict[str, str]:
    """A HOME whose .bashrc sleeps before bash shows its first prompt."""
    (folder / ".bashrc").write_text(f"sleep {seconds}\n")
    return {"HOME": str(folder)}


def test_command_sent_while_the_shell_starts_waits_for_its_first_prompt(alice, tmp_path):
    """A .bashrc that sleeps 1.5 s, and a command sent at once with a 1 s timeout: it waits for the first prompt
    (the first 2 s of that wait do not count against the timeout), then runs and completes."""
    terminal = shell_terminal(alice, BASH, env=sleeping_bashrc(tmp_path, 1.5))
    data = run_done(alice, terminal, "echo hi-$((40+2))", timeoutMs=1000)
    assert (data["output"], data["exitCode"]) == ("hi-42\n", 0)


def test_command_is_refused_untyped_when_the_shell_shows_no_prompt_in_time(alice, orm, tmp_path):
    """A .bashrc that sleeps 5 s, and a command sent at once with a 1 s timeout: no prompt within the timeout and
    2 s, so 409 TERMINAL_BUSY says the shell has not started and what to do, nothing is typed, the refusal is
    audited; once the shell has started, a command runs."""
    terminal = shell_terminal(alice, BASH, env=sleeping_bashrc(tmp_path, 5))
    refused = post_command(alice, terminal, "echo never-''typed", timeoutMs=1000)
    assert refused.status_code == 409, refused.text
    error = refused.json()["error"]
    assert error["code"] == "TERMINAL_BUSY"
    assert error["details"] == {"startingShell": {"waitedMs": 3000}}
    assert "has not shown its first prompt within 3 s" in error["message"]
    assert "nothing was typed" in error["message"] and "longer timeoutMs" in error["message"]
    assert AuditEvent.objects.filter(terminal_id=terminal, action="command", outcome="TERMINAL_BUSY").exists()

    assert run_done(alice, terminal, "echo after-''start", timeoutMs=10_000)["output"] == "after-start\n"
    assert "never-" not in alice.full_output(terminal)
    assert [item["command"] for item in history(alice, terminal)["commands"]] == ["echo after-''start"]


@shells
def test_command_ending_in_line_continuation_completes(alice, shell):
    """A command whose last line ends in a backslash does not swallow the service's closing line: it completes."""
    terminal = shell_terminal(alice, shell)
    data = alice.command(terminal, "echo a \\", timeoutMs=3000)
    assert data["status"] == "completed", data
    assert data["exitCode"] == 0
    assert data["output"].startswith("a"), data["output"]
    assert run_done(alice, terminal, "echo next")["output"] == "next\n"


# The shell's prompt changed by a command

PROMPT_CHANGES = {
    BASH: "PROMPT_COMMAND='echo hi'; PS1='changed> '",
    ZSH: "precmd() { echo hi; }; PROMPT='changed> '",
    DASH: "PS1='changed> '",
}


@shells
def test_command_after_prompt_change_still_exact(alice, shell):
    """After a command replaces PS1 (and PROMPT_COMMAND / precmd), later commands keep exact output and codes."""
    terminal = shell_terminal(alice, shell)
    assert run_done(alice, terminal, PROMPT_CHANGES[shell])["exitCode"] == 0
    data = run_done(alice, terminal, "echo next")
    assert data["output"] == "next\n"
    assert data["exitCode"] == 0
    failed = run_done(alice, terminal, "echo failing; (exit 5)")
    assert failed["output"] == "failing\n"
    assert failed["exitCode"] == 5
    assert run_done(alice, terminal, "printf abc")["output"] == "abc"


# State that persists


@shells
def test_command_cd_and_export_persist(alice, shell, tmp_path):
    """`cd` and `export` act on the shell itself, so the next command sees them."""
    terminal = shell_terminal(alice, shell)
    assert run_done(alice, terminal, f"cd {tmp_path}")["exitCode"] == 0
    assert run_done(alice, terminal, "export GREETING=bonjour")["exitCode"] == 0
    assert run_done(alice, terminal, "pwd")["output"] == f"{tmp_path}\n"
    assert run_done(alice, terminal, "sh -c 'echo $GREETING'")["output"] == "bonjour\n"


# Ending the shell


@shells
def test_command_exit_ends_terminal_with_its_status(alice, shell):
    """`exit` ends the terminal; the command reports the shell's exit status (0)."""
    terminal = shell_terminal(alice, shell)
    data = run_done(alice, terminal, "exit")
    assert data["exitCode"] == 0
    assert data["signal"] is None
    record = alice.wait_status(terminal, "exited")
    assert record["exitCode"] == 0


@shells
def test_command_exit_with_code_ends_terminal_with_that_code(alice, shell):
    """`exit 3` ends the terminal with 3, and the command reports 3; the command stays readable."""
    terminal = shell_terminal(alice, shell)
    data = run_done(alice, terminal, "echo bye; exit 3")
    assert data["exitCode"] == 3
    assert data["output"].startswith("bye\n")
    record = alice.wait_status(terminal, "exited")
    assert record["exitCode"] == 3
    assert record["signal"] is None
    again = get_command(alice, terminal, data["commandId"])
    assert again["status"] == "completed"
    assert again["exitCode"] == 3
    refused = post_command(alice, terminal, "echo again")
    assert refused.status_code == 409, refused.text
    assert refused.json()["error"]["code"] == "TERMINAL_INACTIVE"


@shells
def test_command_false_under_set_e_ends_shell_with_1(alice, shell):
    """After `set -e`, a failing command ends the shell; the command reports 1 and so does the terminal."""
    terminal = shell_terminal(alice, shell)
    assert run_done(alice, terminal, "set -e")["exitCode"] == 0
    data = run_done(alice, terminal, "false")
    assert data["exitCode"] == 1
    record = alice.wait_status(terminal, "exited")
    assert record["exitCode"] == 1


# Commands that wait for input


@shells
def test_command_waiting_for_input_returns_early_then_finishes(alice, shell):
    """`read` stops the wait long before the timeout with waitingForInput; input and a wait finish it."""
    terminal = shell_terminal(alice, shell)
    started = time.monotonic()
    data = alice.command(terminal, 'echo asking; read -r name; echo "hi $name"', timeoutMs=3000)
    took = elapsed(started)
    assert took < 2.0, f"returned after {took:.2f} s"
    assert data["waitingForInput"] is True
    assert data["timedOut"] is False
    assert data["status"] == "running"
    assert data["exitCode"] is None
    assert data["finishedAt"] is None and data["durationMs"] is None
    assert data["output"] == "asking\n"
    alice.send(terminal, "bob")
    finished = wait_command(alice, terminal, data["commandId"], 5000)
    assert finished["status"] == "completed"
    assert finished["exitCode"] == 0
    assert "hi bob\n" in finished["output"]
    assert finished["output"].startswith("asking\n")
    assert finished["waitingForInput"] is False
    assert finished["timedOut"] is False


def test_command_read_with_prompt_shows_the_prompt_bash(alice):
    """bash's `read -p` shows its prompt text in the partial output while it waits for input."""
    terminal = shell_terminal(alice, BASH)
    started = time.monotonic()
    data = alice.command(terminal, "read -r -p 'Name? ' n; echo \"hi $n\"", timeoutMs=3000)
    assert elapsed(started) < 2.0
    assert data["waitingForInput"] is True
    assert data["status"] == "running"
    assert data["output"] == "Name? "
    alice.send(terminal, "bob")
    finished = wait_command(alice, terminal, data["commandId"], 5000)
    assert finished["exitCode"] == 0
    assert finished["output"].startswith("Name? ")
    assert "hi bob\n" in finished["output"]


# Long-running commands


@shells
def test_command_running_past_timeout_keeps_running(alice, shell):
    """A command still running at timeoutMs returns timedOut, not waitingForInput; a later wait finishes it."""
    terminal = shell_terminal(alice, shell)
    started = time.monotonic()
    data = alice.command(terminal, "sleep 3; echo slept", timeoutMs=500)
    assert elapsed(started) < 2.5
    assert data["timedOut"] is True
    assert data["waitingForInput"] is False
    assert data["status"] == "running"
    assert data["exitCode"] is None
    still = get_command(alice, terminal, data["commandId"])
    assert still["status"] == "running"
    assert still["timedOut"] is False  # a plain read made no wait
    finished = wait_command(alice, terminal, data["commandId"], 10_000)
    assert finished["status"] == "completed", finished
    assert finished["timedOut"] is False
    assert finished["exitCode"] == 0
    assert finished["output"] == "slept\n"
    assert finished["durationMs"] >= 2500


@shells
def test_command_while_another_runs_is_refused_busy(alice, shell):
    """A second command while one runs answers 409 TERMINAL_BUSY naming the running command."""
    terminal = shell_terminal(alice, shell)
    first = alice.command(terminal, "sleep 30", timeoutMs=300)
    assert first["status"] == "running"
    refused = post_command(alice, terminal, "echo second")
    assert refused.status_code == 409, refused.text
    error = refused.json()["error"]
    assert error["code"] == "TERMINAL_BUSY"
    assert error["details"]["runningCommand"]["commandId"] == first["commandId"]
    assert error["details"]["runningCommand"]["command"] == "sleep 30"
    # The refused command is not in the history.
    listed = history(alice, terminal)
    assert [item["command"] for item in listed["commands"] if item["source"] == "api"] == ["sleep 30"]
    detail = terminal_record(alice, terminal)
    assert detail["busy"] is True
    assert detail["runningCommand"]["commandId"] == first["commandId"]
    assert alice.post(f"/api/terminals/{terminal}/signal", json={}).status_code == 200
    assert wait_command(alice, terminal, first["commandId"], 5000)["status"] == "completed"


@shells
def test_command_while_typed_program_runs_is_refused_busy(alice, shell):
    """While a program typed through /input holds the foreground, a command answers 409 TERMINAL_BUSY naming it."""
    terminal = shell_terminal(alice, shell)
    alice.send(terminal, "sleep 30")
    wait_for(lambda: terminal_record(alice, terminal)["busy"], 10, "the typed sleep to hold the foreground")
    wait_for(lambda: terminal_record(alice, terminal)["foreground"]["command"] == "sleep 30", 10, "sleep in the foreground")
    refused = post_command(alice, terminal, "echo second")
    assert refused.status_code == 409, refused.text
    error = refused.json()["error"]
    assert error["code"] == "TERMINAL_BUSY"
    details = error["details"]
    if shell in HOOKED_SHELLS:  # the hooks reported the typed line as a running command
        assert details["runningCommand"]["command"] == "sleep 30"
    else:
        assert details["foreground"]["command"] == "sleep 30"
    assert alice.post(f"/api/terminals/{terminal}/signal", json={}).status_code == 200
    wait_for(lambda: not terminal_record(alice, terminal)["busy"], 10, "the shell to be back at its prompt")
    assert run_done(alice, terminal, "echo free")["output"] == "free\n"


@shells
def test_command_interrupted_by_signal_completes_with_130(alice, shell):
    """POST /signal with no body sends SIGINT; the running command completes with 130 and SIGINT."""
    terminal = shell_terminal(alice, shell)
    data = alice.command(terminal, "echo started; sleep 30; echo not-reached", timeoutMs=500)
    assert data["status"] == "running"
    assert data["timedOut"] is True
    signalled = alice.post(f"/api/terminals/{terminal}/signal", json={})
    assert signalled.status_code == 200, signalled.text
    assert signalled.json()["data"]["signal"] == "SIGINT"
    started = time.monotonic()
    finished = wait_command(alice, terminal, data["commandId"], 5000)
    assert elapsed(started) < 4.0
    assert finished["status"] == "completed"
    assert finished["exitCode"] == 130
    assert finished["signal"] == "SIGINT"
    assert finished["output"].startswith("started\n")
    assert "not-reached" not in finished["output"]
    # The shell is back at its prompt and runs the next command exactly.
    after = run_done(alice, terminal, "echo after")
    assert after["output"] == "after\n"
    assert after["exitCode"] == 0


# Large output


@shells
def test_command_with_one_megabyte_line_returns_it_whole(alice, shell):
    """One command printing 1 MB on one line returns all 1,000,001 characters."""
    terminal = shell_terminal(alice, shell)
    data = run_done(alice, terminal, r"head -c 1000000 /dev/zero | tr '\0' 'a'; echo", maxLines=10_000,
                    timeoutMs=30_000)
    assert len(data["output"]) == 1_000_001
    assert data["output"] == "a" * 1_000_000 + "\n"
    assert data["exitCode"] == 0
    assert data["truncated"] is False
    assert data["totalLines"] == 1


@shells
def test_command_with_one_megabyte_of_lines_tail_shows_last_line(alice, shell):
    """With mode=tail and tailLines=1, a command that printed over 1 MB of lines returns only its last line."""
    terminal = shell_terminal(alice, shell)
    data = run_done(alice, terminal, "seq 1000000 1142857", mode="tail", tailLines=1, timeoutMs=30_000)
    assert data["output"] == "1142857\n"
    assert data["linesShown"] == 1
    assert data["linesOmitted"] == data["totalLines"] - 1
    assert data["truncated"] is True
    assert data["exitCode"] == 0
    last_two = get_command(alice, terminal, data["commandId"], mode="tail", tailLines=2)
    assert last_two["output"] == "1142856\n1142857\n"


# wait: false and the history


@shells
def test_command_without_wait_returns_at_once_and_completes_later(alice, shell):
    """wait:false answers at once with status running; GET later shows it completed with its output."""
    terminal = shell_terminal(alice, shell)
    started = time.monotonic()
    data = alice.command(terminal, "sleep 1; echo done", wait=False)
    assert elapsed(started) < 0.9
    assert data["status"] == "running"
    assert data["timedOut"] is False
    assert data["waitingForInput"] is False
    assert data["exitCode"] is None

    def completed():
        record = get_command(alice, terminal, data["commandId"])
        return record if record["status"] == "completed" else None

    record = wait_for(completed, 10, "the command to complete")
    assert record["output"] == "done\n"
    assert record["exitCode"] == 0
    assert record["durationMs"] >= 900


@shells
def test_command_history_lists_commands_with_exit_codes_and_durations(alice, shell):
    """GET .../commands lists each API command in order with its status, exit code, signal and duration."""
    terminal = shell_terminal(alice, shell)
    ran = [run_done(alice, terminal, command) for command in ("echo one", "false", "(exit 7)", "sleep 0.2")]
    listed = history(alice, terminal)
    api_commands = [item for item in listed["commands"] if item["source"] == "api"]
    assert listed["count"] == len(listed["commands"])
    assert [item["commandId"] for item in api_commands] == [data["commandId"] for data in ran]
    assert [item["command"] for item in api_commands] == ["echo one", "false", "(exit 7)", "sleep 0.2"]
    assert [item["exitCode"] for item in api_commands] == [0, 1, 7, 0]
    assert all(item["status"] == "completed" for item in api_commands)
    assert all(item["signal"] is None for item in api_commands)
    assert all(item["durationMs"] is not None and item["durationMs"] >= 0 for item in api_commands)
    assert api_commands[-1]["durationMs"] >= 200
    assert all(item["finishedAt"] >= item["startedAt"] for item in api_commands)
    assert "output" not in api_commands[0]


def test_command_unknown_id_is_not_found(alice):
    """GET and wait on a command id the terminal never had answer 404 COMMAND_NOT_FOUND."""
    terminal = shell_terminal(alice, BASH)
    for response in (alice.get(commands_path(terminal, "cmd_999_abcdef")),
                     alice.post(commands_path(terminal, "cmd_999_abcdef") + "/wait")):
        assert response.status_code == 404, response.text
        assert response.json()["error"]["code"] == "COMMAND_NOT_FOUND"


# Commands typed by people


def completed_typed(api: Api, terminal: str, command: str | None = None) -> dict:
    """The first completed command of the terminal's history typed at its shell (the one typed as command, if
    given), once it is there."""
    def found():
        return next((item for item in history(api, terminal)["commands"] if item["status"] == "completed"
                     and (item["command"] == command if command is not None else item["source"] == "shell")), None)

    return wait_for(found, 10, f"the typed command {command or ''} in the history")


@hooked_shells
def test_command_typed_through_input_is_in_history(alice, shell):
    """In bash and zsh a command typed through /input appears in the history as source shell, with its output."""
    terminal = shell_terminal(alice, shell)
    assert run_done(alice, terminal, "echo ready")["output"] == "ready\n"
    alice.send(terminal, "echo typed-$((1+1))")
    item = completed_typed(alice, terminal)
    assert item["command"] == "echo typed-$((1+1))"
    assert item["exitCode"] == 0
    assert item["durationMs"] is not None
    record = get_command(alice, terminal, item["commandId"])
    assert record["output"] == "typed-2\n"
    assert record["source"] == "shell"

    alice.send(terminal, "(exit 9)")
    failed = completed_typed(alice, terminal, "(exit 9)")
    assert failed["source"] == "shell"
    assert failed["exitCode"] == 9
    # API commands still work after typed ones, with exact output.
    assert run_done(alice, terminal, "echo api")["output"] == "api\n"


def test_api_commands_stay_out_of_the_bash_history_and_typed_lines_keep_their_text(alice):
    """bash's own history holds what was typed, not the API's wrapped command lines (the API keeps its own), and a
    line typed after API commands is reported with its text (the hook reads back only lines the history kept)."""
    terminal = shell_terminal(alice, BASH)
    assert run_done(alice, terminal, "echo api-one")["output"] == "api-one\n"
    alice.send(terminal, "echo typed-$((2+3))")
    typed = completed_typed(alice, terminal)
    assert typed["command"] == "echo typed-$((2+3))"
    assert run_done(alice, terminal, "echo api-two")["output"] == "api-two\n"
    kept = run_done(alice, terminal, "HISTTIMEFORMAT= history")["output"]
    assert "echo typed-$((2+3))" in kept
    assert "__terminals" not in kept and "api-one" not in kept and "api-two" not in kept


def test_command_typed_in_dash_is_not_in_history_but_api_works(alice):
    """dash has no hook for typed commands: they are not in the history, and API commands still work."""
    terminal = shell_terminal(alice, DASH)
    alice.send(terminal, "echo typed-$((1+1))")
    alice.wait_output(terminal, lambda out: "typed-2" in out.replace("typed-$((1+1))", ""), what="typed-2")
    assert [item for item in history(alice, terminal)["commands"] if item["source"] == "shell"] == []
    data = run_done(alice, terminal, "echo api; (exit 4)")
    assert data["output"] == "api\n"
    assert data["exitCode"] == 4
    assert [item["source"] for item in history(alice, terminal)["commands"]] == ["api"]


# Defaults for programs driven without a person


@shells
def test_command_sees_non_interactive_defaults(alice, shell):
    """A new terminal sets PAGER and GIT_PAGER to cat and TERM to xterm-256color."""
    terminal = shell_terminal(alice, shell)
    assert run_done(alice, terminal, "echo $PAGER $GIT_PAGER $TERM")["output"] == "cat cat xterm-256color\n"


def test_command_caller_env_overrides_defaults(alice):
    """Variables given at creation override the defaults."""
    terminal = shell_terminal(alice, BASH, env={"PAGER": "less"})
    assert run_done(alice, terminal, "echo $PAGER $GIT_PAGER")["output"] == "less cat\n"


def test_command_git_log_does_not_wait_for_a_pager(alice, tmp_path):
    """`git log` in a fresh repository with one commit returns at once: no pager waits for a keypress."""
    terminal = shell_terminal(alice, BASH, cwd=str(tmp_path))
    setup = run_done(
        alice, terminal,
        "git init -q repo && cd repo && git -c user.name=t -c user.email=t@example.com commit -q --allow-empty -m first",
    )
    assert setup["exitCode"] == 0, setup["output"]
    started = time.monotonic()
    data = run_done(alice, terminal, "git log --format=%s", timeoutMs=10_000)
    assert elapsed(started) < 5.0
    assert data["waitingForInput"] is False
    assert data["exitCode"] == 0
    assert data["output"] == "first\n"


# Terminal queries answered by the service


def test_command_cursor_position_query_is_answered_bash(alice):
    """A program asking for the cursor position (ESC[6n) gets an answer from the service, without any input."""
    terminal = shell_terminal(alice, BASH)
    data = alice.command(terminal, r"""printf '\033[6n'; IFS= read -rs -d R pos; echo "got${pos#*[}" """, timeoutMs=5000)
    assert data["status"] == "completed", f"no answer to the cursor position query: {data}"
    assert data["exitCode"] == 0
    assert re.search(r"got\d+;\d+\n$", data["output"]), data["output"]


# Terminals side by side


def test_command_in_different_terminals_run_in_parallel(alice):
    """Two terminals each run `sleep 1; echo x` at the same time; both finish in well under the sum."""
    terminals = [shell_terminal(alice, BASH) for _ in range(2)]
    for terminal in terminals:  # both shells are up before the clock starts
        run_done(alice, terminal, "true")
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(lambda terminal: alice.command(terminal, "sleep 1; echo x"), terminals))
    took = elapsed(started)
    for data in results:
        assert data["status"] == "completed"
        assert data["output"] == "x\n"
        assert data["exitCode"] == 0
    assert took < 1.9, f"two 1 s commands took {took:.2f} s"


@shells
def test_a_command_right_after_a_refused_one_gets_its_own_exit_code(alice, shell):
    """A line the shell refuses leaves the rest of the typed text to be read, each line with a prompt of its own;
    none of those prompts may end the next command, however soon it is sent."""
    terminal = shell_terminal(alice, shell)
    for attempt in range(8):
        refused = run_done(alice, terminal, "fi", timeoutMs=5000)
        assert refused["exitCode"] not in (None, 0), refused
        after = run_done(alice, terminal, f"echo after-{attempt}; (exit {attempt + 3})", timeoutMs=10000)
        assert (after["exitCode"], after["output"]) == (attempt + 3, f"after-{attempt}\n"), after


def test_a_syntax_error_leaves_no_prompt_behind_even_with_a_slow_prompt_hook(alice, tmp_path):
    """A prompt hook that takes 0.4 s, a command whose first line the shell cannot parse followed by more lines,
    then the next command at once: the bad command completes with the shell's syntax-error status, none of its
    lines runs, and the next command gets exactly its own output and exit code (a prompt left over from the bad
    text, arriving late, used to end it with the wrong status)."""
    # A command substitution keeps the sleep in the shell's own process group: a slow hook, no foreground program.
    (tmp_path / ".bashrc").write_text("PROMPT_COMMAND=': $(sleep 0.4)'\n")
    terminal = shell_terminal(alice, BASH, env={"HOME": str(tmp_path)})
    assert run_done(alice, terminal, "true", timeoutMs=10000)["exitCode"] == 0
    bad = run_done(alice, terminal, "fi\n(exit 7)\n(exit 7)\necho second-line-ran", timeoutMs=10000)
    assert bad["exitCode"] == 2, bad
    assert "syntax error" in bad["output"] and "second-line-ran" not in bad["output"], bad
    for attempt in range(3):
        after = run_done(alice, terminal, f"echo after-{attempt}; (exit {attempt + 3})", timeoutMs=10000)
        assert (after["exitCode"], after["output"]) == (attempt + 3, f"after-{attempt}\n"), after


@shells
def test_an_unclosed_quote_completes_with_the_shells_complaint(alice, shell):
    """An unclosed quote cannot leave the shell waiting for the rest of the line: the command completes with
    a non-zero status and the shell's complaint, and the next command runs."""
    terminal = shell_terminal(alice, shell)
    data = run_done(alice, terminal, "echo 'unclosed", timeoutMs=10000)
    assert data["exitCode"] in (1, 2), data
    assert run_done(alice, terminal, "echo next")["output"] == "next\n"


@shells
def test_markers_a_program_prints_without_the_secret_change_nothing(alice, shell):
    """A program that prints prompt, begin and end markers with any token but the shell's secret neither ends the
    command nor changes its exit code: the markers stay in the output as printed."""
    terminal = shell_terminal(alice, shell)
    forged = r"printf '\033]6973;forged;P;0\007\033]6973;forged;E;x;0\007\033]6973;forged;B;x\007'"
    data = run_done(alice, terminal, f"{forged}; sleep 0.3; echo after-forgery; (exit 5)", timeoutMs=10000)
    assert (data["exitCode"], data["output"].endswith("after-forgery\n")) == (5, True), data
