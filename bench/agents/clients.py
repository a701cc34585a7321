"""The MCP servers compared, each behind the same few moves an agent makes (run, start, wait for, type, stop).

Every tool call goes through `Tally.call`, which counts the calls, the characters the agent is handed (the text
content, which is what clients put in the model's context) and the time of each call, and records a call that
outlives the bound it was asked for by more than HANG_SLACK as a hang. Each adapter makes the calls a careful agent
would make after reading that server's tool descriptions; where a server has no tool for a move (waiting for a
pattern, say), the adapter polls, as an agent must, and every poll is counted.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from dataclasses import dataclass, field

HANG_SLACK = 5.0  # seconds past the bound a call asked for before it counts as a hang
CALL_CAP = 90.0  # seconds: a call still running then is abandoned (and counted as a hang)
POLL = 0.5  # seconds between polls where a server has no waiting tool


@dataclass
class Ran:
    """What an agent knows after running a command: its output, its exit code (None: not known) and, if it is
    still running, a handle to come back to it with."""

    output: str
    exit_code: int | None = None
    handle: object = None
    waiting_for_input: bool = False


@dataclass
class Tally:
    calls: int = 0
    chars: int = 0
    seconds: list[float] = field(default_factory=list)
    hangs: int = 0

    async def call(self, session, tool: str, arguments: dict, bound: float = 10.0) -> tuple[str, dict | None, bool]:
        """Calls a tool; its text, its structured content and whether it is a tool error."""
        started = time.monotonic()
        try:
            answer = await asyncio.wait_for(session.call_tool(tool, arguments), CALL_CAP)
        except TimeoutError:
            self.hangs += 1
            raise
        finally:
            elapsed = time.monotonic() - started
            self.calls += 1
            self.seconds.append(elapsed)
        if elapsed > bound + HANG_SLACK:
            self.hangs += 1
        text = "\n".join(getattr(part, "text", "") for part in answer.content)
        self.chars += len(text)
        if answer.is_error:
            raise ToolFailed(f"{tool}: {text[:200]}")
        return text, answer.structured_content, answer.is_error


class ToolFailed(Exception):
    """The server answered a call with a tool error."""


class Unsupported(Exception):
    """The server has no way to do this move."""


class Adapter:
    name = ""
    tally: Tally
    session: object
    workdir: str

    async def call(self, tool: str, arguments: dict, bound: float = 10.0):
        return await self.tally.call(self.session, tool, arguments, bound)

    async def run(self, command: str, timeout: float) -> Ran:
        raise NotImplementedError

    async def finish(self, ran: Ran, timeout: float) -> Ran:
        """Waits for a command that run returned still running."""
        raise NotImplementedError

    async def start(self, command: str) -> object:
        """Starts a long-running program; a handle."""
        raise NotImplementedError

    async def wait_for(self, handle, pattern: str, timeout: float) -> str:
        """Waits until the program's output matches pattern; the output seen (raises TimeoutError)."""
        raise NotImplementedError

    async def type(self, handle, text: str) -> None:
        raise NotImplementedError

    async def stop(self, handle) -> None:
        """Stops a started program the gentle way the server offers (Ctrl-C where there is a terminal)."""
        raise NotImplementedError

    async def kill(self, handle) -> None:
        """Ends a started program and everything it started, the surest way the server offers."""
        raise NotImplementedError

    async def close(self) -> None:
        """Ends what this adapter opened (not counted)."""


class Ours(Adapter):
    """/mcp, this service's own tool set: run_command without a terminal_id opens a shell terminal (one call); the
    case's later commands go to that shell, and each started program gets a terminal of its own the same way."""

    name = "ours: /mcp"

    async def open(self) -> None:
        self.terminals: list[str] = []
        self.shell = ""
        self.seen: dict[str, str] = {}

    async def _run(self, command: str, timeout: float, terminal: str) -> dict:
        arguments = {"command": command, "timeout_ms": int(timeout * 1000)}
        arguments.update({"terminal_id": terminal} if terminal else {"cwd": self.workdir})
        _, data, _ = await self.call("run_command", arguments, timeout)
        if not terminal:
            self.terminals.append(data["terminal_id"])
        return data

    def _ran(self, data: dict) -> Ran:
        running = data["status"] == "running"
        return Ran(data["output"], data["exit_code"], (data["terminal_id"], data["command_id"]) if running else None,
                   data["waiting_for_input"])

    async def run(self, command, timeout):
        data = await self._run(command, timeout, self.shell)
        self.shell = data["terminal_id"]
        return self._ran(data)

    async def finish(self, ran, timeout):
        terminal, command_id = ran.handle
        _, data, _ = await self.call("wait_for_command", {"terminal_id": terminal, "command_id": command_id,
                                                          "timeout_ms": int(timeout * 1000)}, timeout)
        return self._ran(data)

    async def start(self, command):
        data = await self._run(command, 1.0, "")
        self.seen[data["terminal_id"]] = data["output"]
        return data["terminal_id"]

    async def wait_for(self, handle, pattern, timeout):
        if re.search(pattern, self.seen.get(handle, "")):
            return self.seen[handle]
        _, data, _ = await self.call("wait_for_output", {"terminal_id": handle, "pattern": pattern,
                                                         "timeout_ms": int(timeout * 1000), "until_input": False},
                                     timeout)
        if data["outcome"] != "matched":
            raise TimeoutError(data["outcome"])
        return data["output"]

    async def type(self, handle, text):
        terminal = handle[0] if isinstance(handle, tuple) else handle
        await self.call("send_input", {"terminal_id": terminal, "text": text})

    async def stop(self, handle):
        await self.call("send_signal", {"terminal_id": handle, "signal": "SIGINT"})

    async def kill(self, handle):
        await self.call("kill_terminal", {"terminal_id": handle})

    async def close(self):
        for terminal in getattr(self, "terminals", []):
            await self.session.call_tool("close_terminal", {"terminal_id": terminal})


class OursTerminally(Adapter):
    """/mcp/terminally, seed 001's tools on this service: execute_command has no way back to a command that
    outlived its timeout, and there is no waiting tool, so the agent polls read_logs_from_tab."""

    name = "ours: /mcp/terminally"

    async def open(self) -> None:
        self.tabs = []
        self.tab = await self._tab("shell")

    async def _tab(self, name):
        text, _, _ = await self.call("create_tab", {"name": name, "cwd": self.workdir})
        self.tabs.append(json.loads(text)["window_id"])
        return self.tabs[-1]

    async def run(self, command, timeout):
        text, _, _ = await self.call("execute_command", {"window_id": self.tab, "command": command,
                                                         "timeout_ms": int(timeout * 1000), "strip_ansi": True},
                                     timeout)
        data = json.loads(text)
        return Ran(data["output"], data.get("exit_code"), self.tab if data.get("timed_out") else None)

    async def finish(self, ran, timeout):
        raise Unsupported("execute_command has no way back to a command that outlived its timeout")

    async def start(self, command):
        tab = await self._tab("process")
        await self.call("start_process", {"window_id": tab, "command": command})
        return tab

    async def _logs(self, tab) -> str:
        text, _, _ = await self.call("read_logs_from_tab", {"window_id": tab, "lines": 50, "strip_ansi": True})
        return json.loads(text)["content"]

    async def wait_for(self, handle, pattern, timeout):
        return await poll(lambda: self._logs(handle), pattern, timeout)

    async def type(self, handle, text):
        await self.call("start_process", {"window_id": handle, "command": text})

    async def stop(self, handle):
        await self.call("stop_process", {"window_id": handle})

    async def kill(self, handle):
        await self.call("stop_process", {"window_id": handle, "signal": "SIGTERM"})

    async def close(self):
        for tab in getattr(self, "tabs", []):
            await self.session.call_tool("stop_process", {"window_id": tab, "signal": "SIGTERM"})


class DesktopCommander(Adapter):
    """Desktop Commander: start_process runs each command in a new process (no terminal); the exit code comes from
    read_process_output once the process has ended."""

    name = "Desktop Commander 0.2.52"
    COMPLETED = re.compile(r"Process completed with exit code (-?\d+)")

    async def open(self) -> None:
        self.seen: dict[int, str] = {}

    async def _started(self, command, timeout) -> tuple[int, str]:
        text, _, error = await self.call("start_process", {"command": f"cd {self.workdir} && {command}",
                                                           "timeout_ms": int(timeout * 1000)}, timeout)
        found = re.search(r"PID (\d+)", text)
        if error or not found:
            raise RuntimeError(text[:200])
        pid = int(found.group(1))
        self.seen[pid] = text
        return pid, text

    async def _read(self, pid, timeout) -> str:
        text, _, _ = await self.call("read_process_output", {"pid": pid, "timeout_ms": int(timeout * 1000)}, timeout)
        self.seen[pid] += "\n" + text
        return text

    def _ran(self, pid) -> Ran:
        seen = self.seen[pid]
        completed = self.COMPLETED.search(seen)
        if completed:
            return Ran(seen, int(completed.group(1)))
        return Ran(seen, None, pid, "Blocked: true" in seen or "waiting for input" in seen)

    async def run(self, command, timeout):
        pid, _ = await self._started(command, timeout)
        await self._read(pid, 1.0)  # start_process never says how it ended; this does
        return self._ran(pid)

    async def finish(self, ran, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            await self._read(ran.handle, min(5.0, timeout))
            if self._ran(ran.handle).exit_code is not None:
                break
        return self._ran(ran.handle)

    async def start(self, command):
        pid, _ = await self._started(command, 1.0)
        return pid

    async def wait_for(self, handle, pattern, timeout):
        if re.search(pattern, self.seen[handle]):
            return self.seen[handle]

        async def seen():
            await self._read(handle, 1.0)
            return self.seen[handle]

        return await poll(seen, pattern, timeout)

    async def type(self, handle, text):
        pid = handle
        answer, _, _ = await self.call("interact_with_process", {"pid": pid, "input": text, "timeout_ms": 2000}, 2.0)
        self.seen[pid] += "\n" + answer

    async def stop(self, handle):
        await self.call("force_terminate", {"pid": handle})

    async def kill(self, handle):
        await self.call("kill_process", {"pid": handle})


class ShellServer(Adapter):
    """mako10k's mcp-shell-server: shell_execute (adaptive: foreground, then background with an execution_id) for
    commands; terminal_operate for programs one types into."""

    name = "mcp-shell-server 2.7.1"

    async def open(self) -> None:
        self.terminals = []
        self.output: dict[str, str] = {}

    def _ran(self, data: dict) -> Ran:
        output = (data.get("stdout") or "") + (data.get("stderr") or "")
        if data.get("status") == "completed":
            return Ran(output, data.get("exit_code"), None)
        return Ran(output, None, data)

    async def run(self, command, timeout):
        text, _, error = await self.call("shell_execute", {
            "command": command, "working_directory": self.workdir, "execution_mode": "adaptive",
            "foreground_timeout_seconds": max(1, round(timeout)), "timeout_seconds": 300}, timeout)
        if error:
            raise RuntimeError(text[:300])
        data = json.loads(text)
        ran = self._ran(data)
        if ran.exit_code is not None and data.get("output_truncated"):
            ran.output = await self._whole_output(data["output_id"])
        return ran

    async def _whole_output(self, output_id) -> str:
        """The rest of a truncated output, read as the tool suggests: one page (8 KB by default) tells the size;
        then the rest, or for more than 64 KB only its last 8 KB (an agent does not page through megabytes)."""
        text, _, _ = await self.call("read_execution_output", {"output_id": output_id})
        page = json.loads(text)
        total, size = page.get("total_size", 0), page.get("size", 0)
        if total <= size:
            return page.get("content", "")
        if total - size <= 65536:
            text, _, _ = await self.call("read_execution_output", {"output_id": output_id, "offset": size,
                                                                   "size": total - size})
            return page.get("content", "") + json.loads(text).get("content", "")
        text, _, _ = await self.call("read_execution_output", {"output_id": output_id, "offset": total - 8192})
        return json.loads(text).get("content", "")

    async def finish(self, ran, timeout):
        deadline = time.monotonic() + timeout
        data = ran.handle
        while time.monotonic() < deadline:
            text, _, _ = await self.call("process_get_execution", {"execution_id": data["execution_id"]})
            data = json.loads(text)
            if data.get("status") != "running":
                break
            await asyncio.sleep(POLL)
        done = self._ran(data)
        if data.get("status") != "running" and data.get("output_id"):
            done.output = await self._whole_output(data["output_id"])
        if done.exit_code is None and data.get("status") != "running":
            done.handle = None  # ended, but the server did not say how
        return done

    async def _operate(self, arguments: dict) -> dict:
        text, _, _ = await self.call("terminal_operate", {"response_level": "minimal", **arguments})
        return json.loads(text)

    async def start(self, command):
        data = await self._operate({"command": command, "working_directory": self.workdir})
        self.terminals.append(data["terminal_id"])
        self.output[data["terminal_id"]] = data.get("output", "")
        return data["terminal_id"]

    async def wait_for(self, handle, pattern, timeout):
        async def seen():
            data = await self._operate({"terminal_id": handle, "output_lines": 50})
            self.output[handle] += data.get("output", "")
            return self.output[handle]

        if re.search(pattern, self.output[handle]):
            return self.output[handle]
        return await poll(seen, pattern, timeout)

    async def type(self, handle, text):
        data = await self._operate({"terminal_id": handle, "input": text, "force_input": True})
        self.output[handle] += data.get("output", "")

    async def stop(self, handle):
        await self._operate({"terminal_id": handle, "input": "^C", "control_codes": True, "execute": False,
                             "force_input": True})

    async def kill(self, handle):
        await self.call("terminal_close", {"terminal_id": handle})
        self.terminals.remove(handle)

    async def close(self):
        for terminal in getattr(self, "terminals", []):
            await self.session.call_tool("terminal_close", {"terminal_id": terminal})


async def poll(read, pattern: str, timeout: float) -> str:
    """Reads until the text matches pattern, every POLL seconds, for at most timeout."""
    deadline = time.monotonic() + timeout
    while True:
        text = await read()
        if re.search(pattern, text):
            return text
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {pattern!r} after {timeout:g} s")
        await asyncio.sleep(POLL)
