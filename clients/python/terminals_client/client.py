"""The synchronous client: `Client` finds and creates terminals, `Terminal` acts on one, by its id."""

from __future__ import annotations

import json
import time
from typing import Any, Dict, Generator, Iterator, List, Mapping, Optional, Sequence

from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from . import _core
from ._stream import MAX_FRAME, StreamState, websocket_url
from ._transport import SyncTransport, headers
from .results import Chunk, CommandResult, ExitStatus, OutputMatch


class Client:
    """A connection to the service. `url` and `key` default to TERMINALS_URL and TERMINALS_API_KEY.

    `timeout` bounds each request that does not wait (seconds); `retry_rate_limited` is how many seconds in all a
    request may spend waiting out RATE_LIMITED refusals, as their Retry-After says (0, the default: raise
    RateLimited at once)."""

    def __init__(self, url: Optional[str] = None, key: Optional[str] = None, *, timeout: float = 30.0,
                 retry_rate_limited: float = 0.0) -> None:
        self._transport = SyncTransport(url, key, timeout, retry_rate_limited)

    @property
    def url(self) -> str:
        return self._transport.url

    def _run(self, op: _core.Op) -> Any:
        return self._transport.run(op)

    def create(self, *, shell: Optional[str] = None, cwd: Optional[str] = None, name: Optional[str] = None,
               env: Optional[Mapping[str, str]] = None, command: Optional[str] = None,
               args: Optional[Sequence[str]] = None, cols: Optional[int] = None, rows: Optional[int] = None,
               pty: Optional[bool] = None, output_byte_limit: Optional[int] = None,
               session_id: Optional[str] = None, record: Optional[bool] = None) -> "Terminal":
        """A new terminal: a shell, or with `command` (and `args`) a program run without one; `pty=False` runs
        the program on pipes, so standard input can be closed (`send(..., eof=True)`)."""
        body = {"shell": shell, "cwd": cwd, "name": name, "env": dict(env) if env is not None else None,
                "command": command, "args": list(args) if args is not None else None, "cols": cols, "rows": rows,
                "pty": pty, "outputByteLimit": output_byte_limit, "sessionId": session_id, "record": record}
        return Terminal(self, self._run(_core.create(body)))

    def terminals(self, status: str = "active", session_id: Optional[str] = None) -> List["Terminal"]:
        """This key's terminals (staff: everyone's), oldest first; `status` "all" includes ended ones."""
        return [Terminal(self, info) for info in self._run(_core.list_terminals(status, session_id))]

    def terminal(self, terminal_id: str) -> "Terminal":
        """The terminal with this id, ended or not; NotFound when it is unknown or another user's."""
        return Terminal(self, self._run(_core.get(terminal_id)))

    def health(self) -> Dict[str, Any]:
        result: Dict[str, Any] = self._run(_core.health())
        return result

    def close(self) -> None:
        """Closes the HTTP connections (the terminals go on)."""
        self._transport.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Terminal:
    """One terminal, addressed by its id (never by a pid, which the system reuses)."""

    def __init__(self, client: Client, info: Dict[str, Any]) -> None:
        self.client = client
        self.id: str = str(info.get("terminalId") or info.get("id"))
        self.info = info

    def __repr__(self) -> str:
        return f"Terminal({self.id!r}, name={self.info.get('name')!r}, status={self.info.get('status')!r})"

    def _run(self, op: _core.Op) -> Any:
        return self.client._run(op)

    def refresh(self) -> Dict[str, Any]:
        """The terminal's record now (status, exit code, what it is doing)."""
        self.info = self._run(_core.get(self.id))
        return self.info

    def run(self, command: str, timeout: float = 600.0) -> CommandResult:
        """Runs a command line in this shell terminal: its own output and exact exit code. Never raises for a
        non-zero exit (see CommandResult.check()); raises Timeout when it still runs after `timeout` seconds."""
        result: CommandResult = self._run(_core.run(self.id, command, timeout))
        return result

    def wait_command(self, command_id: str, timeout: float = 600.0) -> CommandResult:
        """Waits again for a command that was still running (it timed out, or stopped for input)."""
        result: CommandResult = self._run(_core.wait_command(self.id, command_id, timeout))
        return result

    def command(self, command_id: str) -> CommandResult:
        """A command of this terminal as it is now, with its output so far."""
        return CommandResult.from_data(self._run(_core.simple("command", self.id, command_id=command_id)))

    def commands(self) -> List[Dict[str, Any]]:
        """The terminal's command history (its last 1000 commands), oldest first."""
        return list(self._run(_core.simple("commands", self.id))["commands"])

    def send(self, text: str, *, newline: bool = True, eof: bool = False) -> Dict[str, Any]:
        """Types text. The API's newline rule adds Enter unless `newline=False`; `eof=True` then closes the
        program's standard input (terminals created with pty=False)."""
        result: Dict[str, Any] = self._run(_core.send(self.id, text, newline and not eof, eof))
        return result

    def wait_for(self, pattern: str, timeout: float = 30.0, from_byte: Optional[int] = None) -> OutputMatch:
        """Waits until the output (escape sequences stripped) matches the regular expression `pattern`."""
        match: OutputMatch = self._run(_core.wait_for(self.id, pattern, timeout, from_byte))
        return match

    def signal(self, signal: str = "SIGINT") -> Dict[str, Any]:
        """Signals the foreground process group, as the keyboard does (SIGINT is Ctrl-C)."""
        result: Dict[str, Any] = self._run(_core.simple("signal", self.id, body={"signal": signal}))
        return result

    def resize(self, cols: int, rows: int) -> Dict[str, Any]:
        result: Dict[str, Any] = self._run(_core.simple("resize", self.id, body={"cols": cols, "rows": rows}))
        return result

    def wait(self, timeout: float = 60.0) -> ExitStatus:
        """Waits for the terminal's program (or shell) to exit; Timeout after `timeout` seconds."""
        status: ExitStatus = self._run(_core.wait_exit(self.id, timeout))
        return status

    def read(self, from_byte: int = 0, max_bytes: Optional[int] = None) -> Chunk:
        """Output by byte offset, whole characters only; pass `chunk.next` as the next read's `from_byte`."""
        chunk: Chunk = self._run(_core.read(self.id, from_byte, max_bytes))
        return chunk

    def screen(self) -> Dict[str, Any]:
        """What a terminal window of its size shows now (lines, cursor, title)."""
        result: Dict[str, Any] = self._run(_core.simple("screen", self.id))
        return result

    def stats(self) -> Dict[str, Any]:
        result: Dict[str, Any] = self._run(_core.simple("stats", self.id))
        return result

    def recording(self) -> str:
        """The asciicast v2 recording of a recorded terminal."""
        text: str = self._run(_core.simple("recording", self.id, raw=True))
        return text

    def kill(self, signal: Optional[str] = None) -> Dict[str, Any]:
        """Ends every process of the terminal but keeps its output readable (until close())."""
        self.info = self._run(_core.simple("kill", self.id, body={"signal": signal} if signal else {}))
        return self.info

    def close(self, *, force: bool = False) -> Dict[str, Any]:
        """Ends the terminal and everything it started, and frees its output."""
        self.info = self._run(_core.simple("close", self.id, body={"force": True} if force else None))
        return self.info

    def stream(self, from_byte: Optional[int] = None, *, reconnect_timeout: float = 60.0) -> "Stream":
        """Live output, as text chunks, from `from_byte` (default: the oldest byte held) until the process ends.
        A dropped connection is reconnected from the next byte, so nothing is lost or repeated."""
        return Stream(self, from_byte, reconnect_timeout)


class Stream:
    """An iterator of output chunks over the WebSocket. `position` is the next byte; `exit_status` is set once
    the process ended; `gaps` lists output evicted before it could be read, as (from, to) byte offsets."""

    def __init__(self, terminal: Terminal, from_byte: Optional[int], reconnect_timeout: float) -> None:
        self.terminal = terminal
        self.state = StreamState(terminal.id, from_byte, reconnect_timeout)
        self._connection: Optional[ClientConnection] = None
        self._stopped = False

    @property
    def position(self) -> Optional[int]:
        return self.state.position

    @property
    def exit_status(self) -> Optional[ExitStatus]:
        return self.state.exit_status

    def __iter__(self) -> Iterator[str]:
        transport = self.terminal.client._transport
        while True:
            url = websocket_url(transport.url, self.terminal.id, self.state.position, view=False)
            try:
                self._connection = connect(url, additional_headers=headers(transport.key), max_size=MAX_FRAME,
                                           open_timeout=transport.timeout)
            except Exception:  # refused handshake, connection refused, timeout: a drop like any other
                time.sleep(self.state.failed())
                continue
            code = yield from self._read(self._connection)
            if self._stopped:
                return
            delay = self.state.closed(code)
            if delay is None:
                return
            time.sleep(delay)

    def _read(self, connection: ClientConnection) -> Generator[str, None, Optional[int]]:
        """Yields the text of one connection; its close code once it closes (None: it was dropped)."""
        with connection:
            try:
                while True:
                    text, replies = self.state.frame(connection.recv())
                    for reply in replies:
                        connection.send(reply)
                    if text:
                        yield text
                    if self.state.done:
                        return 1000
            except ConnectionClosed as closed:
                return closed.rcvd.code if closed.rcvd is not None else None
            except OSError:
                return None

    def send_frame(self, frame: Dict[str, Any]) -> None:
        """Sends a frame over the open connection: {"type": "input", "data": ...} types exactly the data given,
        {"type": "resize", "cols": ..., "rows": ...} resizes (docs/live.md). Dropped while reconnecting."""
        connection = self._connection
        if connection is not None:
            try:
                connection.send(json.dumps(frame))
            except (ConnectionClosed, OSError, RuntimeError):
                pass

    def close(self) -> None:
        """Ends the stream from another thread (the iteration then stops); the terminal goes on."""
        self._stopped = True
        if self._connection is not None:
            self._connection.close()

