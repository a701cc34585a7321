"""The seeds' other MCP tool sets through the official SDK client: seed 002's Komodo terminal module at /mcp/komodo
(its four tools and its usage examples as written, on worker hosts named as in the examples) and the persistent
terminal server's tools at /mcp/persistent-terminal (seed 000's REST semantics)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from terminals.models import TerminalSession

from .servers import ROOT, Server, ServiceProcess, free_port, service_env, start_redis, wait_healthy
from .test_mcp import connect, data, eventually, run
from .test_worker_hosts import start_host

KOMODO = {"komodo_terminal_Connect": {"server_id", "options"},
          "komodo_terminal_Execute": {"server_id", "command", "session_id", "options"},
          "komodo_terminal_GetOutput": {"session_id", "options"},
          "komodo_terminal_Disconnect": {"session_id", "options"}}
PERSISTENT = {"create_terminal", "write_terminal", "read_terminal", "wait_for_output", "get_terminal_stats",
              "list_terminals", "kill_terminal"}


@pytest.fixture(scope="module")
def komodo_hosts(django_db_setup):
    """A split deployment whose two workers run on hosts named as seed 002's examples name them."""
    redis, redis_url = start_redis()
    env = service_env(REDIS_URL=redis_url, TERMINALS_WORKER_TIMEOUT_MS="30000")
    subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v0"], cwd=ROOT, env=env, check=True)
    port = free_port()
    server = Server(url=f"http://127.0.0.1:{port}", mode="split", redis=redis, redis_url=redis_url)
    server.processes.append(ServiceProcess(
        "web0", [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "config.asgi:application"], env))
    for hostname in ("prod-server-1", "dev-server-2"):
        start_host(server, hostname, env)
    wait_healthy(server)
    yield server
    server.stop()


@pytest.fixture
def example_files():
    """What the examples name: a project folder (a git repository) and an application log."""
    project = Path("/home/user/project")
    made_project = not project.exists()
    project.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    log = Path("/var/log/app.log")
    made_log = not log.exists()
    log.write_text("first line\n")
    yield project, log
    if made_project:
        shutil.rmtree("/home/user")
    if made_log:
        log.unlink()


def payload(answer) -> dict:
    body = json.loads(answer.content[0].text)
    assert body.get("success") is True and not answer.is_error, body
    return body


def test_komodo_lists_seed_002s_four_tools(server, keys):
    async def scenario():
        async with connect(server.url, keys["alice"], "/mcp/komodo") as client:
            return (await client.list_tools()).tools

    tools = {tool.name: tool for tool in run(scenario())}
    assert {name: set(tool.input_schema["properties"]) for name, tool in tools.items()} == KOMODO
    assert set(tools["komodo_terminal_Execute"].input_schema["required"]) == {"server_id", "command"}


def test_komodo_usage_examples_as_written(komodo_hosts, keys, example_files, orm):
    project, log = example_files

    async def scenario():
        async with connect(komodo_hosts.url, keys["alice"], "/mcp/komodo") as client:
            async def call(tool, **arguments):
                return payload(await client.call_tool(f"komodo_terminal_{tool}", arguments))

            async def complete(session_id, **options):
                async def finished():
                    output = (await call("GetOutput", session_id=session_id, options=options))["output"]
                    return output if output["isComplete"] else None

                return await eventually(finished, f"{session_id} to complete")

            # Basic Command Execution
            connected = await call("Connect", server_id="prod-server-1", options={"shell": "bash"})
            session = connected["sessionId"]
            assert connected["status"] == "connected"
            executed = await call("Execute", server_id="prod-server-1", command="df -h", session_id=session)
            assert executed["status"] == "running" and executed["sessionId"] == session
            basic = await complete(session)
            await call("Disconnect", session_id=session)
            # Quick Single Command
            quick = await call("Execute", server_id="prod-server-1", command="uptime")
            single = await complete(quick["sessionId"])
            await call("Disconnect", session_id=quick["sessionId"])
            # Interactive Session
            interactive = await call("Connect", server_id="dev-server-2",
                                     options={"shell": "bash", "cwd": "/home/user/project"})
            outputs = []
            for command in ["git status", "npm install", "npm test"]:
                await call("Execute", server_id="dev-server-2", command=command, session_id=interactive["sessionId"])
                outputs.append(await complete(interactive["sessionId"]))
            await call("Disconnect", session_id=interactive["sessionId"])
            # Streaming Output
            streaming = await call("Execute", server_id="prod-server-1", command="tail -f /var/log/app.log",
                                   options={"captureOutput": True})
            async def tail_showing(text):
                async def probe():
                    got = await call("GetOutput", session_id=streaming["sessionId"], options={"tail": True, "lines": 10})
                    return got if text in got["output"]["stdout"] else None

                return await eventually(probe, f"{text!r} in the tail")

            seen = await tail_showing("first line")
            with log.open("a") as appended:
                appended.write("second line\n")
            later = await tail_showing("second line")
            stopped = await call("Disconnect", session_id=streaming["sessionId"], options={"force": True})
            return session, basic, quick, single, interactive, outputs, seen, later, stopped

    session, basic, quick, single, interactive, outputs, seen, later, stopped = run(scenario())
    assert "Filesystem" in basic["stdout"] and basic["exitCode"] == 0
    assert " up " in single["stdout"] and single["exitCode"] == 0 and single["stderr"] == ""
    hosts = {str(row.id): row.worker.hostname for row in TerminalSession.objects.filter(
        id__in=[session, quick["sessionId"], interactive["sessionId"]]).select_related("worker")}
    assert hosts == {session: "prod-server-1", quick["sessionId"]: "prod-server-1",
                     interactive["sessionId"]: "dev-server-2"}
    assert "On branch" in outputs[0]["stdout"] or "No commits yet" in outputs[0]["stdout"]
    assert outputs[0]["exitCode"] == 0 and outputs[1]["isComplete"] and outputs[2]["isComplete"]
    assert "first line" in seen["output"]["stdout"] and "second line" in later["output"]["stdout"]
    assert later["output"]["isComplete"] is False and stopped["status"] == "disconnected"


@pytest.mark.parametrize("deployment", ["embedded", "split"])
def test_komodo_keeps_stdout_and_stderr_apart_and_answers_errors_in_its_shape(deployment, request, keys, orm):
    """On the embedded server the one host is this machine; in the split deployment, prod-server-1."""
    import socket

    if deployment == "embedded":
        server, host_name = request.getfixturevalue("embedded_server"), socket.gethostname()
    else:
        server, host_name = request.getfixturevalue("komodo_hosts"), "prod-server-1"

    async def scenario():
        async with connect(server.url, keys["alice"], "/mcp/komodo") as client:
            host = (await client.call_tool("komodo_terminal_Execute", {"server_id": "nowhere", "command": "true"}))
            started = payload(await client.call_tool("komodo_terminal_Execute", {
                "server_id": host_name, "command": "echo out; echo err >&2; read x; echo got $x; exit 3",
                "options": {"stdin": "fed\n"}}))
            output = payload(await client.call_tool("komodo_terminal_GetOutput", {
                "session_id": started["sessionId"], "options": {"follow": True}}))["output"]
            gone = await client.call_tool("komodo_terminal_GetOutput", {"session_id": "no-such-session"})
            return host, output, gone

    host, output, gone = run(scenario())
    assert host.is_error and json.loads(host.content[0].text)["error"] == "INVALID_INPUT"
    assert "nowhere" in json.loads(host.content[0].text)["message"]
    assert (output["stdout"], output["stderr"], output["exitCode"], output["isComplete"]) == (
        "out\ngot fed\n", "err\n", 3, True)
    assert gone.is_error and json.loads(gone.content[0].text) == {
        "success": False, "error": "Session not found",
        "message": json.loads(gone.content[0].text)["message"]}


def test_persistent_terminal_tools_on_seed_000s_semantics(server, keys):
    async def scenario():
        async with connect(server.url, keys["alice"], "/mcp/persistent-terminal") as client:
            names = {tool.name for tool in (await client.list_tools()).tools}
            created = data(await client.call_tool("create_terminal", {"cwd": "/tmp", "env": {"GREETING": "hello"}}))
            terminal = created["terminalId"]
            await client.call_tool("write_terminal", {"terminalId": terminal,
                                                      "input": "echo $GREETING; for i in 1 2 3; do echo tick $i; sleep 0.2; done"})
            matched = data(await client.call_tool("wait_for_output", {"terminalId": terminal, "pattern": r"tick 3",
                                                                      "timeout": 10000}))
            settled = data(await client.call_tool("wait_for_output", {"terminalId": terminal, "stableTime": 300}))
            tail = data(await client.call_tool("read_terminal", {"terminalId": terminal, "mode": "tail", "tailLines": 3,
                                                                 "stripAnsi": True}))
            stats = data(await client.call_tool("get_terminal_stats", {"terminalId": terminal}))
            listed = data(await client.call_tool("list_terminals", {}))
            killed = data(await client.call_tool("kill_terminal", {"terminalId": terminal}))
            return names, created, matched, settled, tail, stats, listed, killed

    names, created, matched, settled, tail, stats, listed, killed = run(scenario())
    assert names == PERSISTENT
    assert created["status"] == "active" and created["cwd"] == "/tmp"
    assert matched["outcome"] == "matched" and "tick 3" in matched["output"]  # what came after the call began
    assert settled["outcome"] == "settled"
    assert "tick 3" in tail["output"] and tail["stats"]["linesShown"] <= 3
    assert stats["terminalId"] == created["terminalId"] and stats["totalBytes"] > 0 and stats["isActive"] is True
    assert created["terminalId"] in [terminal["terminalId"] for terminal in listed["terminals"]]
    assert killed["status"] == "killed" and killed["message"] == "Terminal terminated successfully"
