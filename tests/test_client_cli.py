"""The `terminals` command of the Python client, installed into a fresh virtualenv, against the real servers: it
exits with the remote exit code (128 + N for a signal) and 255 when the service could not be reached or refused,
like ssh; piped standard input reaches the program and its end closes the program's input (docs/client.md)."""

from __future__ import annotations

import pytest


def run(client_venv, server, key, *args, stdin: bytes | None = None):
    return client_venv.command(list(args), server.url, key, stdin=stdin)


@pytest.mark.parametrize("script, status", [("exit 0", 0), ("echo out; exit 1", 1), ("exit 255", 255),
                                            ("kill -TERM $$", 128 + 15)])
def test_run_exits_with_the_remote_exit_code(client_venv, server, keys, script, status):
    done = run(client_venv, server, keys["alice"], "run", "--", "sh", "-c", script)
    assert done.returncode == status, done.stderr
    assert done.stdout == (b"out\n" if "echo" in script else b"")


def test_piped_input_reaches_the_program_exactly_and_its_end_closes_the_programs_input(client_venv, server, keys):
    data = b"".join(b"line %d \xc3\xa9\xe2\x9c\x93\n" % number for number in range(5000))
    done = run(client_venv, server, keys["alice"], "run", "--", "wc", "-c", stdin=data)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(len(data)).encode()


def test_the_service_refusing_or_unreachable_exits_255_saying_why(client_venv, server, keys):
    refused = run(client_venv, server, "tk_nothing.wrong", "run", "--", "true")
    assert refused.returncode == 255
    assert b"API key" in refused.stderr
    no_key = run(client_venv, server, None, "ls")
    assert no_key.returncode == 255 and b"TERMINALS_API_KEY" in no_key.stderr
    unreachable = client_venv.command(["ls"], "http://127.0.0.1:9", keys["alice"])
    assert unreachable.returncode == 255 and b"could not reach" in unreachable.stderr
    missing = run(client_venv, server, keys["alice"], "run", "--", "no-such-program-anywhere")
    assert missing.returncode == 255 and missing.stderr.startswith(b"terminals: ")


def test_ls_logs_send_kill_close_find_terminals_again_by_id(client_venv, server, keys, alice, bob):
    kept = run(client_venv, server, keys["alice"], "run", "--keep", "--name", "kept", "--", "sh", "-c",
               "echo kept-output")
    assert kept.returncode == 0, kept.stderr
    kept_id = kept.stderr.decode().split("kept terminal ")[1].split()[0]
    alice.created.append(kept_id)
    listed = run(client_venv, server, keys["alice"], "ls", "--all")
    assert listed.returncode == 0 and kept_id in listed.stdout.decode()
    logs = run(client_venv, server, keys["alice"], "logs", kept_id)
    assert (logs.returncode, logs.stdout) == (0, b"kept-output\n")

    cat = alice.create(command="cat", pty=False)["terminalId"]
    assert run(client_venv, server, keys["alice"], "send", cat, "hello").returncode == 0
    assert run(client_venv, server, keys["alice"], "kill", cat).returncode == 0
    assert alice.get(f"/api/terminals/{cat}").json()["data"]["status"] == "killed"
    followed = run(client_venv, server, keys["alice"], "logs", "--follow", cat)
    assert (followed.returncode, followed.stdout) == (0, b"hello\n")

    assert run(client_venv, server, keys["alice"], "close", kept_id).returncode == 0
    gone = run(client_venv, server, keys["alice"], "logs", kept_id)
    assert gone.returncode == 255 and b"no longer held" in gone.stderr

    theirs = bob.create(shell="/bin/sh")["terminalId"]
    for action in (["logs", theirs], ["send", theirs, "x"], ["kill", theirs], ["close", theirs]):
        refused = run(client_venv, server, keys["alice"], *action)
        assert refused.returncode == 255 and b"not found" in refused.stderr, action
    assert bob.get(f"/api/terminals/{theirs}").json()["data"]["status"] == "active"


def test_attach_types_piped_input_and_exits_with_the_remote_exit_code(client_venv, server, keys, alice):
    terminal_id = alice.create(shell="/bin/bash")["terminalId"]
    done = run(client_venv, server, keys["alice"], "attach", terminal_id, stdin=b"echo from-$((6*7))\nexit 5\n")
    assert done.returncode == 5, done.stderr
    assert b"from-42" in done.stdout
