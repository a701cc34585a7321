"""A worker made of the runtime alone (no Django), run under the keeper by tests/test_keeper.py: it hosts
terminals with a SessionManager that the keeper holds, takes them back when it starts, and answers a test's
questions on a Unix socket, one JSON line each way.

    python tests/keeper_worker.py <control socket path>
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import signal
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from terminals.runtime import adoption  # noqa: E402
from terminals.runtime.keeping import KeeperLink, Keeping, die_with_keeper, rehearse_if_asked  # noqa: E402
from terminals.runtime.manager import SessionManager  # noqa: E402
from terminals.runtime.pty import PtySession, SpawnSpec  # noqa: E402
from terminals.runtime.shell import ShellSession  # noqa: E402

ENV = {"PATH": os.environ["PATH"], "TERM": "xterm-256color", "HOME": os.environ.get("HOME", "/tmp"), "PS1": "$ "}


class Worker:
    def __init__(self, manager: SessionManager) -> None:
        self.manager = manager

    def create(self, request: dict) -> dict:
        kind = ShellSession if request.get("shell") else PtySession
        spec = SpawnSpec(argv=request["argv"], cwd="/tmp", env=ENV)
        session = self.manager.create(request["id"], spec, session_class=kind)
        return {"pid": session.pid}

    def list(self, request: dict) -> dict:
        return {"terminals": {session_id: {"pid": session.pid, "exit": _exit(session)}
                              for session_id, session in self.manager.items()}}

    def read(self, request: dict) -> dict:
        session = self.manager.get(request["id"])
        data, start, _ = session.buffer.read_bytes(0, 1 << 30, complete=True)
        return {"start": start, "end": session.buffer.end,
                "data": base64.b64encode(data).decode(), "exit": _exit(session),
                "lines": session.buffer.total_lines}

    def run(self, request: dict) -> dict:
        return {"commandId": self.manager.get(request["id"]).run_command(request["command"]).id}

    def command(self, request: dict) -> dict:
        record = self.manager.get(request["id"]).commands.get(request["commandId"])
        return {"status": record.status, "exitCode": record.exit_code} if record else {"status": None}

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while line := await reader.readline():
            request = json.loads(line)
            try:
                answer = {"ok": True, **getattr(self, request["op"])(request)}
            except Exception as error:  # noqa: BLE001 - told to the test
                answer = {"ok": False, "error": repr(error)}
            writer.write(json.dumps(answer).encode() + b"\n")
            await writer.drain()
        writer.close()


def _exit(session) -> int | None:
    return None if session.exit_status is None else session.exit_status.returncode


async def main(control: str) -> None:
    manager = SessionManager()
    link = KeeperLink.from_environment()
    failed = []
    if link is not None:
        die_with_keeper()  # a keeper killed (a test's teardown) takes this worker and its terminals along
        manager.keeping = Keeping(link)
        failed = manager.take_back(link.take_back())
        link.watch(manager.reaped)
    loop = asyncio.get_running_loop()
    stopped = loop.create_future()
    loop.add_signal_handler(signal.SIGTERM, lambda: stopped.done() or stopped.set_result("stop"))
    # A file beside the control socket stands for a worker that hangs as it hands over.
    stuck = control + ".stuck"
    loop.add_signal_handler(signal.SIGUSR1, lambda: stopped.done() or os.path.exists(stuck)
                            or stopped.set_result("hand over"))
    if os.path.exists(control):
        os.unlink(control)
    server = await asyncio.start_unix_server(Worker(manager).handle, control)
    print(json.dumps({"ready": os.getpid(), "adopted": len(manager), "failed": [str(f) for f in failed]}), flush=True)
    how = await stopped
    server.close()
    if how == "stop":
        await manager.shutdown()
    else:
        manager.keeping.save_all()  # the terminals stay: the keeper holds them for the next worker


if __name__ == "__main__":
    # A file beside the control socket stands for an upgrade to code that saves and reads another state version.
    if os.path.exists(sys.argv[1] + ".state-version"):
        with open(sys.argv[1] + ".state-version") as version:
            adoption.STATE_VERSION = int(version.read())
    rehearse_if_asked()
    asyncio.run(main(sys.argv[1]))
