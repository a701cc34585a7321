"""Attaches this terminal to a remote one, like `tmux attach`: raw keys in, live output out, detach key to leave.

Standard input may also be a pipe or a file: what it holds is typed into the remote terminal, and the command
ends when the remote process does. Like `ssh`, it exits with the remote exit code (128 + N for a process killed
by signal N), 0 after a detach, and 255 when it could not attach or lost the connection.
"""

import asyncio
import codecs
import contextlib
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
OWN_FAILURE = 255  # as ssh: attach itself failed (a remote exit code of 255 reads the same)

# Why the server refused to attach, by close code (terminals/live/close_codes.py), and what to do next.
REFUSALS = {
    4400: "the server refused the request as malformed; check the terminal id and --from-byte",
    4401: "the server did not accept the API key (missing, unknown, revoked, or its user disabled); "
          "check --key or TERMINALS_API_KEY",
    4403: "terminal {terminal} is another user's: staff watch it read-only, with --view",
    4404: "no terminal {terminal} is visible to this key (unknown, or another user's); "
          "list yours with GET /api/terminals",
    4409: "terminal {terminal} has ended and its output is no longer held; create a new terminal",
    4429: "you hold as many live connections as the server allows per user; close one, then attach again",
    4503: "no worker answered for terminal {terminal}; the service may be restarting: try again shortly",
}


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
        query = {k: v for k, v in (("mode", "view" if view else ""), ("fromByte", from_byte)) if v not in ("", None)}
        session = AttachSession(websocket_url(url, terminal_id, query), key, detach_byte(detach_key), view,
                                terminal_id)
        try:
            status = asyncio.run(session.run())
        except KeyboardInterrupt:
            raise CommandError(f"interrupted; terminal {terminal_id} keeps running", returncode=130) from None
        if isinstance(status, str):
            raise CommandError(status, returncode=OWN_FAILURE)
        if status:
            sys.exit(status)


def exit_status_code(frame: dict) -> int:
    """The remote end as a shell reports it: the exit code, or 128 + N for a process killed by signal N."""
    if frame.get("exitCode") is not None:
        return int(frame["exitCode"])
    try:
        return 128 + signal.Signals[frame.get("signal")].value
    except KeyError:
        return OWN_FAILURE


class AttachSession:
    """One attachment. run() answers the status to exit with (0 after a detach), or a sentence on failure."""

    def __init__(self, url: str, key: str, detach: int, view: bool, terminal_id: str = "?") -> None:
        self.url, self.key, self.detach, self.view, self.terminal_id = url, key, detach, view, terminal_id
        self.received_since_ack = 0
        self.next_byte: int | None = None  # where attaching again would resume
        self.decoder = codecs.getincrementaldecoder("utf-8")("replace")  # a character may come in two reads

    async def run(self) -> int | str:
        import websockets

        interactive = sys.stdin.isatty()
        saved = termios.tcgetattr(sys.stdin.fileno()) if interactive else None
        try:
            async with websockets.connect(self.url, additional_headers={"X-API-Key": self.key}, max_size=None) as ws:
                if interactive:
                    tty.setraw(sys.stdin.fileno())
                return await self._pump(ws, interactive)
        except websockets.ConnectionClosed as closed:
            return self.closed_reason(closed.rcvd.code if closed.rcvd else None)
        except websockets.InvalidStatus as refused:
            return (f"{self.url} answered HTTP {refused.response.status_code} instead of a WebSocket; "
                    "check that --url is the service")
        except (OSError, websockets.InvalidURI, websockets.InvalidHandshake) as error:
            return f"cannot connect to {self.url} ({error}); check --url and that the service is running"
        finally:
            if saved is not None:
                termios.tcsetattr(sys.stdin.fileno(), termios.TCSADRAIN, saved)
                sys.stdout.write("\r\n")

    def closed_reason(self, code: int | None) -> str:
        """Says why the connection closed before the remote process ended, and what to do."""
        if code in REFUSALS:
            return REFUSALS[code].format(terminal=self.terminal_id)
        resume = f" with --from-byte {self.next_byte}" if self.next_byte is not None else ""
        if code is None:
            what = f"the connection to {self.url} was lost"
        elif code in (1001, 4012):
            what = "the server is going away (shutting down or restarting)"
        else:
            what = f"the server closed the connection (code {code})"
        return f"{what}; terminal {self.terminal_id} may still be running: attach again{resume}"

    async def _pump(self, ws, interactive: bool) -> int | str:
        loop = asyncio.get_running_loop()
        detached = asyncio.Event()
        stop_reading = None
        if not self.view:
            stop_reading = self._read_input(ws, detached, interactive)
            if interactive:
                loop.add_signal_handler(signal.SIGWINCH, lambda: asyncio.ensure_future(self._send_size(ws)))
                await self._send_size(ws)
        receiving = asyncio.ensure_future(self._receive(ws))
        waiting = asyncio.ensure_future(detached.wait())
        done, pending = await asyncio.wait({receiving, waiting}, return_when=asyncio.FIRST_COMPLETED)
        for task in pending:
            task.cancel()
        if stop_reading is not None:
            stop_reading()
        return receiving.result() if receiving in done else 0

    def _read_input(self, ws, detached: asyncio.Event, interactive: bool):
        """Starts typing standard input into the terminal; returns how to stop.

        At the end of a pipe or file nothing more is typed, and the output goes on until the remote process
        ends, as with `ssh`.
        """
        loop = asyncio.get_running_loop()
        fd = sys.stdin.fileno()

        def on_input() -> None:
            data = os.read(fd, 4096)
            if data:
                self._type(ws, data, detached)
                return
            loop.remove_reader(fd)
            if interactive:
                detached.set()  # the local terminal hung up

        try:
            loop.add_reader(fd, on_input)
        except PermissionError:
            # A regular file or /dev/null cannot be watched, but reading one never blocks.
            reading = asyncio.ensure_future(self._read_file(fd, ws, detached))
            return reading.cancel
        return lambda: loop.remove_reader(fd)

    async def _read_file(self, fd: int, ws, detached: asyncio.Event) -> None:
        while not detached.is_set() and (data := os.read(fd, 4096)):
            self._type(ws, data, detached)
            await asyncio.sleep(0)

    def _type(self, ws, data: bytes, detached: asyncio.Event) -> None:
        if self.detach in data:
            data = data.split(bytes([self.detach]), 1)[0]
            detached.set()
        text = self.decoder.decode(data)
        if text:
            asyncio.ensure_future(ws.send(json.dumps({"type": "input", "data": text})))

    async def _send_size(self, ws) -> None:
        # The window's own size first: COLUMNS and LINES, which shutil prefers, are set once by whatever started
        # this (a shell, a test runner) and do not follow a resize.
        try:
            size = os.get_terminal_size(sys.stdout.fileno())
        except (OSError, ValueError):
            size = shutil.get_terminal_size()
        await ws.send(json.dumps({"type": "resize", "cols": size.columns, "rows": size.lines}))

    async def _receive(self, ws) -> int | str:
        import websockets

        async for raw in ws:
            frame = json.loads(raw)
            kind = frame.get("type")
            if kind == "attached":
                self.next_byte = frame.get("fromByte")
            elif kind == "output":
                sys.stdout.write(frame["data"])
                sys.stdout.flush()
                self.next_byte = frame["next"]
                self.received_since_ack += len(frame["data"].encode())
                if self.received_since_ack >= ACK_EVERY:
                    self.received_since_ack = 0
                    await ws.send(json.dumps({"type": "ack", "offset": frame["next"]}))
            elif kind == "gap":
                self.next_byte = frame["to"]
            elif kind == "paused":
                await ws.send(json.dumps({"type": "ack", "offset": frame["offset"]}))
            elif kind == "error":
                sys.stderr.write(f"attach: {frame.get('code')}: {frame.get('message')}\r\n")
            elif kind == "exit":
                with contextlib.suppress(websockets.ConnectionClosed):  # all taken: the server may close now
                    await ws.send(json.dumps({"type": "ack", "offset": frame["offset"]}))
                return exit_status_code(frame)
        return self.closed_reason(ws.close_code)

