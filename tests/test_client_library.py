"""The Python client library (clients/python), installed into a fresh virtualenv without the server's code, driven
against the real servers: every method of Client and Terminal and their async twins, typed errors carrying the
service's codes, and a live stream that survives dropped WebSockets with every byte once (docs/client.md)."""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from .client_venv import ROOT, CuttingProxy
from .conftest import make_key
from .servers import start_embedded, start_split, wait_for


def result_of(completed) -> dict:
    assert completed.returncode == 0, f"the script failed:\n{completed.stdout}\n{completed.stderr}"
    return json.loads(completed.stdout.strip().splitlines()[-1])


def test_the_library_runs_commands_for_their_output_and_exact_exit_code(client_venv, server, keys, alice):
    done = result_of(client_venv.script("""
        import json
        from terminals_client import Client, CommandFailed, TerminalInactive, Timeout

        c = Client()
        t = c.create(cwd="/tmp", name="build", record=True)
        ok = t.run("printf 'h\\u00e9llo \\u2713\\\\n'")
        reads = [t.screen()["cols"], t.stats()["totalBytes"] > 0, [x["commandId"] for x in t.commands()],
                 t.command(ok.command_id).exit_code, t.recording().startswith('{"version": 2'),
                 t.refresh()["status"], c.health()["status"]]
        failed = t.run("echo to-out; echo to-err >&2; (exit 3)")
        try:
            failed.check()
            raised = None
        except CommandFailed as error:
            raised = [error.code, error.result.exit_code]
        t.send("sleep 0.3; echo listening on port 8080")
        match = t.wait_for(r"listening on port \\d+", timeout=30)
        t.resize(100, 30)
        size = t.run("stty size").output
        try:
            t.run("sleep 30; echo never", timeout=1)
            timeout = None
        except Timeout as error:
            timeout = [error.which, error.command_id]
        t.signal("SIGINT")
        interrupted = t.wait_command(timeout[1], timeout=30)
        found = [x.id for x in c.terminals()]
        again = c.terminal(t.id)
        program = c.create(command="sh", args=["-c", "echo from-program; exit 7"])
        exited = program.wait(timeout=30)
        read = program.read(from_byte=0)
        sleeper = c.create(command="sleep", args=["600"])
        killed = sleeper.kill()
        after_kill = sleeper.read(from_byte=0)
        t.close()
        try:
            t.send("echo too late")
            late = None
        except TerminalInactive as error:
            late = error.code
        print(json.dumps({
            "reads": reads,
            "ok": [ok.exit_code, ok.output, ok.check().command_id.startswith("cmd_"), ok.duration is not None],
            "failed": [failed.exit_code, failed.output, failed.truncated], "raised": raised,
            "match": match.match, "size": size, "timeout": timeout[0],
            "interrupted": [interrupted.exit_code, interrupted.signal, interrupted.output],
            "found": t.id in found, "again": [again.id == t.id, again.info["name"]],
            "exited": [exited.exit_code, exited.signal, exited.code], "read": [read.text, read.eof],
            "killed": killed["status"], "after_kill": after_kill.eof, "late": late,
            "ids": [t.id, program.id, sleeper.id]}))
    """, server.url, keys["alice"]))
    alice.created.extend(done["ids"])
    assert done["ok"] == [0, "h\u00e9llo \u2713\n", True, True]
    assert done["reads"][:2] == [80, True] and done["reads"][3:] == [0, True, "active", "healthy"]
    assert done["reads"][2][-1].startswith("cmd_")
    assert done["failed"] == [3, "to-out\nto-err\n", False]
    assert done["raised"] == ["COMMAND_FAILED", 3]
    assert done["match"] == "listening on port 8080"
    assert done["size"] == "30 100\n"
    assert done["timeout"] == "run"
    assert done["interrupted"][:2] == [130, "SIGINT"] and "never" not in done["interrupted"][2]
    assert done["found"] is True and done["again"] == [True, "build"]
    assert done["exited"] == [7, None, 7]
    assert done["read"] == ["from-program\r\n", True]
    assert done["killed"] == "killed" and done["after_kill"] is True
    assert done["late"] == "TERMINAL_INACTIVE"
    assert alice.get(f"/api/terminals/{done['ids'][0]}").json()["data"]["status"] == "killed"


def test_the_async_client_is_the_same_api_awaited(client_venv, server, keys, alice):
    done = result_of(client_venv.script("""
        import asyncio, json
        from terminals_client import AsyncClient, NotFound, Timeout

        async def main():
            async with AsyncClient() as c:
                t = await c.create(cwd="/tmp")
                r = await t.run("echo async; (exit 4)")
                await t.send("sleep 0.2; echo ready-now")
                match = await t.wait_for("ready-now", timeout=30)
                try:
                    await t.run("sleep 30", timeout=1)
                    which = None
                except Timeout as error:
                    which = error.which
                await t.signal("SIGINT")
                program = await c.create(command="sh", args=["-c", "for i in 1 2 3; do echo tick $i; done; exit 5"])
                chunks = [chunk async for chunk in program.stream(from_byte=0)]
                status = await program.wait(timeout=30)
                listed = [x.id for x in await c.terminals(status="all")]
                await t.close()
                await program.close()
                try:
                    await c.terminal("00000000-0000-0000-0000-000000000000")
                    missing = None
                except NotFound as error:
                    missing = error.code
                return {"run": [r.exit_code, r.output], "match": match.match, "which": which,
                        "stream": "".join(chunks), "status": status.exit_code, "listed": t.id in listed,
                        "missing": missing, "ids": [t.id, program.id]}

        print(json.dumps(asyncio.run(main())))
    """, server.url, keys["alice"]))
    alice.created.extend(done["ids"])
    assert done["run"] == [4, "async\n"]
    assert done["match"] == "ready-now" and done["which"] == "run"
    assert done["stream"] == "tick 1\r\ntick 2\r\ntick 3\r\n"
    assert done["status"] == 5 and done["listed"] is True
    assert done["missing"] == "TERMINAL_NOT_FOUND"


def test_errors_are_typed_and_carry_the_services_code(client_venv, server, keys, alice, bob):
    """Another user's terminal is NotFound, exactly like an unknown one; a bad key is AuthError; a bad field
    InvalidInput; a second command while one runs Busy; an address nobody answers ServiceUnavailable."""
    theirs = bob.create(shell="/bin/sh")["terminalId"]
    done = result_of(client_venv.script(f"""
        import json
        from terminals_client import Client, Terminal, TerminalsError

        def code(call):
            try:
                call()
            except TerminalsError as error:
                return [type(error).__name__, error.code, error.status]
            return None

        c = Client()
        t = c.create(shell="/bin/sh")
        theirs = Terminal(c, {{"terminalId": "{theirs}"}})
        stream = code(lambda: list(theirs.stream(reconnect_timeout=5)))
        still_running = code(lambda: t.run("sleep 3", timeout=0.2))
        print(json.dumps({{
            "terminal": code(lambda: c.terminal("{theirs}")),
            "send": code(lambda: theirs.send("x")),
            "unknown": code(lambda: c.terminal("00000000-0000-0000-0000-000000000000")),
            "stream": stream,
            "key": code(lambda: Client(key="tk_nothing.wrong").terminals()),
            "invalid": code(lambda: c.create(cwd="/nonexistent")),
            "timeout": still_running,
            "busy": code(lambda: t.run("echo second")),
            "down": code(lambda: Client(url="http://127.0.0.1:9").terminals()),
            "id": t.id}}))
    """, server.url, keys["alice"]))
    alice.created.append(done["id"])
    assert done["terminal"] == ["NotFound", "TERMINAL_NOT_FOUND", 404]
    assert done["send"] == ["NotFound", "TERMINAL_NOT_FOUND", 404]
    assert done["unknown"] == ["NotFound", "TERMINAL_NOT_FOUND", 404]
    assert done["stream"] == ["NotFound", "TERMINAL_NOT_FOUND", None]
    assert done["key"] == ["AuthError", "UNAUTHORIZED", 401]
    assert done["invalid"] == ["InvalidInput", "INVALID_INPUT", 400]
    assert done["timeout"] == ["Timeout", "TIMEOUT", None]
    assert done["busy"] == ["Busy", "TERMINAL_BUSY", 409]
    assert done["down"] == ["ServiceUnavailable", "UNREACHABLE", None]
    assert bob.get(f"/api/terminals/{theirs}").json()["data"]["status"] == "active"


@pytest.fixture(scope="module")
def throttled_server(django_db_setup):
    """A server that lets a key make four requests a second: quick to run into, quick to wait out."""
    server = start_embedded(TERMINALS_THROTTLE_RATE="4/s")
    yield server
    server.stop()


def test_a_throttled_key_gets_rate_limited_with_the_services_retry_after(client_venv, orm, throttled_server):
    _, key = make_key()
    done = result_of(client_venv.script("""
        import json
        from terminals_client import Client, RateLimited

        c = Client()
        answered = 0
        try:
            for _ in range(50):
                c.terminals()
                answered += 1
            refused = None
        except RateLimited as error:
            refused = [error.code, error.status, error.retry_after]
        print(json.dumps({"answered": answered, "refused": refused}))
    """, throttled_server.url, key))
    assert done["answered"] >= 4
    code, status, retry_after = done["refused"]
    assert (code, status) == ("RATE_LIMITED", 429) and 1 <= retry_after <= 60


def test_the_opt_in_retry_waits_out_rate_limited_refusals(client_venv, orm, throttled_server):
    _, key = make_key()
    done = result_of(client_venv.script("""
        import json, time
        from terminals_client import Client

        c = Client(retry_rate_limited=30)
        started = time.monotonic()
        answers = [c.terminals() for _ in range(12)]
        print(json.dumps({"answers": len(answers), "seconds": time.monotonic() - started}))
    """, throttled_server.url, key))
    assert done["answers"] == 12 and done["seconds"] >= 1


TICKS = 150
STREAMERS = {
    "sync": "import sys\nfrom terminals_client import Client\n"
            "stream = Client().terminal(ID).stream(from_byte=0)\n"
            "for chunk in stream:\n    sys.stdout.write(chunk)\n    sys.stdout.flush()\n"
            "print('EXIT', stream.exit_status.code, flush=True)\n",
    "async": "import asyncio, sys\nfrom terminals_client import AsyncClient\n"
             "async def main():\n    async with AsyncClient() as c:\n"
             "        stream = (await c.terminal(ID)).stream(from_byte=0)\n"
             "        async for chunk in stream:\n            sys.stdout.write(chunk)\n            sys.stdout.flush()\n"
             "        print('EXIT', stream.exit_status.code, flush=True)\n"
             "asyncio.run(main())\n",
}


@pytest.mark.parametrize("kind", STREAMERS)
def test_a_stream_survives_dropped_websockets_with_every_byte_once(client_venv, server, keys, alice, kind):
    """The network drops the stream's WebSocket twice while a program prints; the stream reconnects from the
    byte after the last it yielded: what it yields is exactly the terminal's output, each byte once."""
    proxy = CuttingProxy(server.url)
    terminal_id = alice.create(command="sh", args=["-c", f"i=0; while [ $i -lt {TICKS} ]; do i=$((i+1)); "
                                                         f"echo tick-$i; sleep 0.02; done"])["terminalId"]
    process = subprocess.Popen([client_venv.python, "-c", f"ID = {terminal_id!r}\n" + STREAMERS[kind]],
                               cwd=client_venv.folder, env=client_venv.env(proxy.url, keys["alice"]),
                               stdout=subprocess.PIPE)
    seen = ""
    try:
        for cut_at in (20, 70):
            while f"tick-{cut_at}\r\n" not in seen:
                line = process.stdout.readline()  # bytes: the \r\n of the PTY stay as they are
                assert line, f"the stream ended early:\n{seen}"
                seen += line.decode()
            wait_for(proxy.cut_websockets, 10, "an open WebSocket to cut")
        rest, _ = process.communicate(timeout=60)
        seen += rest.decode()
    finally:
        process.kill()
        proxy.close()
    assert process.returncode == 0, seen
    assert proxy.websockets_opened >= 3
    printed = alice.output(terminal_id, fromByte=0, maxBytes=1 << 20)["chunk"]
    assert seen == printed + "EXIT 0\n"
    assert seen.splitlines()[:-1] == [f"tick-{i}" for i in range(1, TICKS + 1)]


def test_the_python_examples_of_docs_client_md_run_as_written(client_venv, server, keys, alice):
    """Each ```python block of docs/client.md runs to its end in the client's virtualenv, against the server."""
    page = (ROOT / "docs" / "client.md").read_text()
    blocks = re.findall(r"^```python\n(.*?)^```", page, re.S | re.M)
    assert len(blocks) >= 4
    for block in blocks:
        ran = client_venv.script(block, server.url, keys["alice"])
        assert ran.returncode == 0, f"{block}\n{ran.stdout}\n{ran.stderr}"
    alice.created.extend(terminal["id"] for terminal in alice.get("/api/terminals").json()["data"]["terminals"])


def test_a_service_without_a_worker_is_service_unavailable_and_terminals_run_exits_255(client_venv, orm):
    """The split deployment with its only worker stopped answers 503 WORKER_UNAVAILABLE: the library raises
    ServiceUnavailable with that code, and `terminals run` says the service's message and exits 255."""
    _, key = make_key()
    deployment = start_split(TERMINALS_WORKER_TIMEOUT_MS="1000")
    try:
        deployment.process("worker0").stop()
        done = result_of(client_venv.script("""
            import json
            from terminals_client import Client, ServiceUnavailable

            try:
                Client().create(shell="/bin/sh")
                refused = None
            except ServiceUnavailable as error:
                refused = [error.code, error.status, error.message]
            print(json.dumps({"refused": refused}))
        """, deployment.url, key))
        ran = client_venv.command(["run", "--", "true"], deployment.url, key)
    finally:
        deployment.stop()
    code, status, message = done["refused"]
    assert (code, status) == ("WORKER_UNAVAILABLE", 503) and message
    assert ran.returncode == 255 and ran.stderr.startswith(b"terminals: ") and b"worker" in ran.stderr
