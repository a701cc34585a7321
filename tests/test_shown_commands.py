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
    """(the raw bytes from byte 0, the line output), both with escapes stripped."""
    raw = api.output(terminal, fromByte=0, maxBytes=1048576, stripAnsi="true")["chunk"]
    return raw, api.output(terminal, maxLines=10000, stripAnsi="true")["output"]


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
