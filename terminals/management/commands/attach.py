"""Attaches this terminal to a remote one, like `tmux attach`: raw keys in, live output out, detach key to leave."""

import asyncio
import json
import os
import shutil
import signal
import sys
import termios
import tty
from urllib.parse import urlencode, urlparse

from django.core.management.base import BaseCommand, CommandError

ACK_EVERY = 256 * 1024  # bytes of output between two acknowledgements


def detach_byte(name: str) -> int:
    """ "ctrl-]" -> 0x1d, "ctrl-a" -> 0x01."""
    key = name.lower().removeprefix("ctrl-").removeprefix("^")
    if len(key) != 1 or not (0x40 <= ord(key.upper()) <= 0x5F):
        raise CommandError(f"--detach-key: {name!r} is not a control key such as ctrl-]")
    return ord(key.upper()) - 0x40


def websocket_url(base: str, terminal_id: str, query: dict) -> str:
    parts = urlparse(base)
    scheme = "wss" if parts.scheme == "https" else "ws"
    suffix = f"?{urlencode(query)}" if query else ""
    return f"{scheme}://{parts.netloc}/ws/terminals/{terminal_id}/{suffix}"


class Command(BaseCommand):
    help = "Attach to a running terminal; the detach key (default ctrl-]) leaves it running."

    def add_arguments(self, parser):
        parser.add_argument("terminal_id")
        parser.add_argument("--url", default=os.getenv("TERMINALS_URL", "http://127.0.0.1:3001"))
        parser.add_argument("--key", default=os.getenv("TERMINALS_API_KEY"), help="API key (or TERMINALS_API_KEY)")
        parser.add_argument("--detach-key", default="ctrl-]")
        parser.add_argument("--view", action="store_true", help="read-only")
        parser.add_argument("--from-byte", type=int, default=None, help="replay from this byte (default: all held)")

    def handle(self, *args, terminal_id, url, key, detach_key, view, from_byte, **options):
        if not key:
            raise CommandError("an API key is needed: --key or TERMINALS_API_KEY")
        if not view and not sys.stdin.isatty():
            raise CommandError("attach types from a terminal: run it in one, or watch with --view")
        query = {k: v for k, v in (("mode", "view" if view else ""), ("fromByte", from_byte)) if v not in ("", None)}
        session = AttachSession(websocket_url(url, terminal_id, query), key, detach_byte(detach_key), view)
        code = asyncio.run(session.run())
        if code:
            raise CommandError(code)


class AttachSession:
    def __init__(self, url: str, key: str, detach: int, view: bool) -> None:
        self.url, self.key, self.detach, self.view = url, key, detach, view
        self.received_since_ack = 0

    async def run(self) -> str | None:
        import websockets

        interactive = sys.stdin.isatty()
        saved = termios.tcgetattr(sys.stdin.fileno()) if interactive else None
        try:
            async with websockets.connect(self.url, additional_headers={"X-API-Key": self.key}, max_size=None) as ws:
                if interactive:
                    tty.setraw(sys.stdin.fileno())
                return await self._pump(ws)
        except websockets.ConnectionClosed as closed:
            return None if closed.rcvd is None or closed.rcvd.code in (1000, 1001) else f"closed: {closed.rcvd.code}"
        except OSError as error:
            return f"cannot connect to {self.url}: {error}"
        finally:
            if saved is not None:
                termios.tcsetattr(sys.stdin.fileno(), termios.TCSADRAIN, saved)
                sys.stdout.write("\r\n")

    async def _pump(self, ws) -> str | None:
        loop = asyncio.get_running_loop()
        detached = asyncio.Event()
        if not self.view:
            loop.add_reader(sys.stdin.fileno(), self._on_keys, ws, detached)
            loop.add_signal_handler(signal.SIGWINCH, lambda: asyncio.ensure_future(self._send_size(ws)))
            await self._send_size(ws)
        receiving = asyncio.ensure_future(self._receive(ws))
        waiting = asyncio.ensure_future(detached.wait())
        done, pending = await asyncio.wait({receiving, waiting}, return_when=asyncio.FIRST_COMPLETED)
        for task in pending:
            task.cancel()
        if not self.view:
            loop.remove_reader(sys.stdin.fileno())
        return receiving.result() if receiving in done else None

    def _on_keys(self, ws, detached: asyncio.Event) -> None:
        keys = os.read(sys.stdin.fileno(), 4096)
        if not keys or self.detach in keys:
            keys = keys.split(bytes([self.detach]), 1)[0]
            detached.set()
        if keys:
            asyncio.ensure_future(ws.send(json.dumps({"type": "input", "data": keys.decode("utf-8", "replace")})))

    async def _send_size(self, ws) -> None:
        size = shutil.get_terminal_size()
        await ws.send(json.dumps({"type": "resize", "cols": size.columns, "rows": size.lines}))

    async def _receive(self, ws) -> str | None:
        async for raw in ws:
            frame = json.loads(raw)
            kind = frame.get("type")
            if kind == "output":
                sys.stdout.write(frame["data"])
                sys.stdout.flush()
                self.received_since_ack += len(frame["data"].encode())
                if self.received_since_ack >= ACK_EVERY:
                    self.received_since_ack = 0
                    await ws.send(json.dumps({"type": "ack", "offset": frame["next"]}))
            elif kind == "paused":
                await ws.send(json.dumps({"type": "ack", "offset": frame["offset"]}))
            elif kind == "exit":
                return None
        return None
