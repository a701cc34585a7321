"""What a person watching a terminal sees of an API command (terminals/runtime/shown.py): the command as it was
given, after the prompt, as if typed, and never the wrapper the service types for it, in every read of the output
(bytes, lines, a live WebSocket) and in bash, zsh and dash; the command's own output and exit code as before."""

from __future__ import annotations

import asyncio
import os
import tempfile
from pathlib import Path

import pytest

from terminals.runtime.ansi import strip_ansi

from .test_live import Live, rest_bytes, run

SHELLS = {"bash": "/bin/bash", "zsh": "/usr/bin/zsh", "dash": "/bin/dash"}
shells = pytest.mark.parametrize("shell", list(SHELLS.values()), ids=list(SHELLS))
WRAPPER = ("__terminals_begin", "__terminals_end", "eval '")  # a shell's complaint may name eval


def assert_shown(output: str, *lines: str) -> None:
    """output holds the command's lines, each ending a line of its own, and nothing of the wrapper."""
    for word in WRAPPER:
        assert word not in output, (word, output)
    shown = "\n".join(lines) + "\n"
    assert shown in output.replace("\r\n", "\n"), (shown, output)


def everything(api, terminal: str) -> tuple[str, str]:
    """(the raw bytes from byte 0, the line output), both with escapes stripped. The line output ends every line but
    its last with a line end; read right after a command returns, before the next prompt, its last line is the
    command's last, complete: it gets its line end back so that both read alike."""
    raw = api.output(terminal, fromByte=0, maxBytes=1048576, stripAnsi="true")["chunk"]
    return raw, api.output(terminal, maxLines=10000, stripAnsi="true")["output"] + "\n"


@shells
def test_an_api_command_is_shown_as_given_in_the_byte_and_line_output(alice, shell):
    terminal = alice.create(shell=shell)["terminalId"]
    done = alice.command(terminal, "seq 1 3")
    assert (done["status"], done["exitCode"], done["output"]) == ("completed", 0, "1\n2\n3\n"), done
    raw, lines = everything(alice, terminal)
    for output in (raw, lines):
        assert_shown(output, "seq 1 3", "1", "2", "3")
    # Right after the prompt, as typed: the prompt's line ends with the command.
    prompt_line = next(line for line in lines.replace("\r\n", "\n").split("\n") if line.endswith("seq 1 3"))
    assert prompt_line.rstrip() != "seq 1 3", lines


@shells
def test_a_refused_and_a_multi_line_command_are_shown_as_given_with_their_status(alice, shell):
    terminal = alice.create(shell=shell)["terminalId"]
    refused = alice.command(terminal, "if then")
    assert refused["status"] == "completed" and refused["exitCode"] in (1, 2), refused
    assert "then" in refused["output"], refused
    several = alice.command(terminal, "for i in 1 2; do\necho loop-$i\ndone")
    assert (several["exitCode"], several["output"]) == (0, "loop-1\nloop-2\n"), several
    here = alice.command(terminal, "cat <<'EOF'\nhere-text\nEOF")
    assert (here["exitCode"], here["output"]) == (0, "here-text\n"), here
    for output in everything(alice, terminal):
        assert_shown(output, "if then")
        assert_shown(output, "for i in 1 2; do", "echo loop-$i", "done", "loop-1", "loop-2")
        assert_shown(output, "cat <<'EOF'", "here-text", "EOF", "here-text")


@shells
def test_a_live_viewer_sees_the_command_as_given(server, alice, keys, shell):
    terminal = alice.create(shell=shell)["terminalId"]
    alice.command(terminal, "true")  # at its prompt

    async def scenario():
        live = await Live.open(server.url, terminal, keys["alice"])
        done = await asyncio.to_thread(alice.command, terminal, "seq 1 3")
        await live.until(lambda viewer: viewer.next >= done_end(alice, terminal), "the command's output")
        await live.close()
        return live, done

    live, done = run(scenario())
    assert (done["exitCode"], done["output"]) == (0, "1\n2\n3\n"), done
    assert_shown(strip_ansi(live.text), "seq 1 3", "1", "2", "3")
    assert live.data == rest_bytes(alice, terminal, live.attached["fromByte"])["chunk"].encode()[: len(live.data)]


def done_end(api, terminal: str) -> int:
    return api.output(terminal, fromByte=0, maxBytes=1)["totalBytes"]


def test_a_wait_does_not_match_the_command_shown(alice):
    """The command shown is echo: a wait for what it prints waits for the program, not for its text on screen."""
    gate = Path(tempfile.mkdtemp(prefix="terminals-shown-"))
    os.chmod(gate, 0o777)  # the terminal's account must see the file appear
    try:
        terminal = alice.create(shell="/bin/bash")["terminalId"]
        alice.command(terminal, "true")
        started = alice.command(terminal, f"until [ -e {gate}/go ]; do sleep 0.05; done; echo listening on port 8080",
                                timeoutMs=200)
        assert started["status"] == "running", started
        early = alice.post(f"/api/terminals/{terminal}/output/wait",
                           json={"pattern": r"listening on port \d+", "timeoutMs": 500, "untilInput": False}
                           ).json()["data"]
        assert early["outcome"] == "timeout" and "until [" not in early["output"], early
        (gate / "go").touch()
        late = alice.post(f"/api/terminals/{terminal}/output/wait",
                          json={"pattern": r"listening on port \d+", "timeoutMs": 15000, "untilInput": False}
                          ).json()["data"]
        assert (late["outcome"], late["match"]) == ("matched", "listening on port 8080"), late
    finally:
        (gate / "go").unlink(missing_ok=True)
        gate.rmdir()


@shells
def test_a_command_typed_as_the_shell_starts_is_shown_once(alice, shell, tmp_path):
    """Typed just as the first prompt shows, before the line editor takes the terminal, the text is echoed by the
    kernel and again by the line editor: the command shows once, after the prompt."""
    from .test_api_commands import slow_start_env

    terminal = alice.create(shell=shell, env=slow_start_env(shell, tmp_path))["terminalId"]
    done = alice.command(terminal, "echo hello-$((6*7))")
    assert (done["exitCode"], done["output"]) == (0, "hello-42\n"), done
    for output in everything(alice, terminal):
        assert_shown(output, "echo hello-$((6*7))", "hello-42")
        assert output.count("echo hello-$((6*7))") == 1, output


# The echo as each line editor draws it (recorded from bash 5.2, zsh 5.9 and dash at 80 columns)

ID = "cmd_1_c55248"
TYPED = f"__terminals_begin {ID}; eval '/bin/echo 0'; __terminals_end {ID} \"$?\""


def record(command: str = "/bin/echo 0"):
    from terminals.runtime.commands import Command

    return Command(id=ID, command=command, source="api", started_at=0.0)


def test_the_echo_is_found_through_zshs_redrawing_at_the_windows_edge():
    from terminals.runtime.shown import replace_echo

    # zsh draws the first key alone, and redraws the key at the window's edge: here inside the id.
    drawn = (f"_\b__terminals_begin {ID}; eval '/bin/echo 0'; __terminals_end cmd_1_c5 \r\x1b[K5\r5248 \"$?\""
             "\x1b[?1l\x1b>\x1b[?2004l\r\r\n").encode()
    shown, place = replace_echo(b"vm% " + drawn, record(), to_end=True)
    assert shown == b"vm% /bin/echo 0\r\n\x1b[?1l\x1b>\x1b[?2004l"
    assert place == (4, len(shown))


def test_a_kernel_echo_before_the_prompt_is_left_out_and_the_editors_shown():
    from terminals.runtime.shown import replace_echo

    held = f"{TYPED}\r\n\x1b[?2004hroot@vm:/tmp# {TYPED}\r\n\x1b[?2004l\r".encode()
    shown, _ = replace_echo(held, record(), to_end=True)
    assert shown == b"\x1b[?2004hroot@vm:/tmp# /bin/echo 0\r\n\x1b[?2004l"


def test_a_refused_commands_complaint_follows_the_command_shown():
    from terminals.runtime.shown import replace_echo

    held = f"$ {TYPED}\r\nsh: 1: oops\r\n".encode()
    shown, place = replace_echo(held, record(), to_end=False)
    assert shown == b"$ /bin/echo 0\r\nsh: 1: oops\r\n" and shown[place[1]:] == b"sh: 1: oops\r\n"


def test_an_echo_not_found_is_kept_as_it_came_and_control_keys_show_as_carets():
    from terminals.runtime.shown import display_of, replace_echo

    assert replace_echo(b"something else\r\n", record(), to_end=True) == (b"something else\r\n", None)
    assert display_of("printf 'a\\tb'\x1b\nsecond line\n") == b"printf 'a\\tb'^[\r\nsecond line\r\n"
