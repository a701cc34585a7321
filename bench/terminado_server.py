"""The peer: Jupyter's terminado served by its own tornado app on 127.0.0.1 (`python -m bench.terminado_server`)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from contextlib import asynccontextmanager


def make_app():
    """Routes: /unique (a new terminal for each WebSocket, UniqueTermManager), /named/<name> (terminals shared by
    name, NamedTermManager), POST /new (a named terminal with no client yet; answers its name)."""
    import tornado.web
    from terminado import NamedTermManager, TermSocket, UniqueTermManager

    unique = UniqueTermManager(shell_command=["bash"])
    named = NamedTermManager(shell_command=["bash"])

    class NewTerminal(tornado.web.RequestHandler):
        def post(self) -> None:
            name, _ = named.new_named_terminal()
            self.write(json.dumps({"name": name}))

    class Health(tornado.web.RequestHandler):
        def get(self) -> None:
            self.write("ok")

    application = tornado.web.Application(
        [
            (r"/unique", TermSocket, {"term_manager": unique}),
            (r"/named/(\w+)", TermSocket, {"term_manager": named}),
            (r"/new", NewTerminal),
            (r"/health", Health),
        ]
    )
    return application, (unique, named)


async def serve() -> None:
    import tornado.httpserver
    import tornado.netutil

    application, managers = make_app()
    sockets = tornado.netutil.bind_sockets(0, "127.0.0.1")
    server = tornado.httpserver.HTTPServer(application)
    server.add_sockets(sockets)
    print(f"Listening on http://127.0.0.1:{sockets[0].getsockname()[1]}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    await stop.wait()
    server.stop()
    for manager in managers:
        await manager.shutdown()


class TerminadoPeer:
    """The terminado server as a child process of the benchmark."""

    def __init__(self) -> None:
        from tests import servers

        from .service import SHELL_HOME

        env = {**os.environ, "HOME": SHELL_HOME, "PYTHONUNBUFFERED": "1"}
        self.process = servers.ServiceProcess("terminado", [sys.executable, "-m", "bench.terminado_server"], env)
        log = self.process.wait_for_log("Listening on http://")
        self.url = log.split("Listening on ", 1)[1].split()[0]
        self.ws_base = self.url.replace("http://", "ws://", 1)

    @property
    def pid(self) -> int:
        return self.process.pid

    def unique_url(self) -> str:
        return f"{self.ws_base}/unique"

    def named_url(self, name: str) -> str:
        return f"{self.ws_base}/named/{name}"

    async def new_terminal(self, http) -> str:
        """Creates a named terminal through POST /new with an aiohttp session; returns its name."""
        async with http.post(f"{self.url}/new") as response:
            response.raise_for_status()
            return json.loads(await response.text())["name"]

    def stop(self) -> None:
        self.process.stop()
        self.process.log_path.unlink(missing_ok=True)


@asynccontextmanager
async def running():
    peer = await asyncio.to_thread(TerminadoPeer)
    try:
        yield peer
    finally:
        await asyncio.to_thread(peer.stop)


if __name__ == "__main__":
    asyncio.run(serve())
