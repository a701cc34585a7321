"""POST /api/terminals/{id}/output/wait (docs/output.md): until the output matches a pattern, the program waits for
input, the process ends, or the timeout; by default over what was printed since the last input, so output that came
just before the call is not missed."""

from __future__ import annotations

from terminals.models import AuditEvent


def wait(api, terminal: str, **body):
    response = api.post(f"/api/terminals/{terminal}/output/wait", json=body)
    assert response.status_code == 200, response.text
    return response.json()["data"]


def test_a_pattern_printed_before_the_call_is_found_and_later_ones_are_waited_for(alice):
    terminal = alice.create(shell="/bin/bash")["terminalId"]
    alice.send(terminal, "echo early-$((1+1))")
    alice.wait_output(terminal, lambda out: "early-2\n" in out)
    early = wait(alice, terminal, pattern=r"early-\d", timeoutMs=5000)
    assert (early["outcome"], early["match"]) == ("matched", "early-2")
    alice.send(terminal, "sleep 0.5; echo late-$((3+4))")
    late = wait(alice, terminal, pattern=r"late-\d+", timeoutMs=15000)
    assert (late["outcome"], late["match"]) == ("matched", "late-7") and "early-2" not in late["output"]
    again = wait(alice, terminal, pattern=r"late-\d+", timeoutMs=200, fromByte=late["nextByte"])
    assert again["outcome"] == "timeout" and again["match"] is None


def test_it_stops_when_the_program_waits_for_input_or_ends(alice):
    terminal = alice.create(shell="/bin/bash")["terminalId"]
    alice.send(terminal, "read -p 'name? ' who; echo hello-$who")
    asked = wait(alice, terminal, timeoutMs=15000)
    assert asked["outcome"] == "waiting_for_input" and "name? " in asked["output"]
    program = alice.create(command="sh", args=["-c", "echo bye; exit 3"])["terminalId"]
    ended = wait(alice, program, pattern="never-printed", timeoutMs=15000, fromByte=0)
    assert ended["outcome"] == "exited" and ended["exitStatus"]["exitCode"] == 3 and "bye" in ended["output"]


def test_a_bad_pattern_is_refused_and_audited(alice, orm):
    terminal = alice.create(shell="/bin/bash")["terminalId"]
    refused = alice.post(f"/api/terminals/{terminal}/output/wait", json={"pattern": "(unclosed", "timeoutMs": 100})
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "INVALID_INPUT"
    assert "pattern" in refused.json()["error"]["message"]
    waited = wait(alice, terminal, pattern="x", timeoutMs=0)
    assert waited["outcome"] in ("timeout", "matched")
    assert AuditEvent.objects.filter(terminal_id=terminal, action="wait_output").count() == 1
    # A pattern that backtracks without end over this output is cut off, not left to hold a thread.
    alice.send(terminal, "printf 'a%.0s' $(seq 40); echo b")
    alice.wait_output(terminal, lambda out: "a" * 40 + "b" in out)
    slow = alice.post(f"/api/terminals/{terminal}/output/wait", json={"pattern": "(a|aa)+$", "fromByte": 0,
                                                                     "timeoutMs": 60000, "untilInput": False})
    assert slow.status_code == 400 and "took longer than 0.2 s" in slow.json()["error"]["message"], slow.text


SHELLS = {"bash": "/bin/bash", "zsh": "/bin/zsh", "dash": "/bin/dash"}


def test_a_wait_matches_what_the_command_printed_not_the_echo_of_the_line_typed(alice):
    """docs/output.md's example in each shell: the typed line shows the pattern at once, a second before the
    program prints it; the wait answers with the program's line, and the echo is not in its output."""
    for name, shell in SHELLS.items():
        terminal = alice.create(shell=shell)["terminalId"]
        alice.run(terminal, "true")  # at its prompt
        alice.send(terminal, "sleep 1; echo listening on port 8080")
        waited = wait(alice, terminal, pattern=r"listening on port \d+", timeoutMs=15000)
        assert (waited["outcome"], waited["match"]) == ("matched", "listening on port 8080"), (name, waited)
        assert "sleep 1" not in waited["output"], (name, waited)


def test_a_wait_skips_the_echo_of_a_line_typed_into_a_program(alice):
    """Into a program reading its terminal line by line (the kernel echoes) and into one with a line editor
    (python3 -i, readline echoes): the wait matches what the program printed in answer."""
    upper = "import sys\nfor line in sys.stdin: print('got', line.strip().upper(), flush=True)"
    program = alice.create(command="python3", args=["-u", "-c", upper])["terminalId"]
    alice.send(program, "hello there")
    waited = wait(alice, program, pattern=r"(?i)hello \w+", timeoutMs=15000, untilInput=False)
    assert (waited["outcome"], waited["match"]) == ("matched", "HELLO THERE"), waited
    assert "hello there" not in waited["output"], waited

    repl = alice.create(command="python3", args=["-q", "-i"], env={"PYTHONSTARTUP": ""})["terminalId"]
    alice.wait_output(repl, lambda out: ">>>" in out)
    alice.send(repl, "import time; time.sleep(1); print('server ' + 'ready'.upper())")
    waited = wait(alice, repl, pattern=r"server \w+", timeoutMs=15000, untilInput=False)
    assert (waited["outcome"], waited["match"]) == ("matched", "server READY"), waited
    assert "time.sleep" not in waited["output"], waited
