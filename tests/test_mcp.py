"""The MCP endpoint, driven by the official SDK's client against real servers (embedded, and split with two web
processes): the tool lists against seed 001, every tool, seed 001's scenarios A to D through /mcp/terminally, one
user's terminals invisible to another through every profile, tool errors that say what to do, 401 before any MCP
message without a key, progress during a long wait, bounded output, and the audit trail (docs/mcp.md)."""

from __future__ import annotations

import asyncio
import contextlib
import json

import pytest
import requests
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from terminals.models import AuditEvent

from .helpers import eventually, run
from .servers import start_embedded

SEED_001 = {  # tool: (properties and their JSON types, required), as the PRD defines them
    "create_tab": ({"name": "string", "cwd": "string", "env": "object", "login": "boolean"}, []),
    "list_tabs": ({}, []),
    "read_logs_from_tab": ({"window_id": "string", "lines": "number", "strip_ansi": "boolean"}, ["window_id"]),
    "execute_command": ({"window_id": "string", "command": "string", "timeout_ms": "number", "strip_ansi": "boolean"},
                        ["window_id", "command"]),
    "start_process": ({"window_id": "string", "command": "string", "append_newline": "boolean"},
                      ["window_id", "command"]),
    "stop_process": ({"window_id": "string", "signal": "string"}, ["window_id"]),
    "stream_logs_from_tab": ({"window_id": "string", "from_byte": "number", "max_bytes": "number",
                              "strip_ansi": "boolean"}, ["window_id"]),
}


@contextlib.asynccontextmanager
async def connect(url: str, key: str | None, path: str = "/mcp", **headers):
    sent = {**({"Authorization": f"Bearer {key}"} if key else {}), **headers}
    http = create_mcp_http_client(headers=sent)
    async with Client(streamable_http_client(f"{url}{path}", http_client=http)) as client:
        yield client


def data(answer) -> dict:
    """A successful call's structured content, which its text must carry as JSON too (seed 001's convention)."""
    assert not answer.is_error, answer.content[0].text
    return answer.structured_content


def text(answer) -> str:
    return answer.content[0].text


def test_terminally_lists_seed_001s_tools_with_its_schemas(server, keys):
    async def scenario():
        async with connect(server.url, keys["alice"], "/mcp/terminally") as client:
            return (await client.list_tools()).tools

    tools = {tool.name: tool for tool in run(scenario())}
    assert set(tools) == set(SEED_001)
    for name, (properties, required) in SEED_001.items():
        schema = tools[name].input_schema
        assert {prop: spec.get("type") for prop, spec in schema.get("properties", {}).items()} == properties, name
        assert sorted(schema.get("required", [])) == sorted(required), name
    assert tools["read_logs_from_tab"].annotations.read_only_hint is True
    assert tools["execute_command"].annotations.destructive_hint is True


def test_seed_001_scenarios_a_to_d_through_terminally(server, keys, tmp_path):
    """A: a bounded command with its exit code; B: a dev server started, its logs read, stopped; C: three named
    tabs, two services and a test run; D: a failure investigated from the history and with grep."""
    log = tmp_path / "app.log"
    log.write_text("starting\nERROR: disk full\nok\n")
    log.chmod(0o644)
    tmp_path.chmod(0o755)

    async def scenario():
        async with connect(server.url, keys["alice"], "/mcp/terminally") as client:
            async def call(tool, **arguments):
                return data(await client.call_tool(tool, arguments))

            # A
            tab = (await call("create_tab", cwd=str(tmp_path)))["window_id"]
            listed = await call("execute_command", window_id=tab, command="ls -la", timeout_ms=5000)
            assert listed["exit_code"] == 0 and "app.log" in listed["output"] and listed["timed_out"] is False
            recent = await call("read_logs_from_tab", window_id=tab, lines=50)
            assert "app.log" in recent["content"]
            # B
            web = (await call("create_tab", name="web"))["window_id"]
            assert await call("start_process", window_id=web, command="while :; do echo serving; sleep 0.2; done") == {
                "started": True}
            await wait_logs(call, web, "serving")
            assert await call("stop_process", window_id=web) == {"success": True}
            after = await call("execute_command", window_id=web, command="echo stopped-$((40+2))", timeout_ms=5000)
            assert (after["output"], after["exit_code"]) == ("stopped-42\n", 0)
            # C
            tabs = {name: (await call("create_tab", name=name))["window_id"] for name in ("web2", "db", "tests")}
            await call("start_process", window_id=tabs["web2"], command="while :; do echo web-up; sleep 0.3; done")
            await call("start_process", window_id=tabs["db"], command="while :; do echo db-up; sleep 0.3; done")
            tested = await call("execute_command", window_id=tabs["tests"], command="sh -c 'echo 3 passed; exit 1'",
                                timeout_ms=120000)
            assert (tested["output"], tested["exit_code"]) == ("3 passed\n", 1)
            for name, needle in (("web2", "web-up"), ("db", "db-up")):
                await wait_logs(call, tabs[name], needle)
            listing = (await call("list_tabs"))["tabs"]
            names = {tab["name"]: tab for tab in listing}
            assert {"web", "web2", "db", "tests"} <= set(names)
            assert [tab["name"] for tab in listing if tab["active"]] == ["tests"]  # the newest, as tmux's new window
            for name in ("web2", "db"):
                await call("stop_process", window_id=tabs[name])
            # D
            history = await call("read_logs_from_tab", window_id=tab, lines=2000)
            assert "ls -la" in history["content"] and history["truncated"] is False
            grepped = await call("execute_command", window_id=tab, command="grep -i error app.log", timeout_ms=10000)
            assert (grepped["output"], grepped["exit_code"]) == ("ERROR: disk full\n", 0)
            return [tab, web, *tabs.values()]

    made = run(scenario())
    cleanup(server, keys["alice"], made)


async def wait_logs(call, tab: str, needle: str) -> None:
    """Waits for a line the program printed: the whole line, so the echo of the command that prints it (which
    holds the needle too, and shows first) does not count as the program running."""
    async def shown():
        content = (await call("read_logs_from_tab", window_id=tab, lines=20, strip_ansi=True))["content"]
        return needle in [line.strip() for line in content.splitlines()]

    await eventually(shown, f"{needle!r} in tab {tab}", timeout=20.0)


def cleanup(server, key: str, terminals: list[str]) -> None:
    for terminal in terminals:
        requests.delete(f"{server.url}/api/terminals/{terminal}", headers={"X-API-Key": key}, timeout=30)


def test_terminally_reads_by_line_count_and_byte_offset_and_keeps_text_unescaped(server, keys):
    async def scenario():
        async with connect(server.url, keys["alice"], "/mcp/terminally") as client:
            tab = data(await client.call_tool("create_tab", {}))["window_id"]
            ran = await client.call_tool("execute_command", {"window_id": tab, "command": "seq 1 30; printf '€%.0s' $(seq 5000); echo"})
            logs = data(await client.call_tool("read_logs_from_tab", {"window_id": tab, "lines": 3, "strip_ansi": True}))
            first = data(await client.call_tool("stream_logs_from_tab", {"window_id": tab, "max_bytes": 10}))
            second = data(await client.call_tool("stream_logs_from_tab", {"window_id": tab, "from_byte": first["next_byte"],
                                                                          "max_bytes": 10}))
            bad = await client.call_tool("read_logs_from_tab", {"window_id": tab, "lines": 2.5})
            return tab, ran, logs, first, second, bad

    tab, ran, logs, first, second, bad = run(scenario())
    assert data(ran)["exit_code"] == 0
    assert "€" * 5000 in text(ran) and len(text(ran)) < 6000  # 5,000 € stay 5,000 characters, not \\u20ac each
    assert json.loads(text(ran)) == data(ran)
    assert logs["returned_lines"] == 3 and logs["truncated"] is True
    assert first["next_byte"] == 10 and second["next_byte"] == 20 and first["eof"] is False
    assert bad.is_error and "lines must be a whole number" in text(bad) and "Next:" in text(bad)
    cleanup(server, keys["alice"], [tab])


def test_our_profile_runs_commands_for_their_exit_code_and_hands_back_the_running_ones(server, keys):
    async def scenario():
        progress = []

        async def on_progress(value, total, message):
            progress.append(value)

        async with connect(server.url, keys["alice"]) as client:
            terminal = data(await client.call_tool("create_terminal", {"name": "agent"}))["terminal_id"]
            failed = await client.call_tool("run_command", {"terminal_id": terminal, "command": "echo out; echo err >&2; false"})
            slow = data(await client.call_tool("run_command", {"terminal_id": terminal, "command": "sleep 7; echo done",
                                                               "timeout_ms": 500}))
            waited = data(await client.call_tool("wait_for_command", {"terminal_id": terminal,
                                                                      "command_id": slow["command_id"],
                                                                      "timeout_ms": 20000},
                                                 progress_callback=on_progress))
            flood = data(await client.call_tool("run_command", {"terminal_id": terminal, "command": "seq 1 5000",
                                                                "max_chars": 1000}))
            keys_sent = data(await client.call_tool("send_input", {"terminal_id": terminal, "text": "sleep 30",
                                                                   "keys": ["ctrl-c"]}))
            listed = data(await client.call_tool("list_terminals", {}))
            closed = data(await client.call_tool("close_terminal", {"terminal_id": terminal}))
            return terminal, failed, slow, waited, flood, keys_sent, listed, closed, progress

    terminal, failed, slow, waited, flood, keys_sent, listed, closed, progress = run(scenario())
    assert not failed.is_error  # exit code 1 is data, not a tool error
    assert failed.structured_content["exit_code"] == 1 and "out\nerr\n" in failed.structured_content["output"]
    assert text(failed).endswith("[exit code 1]")
    assert (slow["status"], slow["timed_out"], slow["exit_code"]) == ("running", True, None)
    assert (waited["status"], waited["exit_code"], waited["output"]) == ("completed", 0, "done\n")
    assert progress, "no progress notification during a wait of several seconds"
    assert flood["chars_omitted"] > 0 and len(flood["output"]) < 1100 and flood["output"].startswith("1\n")
    assert flood["output"].rstrip().endswith("5000") and flood["exit_code"] == 0
    assert keys_sent["ok"] and terminal in [item["terminal_id"] for item in listed["terminals"]]
    assert closed["ok"]


def test_run_command_without_a_terminal_opens_one_in_cwd_and_names_it(server, keys, tmp_path):
    """One call runs a command in a new shell terminal; its id comes back (text and structured) for the next one."""
    tmp_path.chmod(0o755)  # the terminal may run as an unprivileged account

    async def scenario():
        async with connect(server.url, keys["alice"]) as client:
            first = await client.call_tool("run_command", {"command": "pwd; X=kept", "cwd": str(tmp_path)})
            terminal = data(first)["terminal_id"]
            second = data(await client.call_tool("run_command", {"terminal_id": terminal, "command": "echo $X"}))
            both = await client.call_tool("run_command", {"terminal_id": terminal, "cwd": "/", "command": "true"})
            listed = data(await client.call_tool("list_terminals", {}))
            await client.call_tool("close_terminal", {"terminal_id": terminal})
            return first, terminal, second, both, listed

    first, terminal, second, both, listed = run(scenario())
    assert data(first)["output"] == f"{tmp_path}\n" and data(first)["exit_code"] == 0
    assert text(first).endswith(f"[exit code 0 in terminal {terminal}]")
    assert second["output"] == "kept\n" and second["terminal_id"] == terminal
    assert both.is_error and "cwd is for a new terminal" in text(both)
    assert terminal in [item["terminal_id"] for item in listed["terminals"]]


def test_a_user_cannot_see_or_touch_another_users_terminals_through_any_profile(server, keys):
    async def scenario():
        async with connect(server.url, keys["alice"]) as alice:
            mine = data(await alice.call_tool("create_terminal", {}))["terminal_id"]
        async with connect(server.url, keys["bob"]) as bob:
            ours = await bob.call_tool("run_command", {"terminal_id": mine, "command": "touch /tmp/bob-was-here"})
            listed = data(await bob.call_tool("list_terminals", {}))
        async with connect(server.url, keys["bob"], "/mcp/terminally") as bob:
            theirs = await bob.call_tool("execute_command", {"window_id": mine, "command": "id"})
            stopped = await bob.call_tool("stop_process", {"window_id": mine})
            tabs = data(await bob.call_tool("list_tabs", {}))
        return mine, ours, listed, theirs, stopped, tabs

    mine, ours, listed, theirs, stopped, tabs = run(scenario())
    for answer in (ours, theirs, stopped):
        assert answer.is_error and "TERMINAL_NOT_FOUND" in text(answer) and "Next:" in text(answer)
    assert mine not in json.dumps(listed) and mine not in json.dumps(tabs)
    cleanup(server, keys["alice"], [mine])


def test_no_key_is_401_before_any_mcp_message_and_is_audited(server, keys, orm):
    before = AuditEvent.objects.filter(action="mcp", outcome="UNAUTHORIZED").count()
    message = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    for headers in ({}, {"Authorization": "Bearer tk_00000000.nope"}, {"X-API-Key": keys["revoked"]}):
        answer = requests.post(f"{server.url}/mcp/terminally", json=message, timeout=30,
                               headers={"Accept": "application/json, text/event-stream", **headers})
        assert answer.status_code == 401, answer.text
        assert answer.json()["error"]["code"] == "UNAUTHORIZED" and "jsonrpc" not in answer.text
        assert "oauth" not in json.dumps(dict(answer.headers)).lower()
    assert AuditEvent.objects.filter(action="mcp", outcome="UNAUTHORIZED").count() == before + 3
    foreign = requests.post(f"{server.url}/mcp", json=message, timeout=30,
                            headers={"X-API-Key": keys["alice"], "Origin": "http://evil.example"})
    assert foreign.status_code == 403
    unknown = requests.post(f"{server.url}/mcp/nowhere", json=message, timeout=30, headers={"X-API-Key": keys["alice"]})
    assert unknown.status_code == 404 and "/mcp/terminally" in unknown.json()["error"]["message"]


def test_every_call_is_audited_with_its_tool_and_acts_as_the_keys_user(server, keys, orm):
    async def scenario():
        async with connect(server.url, None, "/mcp", **{"X-API-Key": keys["alice"]}) as client:
            terminal = data(await client.call_tool("create_terminal", {}))["terminal_id"]
            await client.call_tool("run_command", {"terminal_id": terminal, "command": "echo audited"})
            return terminal

    terminal = run(scenario())
    calls = AuditEvent.objects.filter(action="mcp", terminal_id=terminal).order_by("id")
    assert [(row.details["tool"], row.outcome, row.details["profile"]) for row in calls] == [
        ("run_command", "ok", "terminals")]
    created = AuditEvent.objects.get(action="create", terminal_id=terminal)
    command = AuditEvent.objects.get(action="command", terminal_id=terminal)
    assert created.username.startswith("alice") and created.source.endswith("(MCP)")
    assert command.details["command"] == "echo audited" and command.source.endswith("(MCP)")
    cleanup(server, keys["alice"], [terminal])


def test_calls_of_one_client_may_land_on_either_web_process(split_server, keys):
    """Stateless: a tab made through one web process is driven through the other."""
    first, second = split_server.urls[:2]

    async def scenario():
        async with connect(first, keys["alice"], "/mcp/terminally") as one:
            tab = data(await one.call_tool("create_tab", {}))["window_id"]
        async with connect(second, keys["alice"], "/mcp/terminally") as other:
            ran = data(await other.call_tool("execute_command", {"window_id": tab, "command": "echo $((6*7))"}))
        return tab, ran

    tab, ran = run(scenario())
    assert (ran["output"], ran["exit_code"]) == ("42\n", 0)
    cleanup(split_server, keys["alice"], [tab])


def test_a_client_gone_mid_call_leaves_the_terminal_usable(server, keys):
    """The client disconnects while run_command waits: the command runs on (it was asked for), the terminal is
    not harmed, and the next client finds the command's result."""
    async def scenario():
        async with connect(server.url, keys["alice"]) as client:
            terminal = data(await client.call_tool("create_terminal", {}))["terminal_id"]
        async with connect(server.url, keys["alice"]) as client:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(client.call_tool("run_command", {"terminal_id": terminal,
                                                                        "command": "sleep 2; echo finished"}), 0.5)
        async with connect(server.url, keys["alice"]) as client:
            async def finished():
                found = data(await client.call_tool("read_output", {"terminal_id": terminal}))
                return "finished\n" in found["output"].replace("echo finished", "")
            await eventually(finished, "the command the client left to finish", timeout=20.0)
            again = data(await client.call_tool("run_command", {"terminal_id": terminal, "command": "echo next"}))
        return terminal, again

    terminal, again = run(scenario())
    assert (again["output"], again["exit_code"]) == ("next\n", 0)
    cleanup(server, keys["alice"], [terminal])


def test_the_stdio_bridge_serves_a_stdio_client_with_the_key_from_the_environment(embedded_server, keys):
    """manage.py mcp_stdio, started by the SDK's stdio client as Claude Desktop starts servers: the tools of the
    endpoint, calls forwarded as the key's user, progress passed on; without the key, or with a key the service
    refuses, it says so on stderr and what to check."""
    import subprocess
    import sys

    from mcp.client.stdio import StdioServerParameters

    from .servers import ROOT, service_env

    env = {**service_env(TERMINALS_API_KEY=keys["alice"])}
    parameters = StdioServerParameters(command=sys.executable, cwd=str(ROOT), env=env,
                                       args=["manage.py", "mcp_stdio", "--url", f"{embedded_server.url}/mcp"])

    async def scenario():
        progress = []

        async def on_progress(value, total, message):
            progress.append(value)

        async with Client(parameters) as client:
            names = {tool.name for tool in (await client.list_tools()).tools}
            terminal = data(await client.call_tool("create_terminal", {}))["terminal_id"]
            ran = data(await client.call_tool("run_command", {"terminal_id": terminal, "command": "sleep 6; exit 4"},
                                              progress_callback=on_progress))
            return names, terminal, ran, progress

    names, terminal, ran, progress = run(scenario())
    assert {"run_command", "create_terminal", "read_output"} <= names
    assert ran["exit_code"] == 4 and progress
    owner = requests.get(f"{embedded_server.url}/api/terminals/{terminal}", headers={"X-API-Key": keys["alice"]},
                         timeout=30).json()["data"]["owner"]
    assert owner.startswith("alice")
    cleanup(embedded_server, keys["alice"], [terminal])

    keyless = {name: value for name, value in env.items() if name != "TERMINALS_API_KEY"}
    refused = subprocess.run([sys.executable, "manage.py", "mcp_stdio", "--url", f"{embedded_server.url}/mcp"],
                             cwd=ROOT, env=keyless, input="", capture_output=True, text=True, timeout=60)
    assert refused.returncode != 0 and refused.stdout == "" and "TERMINALS_API_KEY" in refused.stderr
    wrong = subprocess.run([sys.executable, "manage.py", "mcp_stdio", "--url", f"{embedded_server.url}/mcp"],
                           cwd=ROOT, env={**keyless, "TERMINALS_API_KEY": "tk_00000000.wrong"}, input="",
                           capture_output=True, text=True, timeout=60)
    assert wrong.returncode != 0 and wrong.stdout == "", wrong.stderr
    # It says the key was refused (401), what the service said, and what to check; no per-request log lines.
    assert "answered 401 Unauthorized: " in wrong.stderr and "Next: check that TERMINALS_API_KEY" in wrong.stderr
    assert "revoked or expired" in wrong.stderr and "--url" in wrong.stderr
    assert "Server returned an error response" not in wrong.stderr and "HTTP Request" not in wrong.stderr


def test_a_pager_does_not_take_an_agents_terminal(server, keys, tmp_path):
    """git log with more commits than rows would open a pager that waits for keys and eats the next command;
    terminals made through MCP page with cat unless the agent sets a pager itself."""
    repository = tmp_path / "repository"
    tmp_path.chmod(0o755)

    async def scenario():
        async with connect(server.url, keys["alice"]) as client:
            terminal = data(await client.call_tool("create_terminal", {"cwd": str(tmp_path)}))["terminal_id"]
            made = data(await client.call_tool("run_command", {"terminal_id": terminal, "command":
                f"git init -q {repository} && cd {repository} && for i in $(seq 60); do git -c user.email=a@b "
                "-c user.name=a commit -q --allow-empty -m commit-$i; done"}))
            logged = data(await client.call_tool("run_command", {"terminal_id": terminal, "timeout_ms": 10000,
                                                                 "command": "git log --format=%s"}))
            after = data(await client.call_tool("run_command", {"terminal_id": terminal, "command": "echo next"}))
            return terminal, made, logged, after

    terminal, made, logged, after = run(scenario())
    assert made["exit_code"] == 0
    assert (logged["status"], logged["exit_code"], logged["waiting_for_input"]) == ("completed", 0, False)
    assert logged["output"].splitlines()[:2] == ["commit-60", "commit-59"] and "commit-1\n" in logged["output"]
    assert after["output"] == "next\n"
    cleanup(server, keys["alice"], [terminal])


def test_wait_for_output_finds_what_the_last_input_caused(server, keys):
    async def scenario():
        async with connect(server.url, keys["alice"]) as client:
            terminal = data(await client.call_tool("create_terminal", {}))["terminal_id"]
            await client.call_tool("send_input", {"terminal_id": terminal,
                                                  "text": "sleep 1; echo listening on port $((8000+80))"})
            found = data(await client.call_tool("wait_for_output", {"terminal_id": terminal,
                                                                    "pattern": r"listening on port \d+"}))
            asked = None
            await client.call_tool("send_input", {"terminal_id": terminal, "text": "read -p 'go? ' x"})
            asked = data(await client.call_tool("wait_for_output", {"terminal_id": terminal}))
            return terminal, found, asked

    terminal, found, asked = run(scenario())
    assert (found["outcome"], found["match"]) == ("matched", "listening on port 8080")
    assert asked["outcome"] == "waiting_for_input" and asked["output"].endswith("go? ")
    cleanup(server, keys["alice"], [terminal])


def test_the_rest_of_the_rest_api_through_our_profile(server, keys):
    """Byte-offset reads, statistics, waiting for a program's exit, the command history, and a kill that keeps
    the output: what the REST API can do, /mcp can do."""
    async def scenario():
        async with connect(server.url, keys["alice"]) as client:
            async def call(tool, **arguments):
                return data(await client.call_tool(tool, arguments))

            program = (await call("create_terminal", command="sh", args=["-c", "printf 'héllo wörld\\n'; exit 5"]))[
                "terminal_id"]
            exited = await call("wait_for_exit", terminal_id=program, timeout_ms=15000)
            first = await call("read_bytes", terminal_id=program, max_bytes=2)
            rest = await call("read_bytes", terminal_id=program, from_byte=first["next_byte"])
            stats = await call("get_stats", terminal_id=program)
            shell = (await call("create_terminal"))["terminal_id"]
            await call("run_command", terminal_id=shell, command="echo one")
            await call("run_command", terminal_id=shell, command="false")
            history = await call("list_commands", terminal_id=shell)
            await call("send_input", terminal_id=shell, text="sleep 300")
            killed = await call("kill_terminal", terminal_id=shell)
            after = await call("read_output", terminal_id=shell)
            return program, exited, first, rest, stats, history, killed, after, shell

    program, exited, first, rest, stats, history, killed, after, shell = run(scenario())
    assert (exited["exited"], exited["exit_code"]) == (True, 5)
    assert first["chunk"] == "h" and first["next_byte"] == 1  # 2 bytes would cut é in two: never half a character
    assert first["chunk"] + rest["chunk"] == "héllo wörld\n"  # the PTY's \r\n as text (strip_ansi, the default)
    assert stats["total_bytes"] == rest["next_byte"] and stats["running"] is False and stats["exit_code"] == 5
    assert [(item["command"], item["exit_code"]) for item in history["commands"]] == [("echo one", 0), ("false", 1)]
    assert killed["ok"] and "echo one" in after["output"] and after["running"] is False
    cleanup(server, keys["alice"], [program, shell])


SHORT_MCP_WAIT_MS = 2000


@pytest.fixture(scope="module")
def short_mcp_wait(django_db_setup):
    """An embedded server of its own whose MCP calls wait at most SHORT_MCP_WAIT_MS."""
    server = start_embedded(TERMINALS_MCP_MAX_WAIT_MS=str(SHORT_MCP_WAIT_MS))
    yield server
    server.stop()


def test_no_mcp_call_waits_past_the_mcp_bound_and_the_command_can_be_waited_for_next(short_mcp_wait, keys):
    """An agent asking for a ten-minute wait gets an answer within TERMINALS_MCP_MAX_WAIT_MS (plus a margin), in
    the tool's timeout shape, with the handle to wait on: run_command says running with its command_id, and
    wait_for_command (capped the same way) then gets the exit code. Every waiting tool of every profile is capped."""
    ten_minutes, answered_within = 600_000, 10.0

    async def timed(client, tool, arguments):
        started = asyncio.get_running_loop().time()
        answer = await client.call_tool(tool, arguments)
        return answer, asyncio.get_running_loop().time() - started

    async def scenario():
        slow = []
        async with connect(short_mcp_wait.url, keys["alice"]) as client:
            ran, took = await timed(client, "run_command", {"command": "sleep 12; exit 3", "timeout_ms": ten_minutes})
            slow.append(("run_command", took))
            terminal, command = data(ran)["terminal_id"], data(ran)["command_id"]
            for tool, arguments in (("wait_for_output", {"pattern": "never printed", "until_input": False}),
                                    ("wait_for_exit", {})):
                answer, took = await timed(client, tool, {"terminal_id": terminal, "timeout_ms": ten_minutes,
                                                          **arguments})
                slow.append((tool, took))
                assert not answer.is_error, text(answer)
            waits = []
            while not waits or data(waits[-1])["status"] == "running":
                answer, took = await timed(client, "wait_for_command", {"terminal_id": terminal, "command_id": command,
                                                                        "timeout_ms": ten_minutes})
                waits.append(answer)
                slow.append(("wait_for_command", took))
                assert len(waits) < 20, "the command never finished"
            await client.call_tool("close_terminal", {"terminal_id": terminal})
        async with connect(short_mcp_wait.url, keys["alice"], "/mcp/terminally") as client:
            tab = data(await client.call_tool("create_tab", {}))["window_id"]
            executed, took = await timed(client, "execute_command", {"window_id": tab, "command": "sleep 12",
                                                                    "timeout_ms": ten_minutes})
            slow.append(("execute_command", took))
        async with connect(short_mcp_wait.url, keys["alice"], "/mcp/persistent-terminal") as client:
            waited, took = await timed(client, "wait_for_output", {"terminalId": tab, "pattern": "never printed",
                                                                   "timeout": ten_minutes})
            slow.append(("persistent wait_for_output", took))
        cleanup(short_mcp_wait, keys["alice"], [tab])
        return ran, waits, executed, waited, slow

    ran, waits, executed, waited, slow = run(scenario())
    assert (data(ran)["status"], data(ran)["timed_out"], data(ran)["exit_code"]) == ("running", True, None)
    assert data(ran)["command_id"] in text(ran) and "wait_for_command" in text(ran)
    assert (data(waits[-1])["status"], data(waits[-1])["exit_code"]) == ("completed", 3)
    assert data(executed)["timed_out"] is True and "exit_code" not in data(executed)
    assert data(waited)["outcome"] == "timeout"
    assert all(took < answered_within for _, took in slow), slow


def test_a_flood_costs_a_bounded_number_of_characters_with_its_head_tail_and_what_was_left_out(server, keys):
    """seq 1 200000 through run_command: what the result hands an agent (its text and its structured content as
    JSON, as a client that forwards both does) stays under RESULT_COST_BOUND (it was 43,000); the head and the tail
    are there, one marker says how many lines were left out (the structured lines_omitted), and the exit code and
    the command_id are there. read_output's text is the output and one line, not its JSON."""
    result_cost_bound = 20_000

    async def scenario():
        async with connect(server.url, keys["alice"]) as client:
            ran = await client.call_tool("run_command", {"command": "seq 1 200000"})
            terminal = data(ran)["terminal_id"]
            read = await client.call_tool("read_output", {"terminal_id": terminal})
            await client.call_tool("close_terminal", {"terminal_id": terminal})
            return ran, read

    ran, read = run(scenario())
    cost = len(text(ran)) + len(json.dumps(data(ran), ensure_ascii=False))
    assert cost <= result_cost_bound, cost
    ran_data = data(ran)
    assert (ran_data["exit_code"], ran_data["status"]) == (0, "completed") and ran_data["command_id"].startswith("cmd_")
    omitted, held = ran_data["lines_omitted"], 10_000  # a terminal holds its newest TERMINALS_MAX_OUTPUT_LINES
    kept = [line for line in ran_data["output"].splitlines() if not line.startswith("[...")]
    first = 200_000 - held + 1
    assert kept[:3] == [str(first), str(first + 1), str(first + 2)] and kept[-1] == "200000"
    assert len(kept) + omitted == held  # every line held is shown or counted
    assert ran_data["truncated"] and ran_data["chars_omitted"] > 0
    for shown in (text(ran), ran_data["output"]):
        assert shown.startswith(f"[... earlier lines no longer held ...]\n{first}\n")
        assert f"[... {omitted:,} lines left out ...]" in shown
    assert text(ran).endswith(f"200000\n[exit code 0 in terminal {ran_data['terminal_id']}]")
    read_data = data(read)
    assert read_data["lines_omitted"] > 0 and text(read).endswith(f"[next_line {read_data['next_line']}; running]")
    assert len(text(read)) + len(json.dumps(read_data, ensure_ascii=False)) <= result_cost_bound


@pytest.mark.parametrize("path,tool,arguments,name,meant", [
    ("/mcp", "create_terminal", {"cwdir": "/nonexistent"}, "cwdir", "cwd"),
    ("/mcp", "run_command", {"command": "true", "timeoutMs": 1000}, "timeoutMs", "timeout_ms"),
    ("/mcp/persistent-terminal", "create_terminal", {"shell": "/bin/sh", "cwdir": "/tmp"}, "cwdir", "cwd"),
    ("/mcp/terminally", "create_tab", {"tab_name": "x"}, "tab_name", None),
], ids=["terminals-cwdir", "terminals-timeoutMs", "persistent-cwdir", "terminally-tab_name"])
def test_unknown_tool_argument_is_refused_naming_the_one_meant(server, keys, orm, path, tool, arguments, name, meant):
    """An argument a tool does not take is a tool error naming it and the argument meant, on every profile, and
    nothing starts; every tool's input schema says so (additionalProperties: false), its properties unchanged."""
    from terminals.models import ApiKey, TerminalSession

    owner = ApiKey.objects.for_key(keys["alice"]).user
    before = TerminalSession.objects.filter(owner=owner).count()

    async def scenario():
        async with connect(server.url, keys["alice"], path) as client:
            listed = await client.list_tools()
            return await client.call_tool(tool, arguments), listed.tools

    answer, tools = run(scenario())
    assert answer.is_error and f"unknown argument {name!r}" in text(answer), text(answer)
    if meant is not None:
        assert f"did you mean {meant!r}?" in text(answer), text(answer)
    assert all(listed.input_schema.get("additionalProperties") is False for listed in tools)
    assert TerminalSession.objects.filter(owner=owner).count() == before
