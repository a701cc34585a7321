"""The asynchronous twins of Client and Terminal: the same names and arguments, awaited; the same operations
(_core), so they behave alike."""

from __future__ import annotations

import asyncio
import json
from typing import Any, AsyncIterator, Dict, List, Mapping, Optional, Sequence

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from . import _core
from ._stream import MAX_FRAME, StreamState, websocket_url
from ._transport import AsyncTransport, headers
from .results import Chunk, CommandResult, ExitStatus, OutputMatch


class AsyncClient:
    """As Client, with every method awaited (`async with AsyncClient() as c: t = await c.create()`)."""

    def __init__(self, url: Optional[str] = None, key: Optional[str] = None, *, timeout: float = 30.0,
                 retry_rate_limited: float = 0.0) -> None:
        self._transport = AsyncTransport(url, key, timeout, retry_rate_limited)

    @property
    def url(self) -> str:
        return self._transport.url

    async def _run(self, op: _core.Op) -> Any:
        return await self._transport.run(op)

    async def create(self, *, shell: Optional[str] = None, cwd: Optional[str] = None, name: Optional[str] = None,
                     env: Optional[Mapping[str, str]] = None, command: Optional[str] = None,
                     args: Optional[Sequence[str]] = None, cols: Optional[int] = None, rows: Optional[int] = None,
                     pty: Optional[bool] = None, output_byte_limit: Optional[int] = None,
                     session_id: Optional[str] = None, record: Optional[bool] = None) -> "AsyncTerminal":
        body = {"shell": shell, "cwd": cwd, "name": name, "env": dict(env) if env is not None else None,
                "command": command, "args": list(args) if args is not None else None, "cols": cols, "rows": rows,
                "pty": pty, "outputByteLimit": output_byte_limit, "sessionId": session_id, "record": record}
        return AsyncTerminal(self, await self._run(_core.create(body)))

    async def terminals(self, status: str = "active", session_id: Optional[str] = None) -> List["AsyncTerminal"]:
        return [AsyncTerminal(self, info) for info in await self._run(_core.list_terminals(status, session_id))]

    async def terminal(self, terminal_id: str) -> "AsyncTerminal":
        return AsyncTerminal(self, await self._run(_core.get(terminal_id)))

    async def health(self) -> Dict[str, Any]:
        result: Dict[str, Any] = await self._run(_core.health())
        return result

    async def close(self) -> None:
        await self._transport.close()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class AsyncTerminal:
    """As Terminal, awaited."""

    def __init__(self, client: AsyncClient, info: Dict[str, Any]) -> None:
        self.client = client
        self.id: str = str(info.get("terminalId") or info.get("id"))
        self.info = info

    def __repr__(self) -> str:
        return f"AsyncTerminal({self.id!r}, name={self.info.get('name')!r}, status={self.info.get('status')!r})"

    async def _run(self, op: _core.Op) -> Any:
        return await self.client._run(op)

    async def refresh(self) -> Dict[str, Any]:
        self.info = await self._run(_core.get(self.id))
        return self.info

    async def run(self, command: str, timeout: float = 600.0) -> CommandResult:
        result: CommandResult = await self._run(_core.run(self.id, command, timeout))
        return result

    async def wait_command(self, command_id: str, timeout: float = 600.0) -> CommandResult:
        result: CommandResult = await self._run(_core.wait_command(self.id, command_id, timeout))
        return result

    async def command(self, command_id: str) -> CommandResult:
        return CommandResult.from_data(await self._run(_core.simple("command", self.id, command_id=command_id)))

    async def commands(self) -> List[Dict[str, Any]]:
        return list((await self._run(_core.simple("commands", self.id)))["commands"])

    async def send(self, text: str, *, newline: bool = True, eof: bool = False) -> Dict[str, Any]:
        result: Dict[str, Any] = await self._run(_core.send(self.id, text, newline and not eof, eof))
        return result

    async def wait_for(self, pattern: str, timeout: float = 30.0, from_byte: Optional[int] = None) -> OutputMatch:
        match: OutputMatch = await self._run(_core.wait_for(self.id, pattern, timeout, from_byte))
        return match

    async def signal(self, signal: str = "SIGINT") -> Dict[str, Any]:
        result: Dict[str, Any] = await self._run(_core.simple("signal", self.id, body={"signal": signal}))
        return result

    async def resize(self, cols: int, rows: int) -> Dict[str, Any]:
        result: Dict[str, Any] = await self._run(_core.simple("resize", self.id, body={"cols": cols, "rows": rows}))
        return result

    async def wait(self, timeout: float = 60.0) -> ExitStatus:
        status: ExitStatus = await self._run(_core.wait_exit(self.id, timeout))
        return status

    async def read(self, from_byte: int = 0, max_bytes: Optional[int] = None) -> Chunk:
        chunk: Chunk = await self._run(_core.read(self.id, from_byte, max_bytes))
        return chunk

    async def screen(self) -> Dict[str, Any]:
        result: Dict[str, Any] = await self._run(_core.simple("screen", self.id))
        return result

    async def stats(self) -> Dict[str, Any]:
        result: Dict[str, Any] = await self._run(_core.simple("stats", self.id))
        return result

    async def recording(self) -> str:
        text: str = await self._run(_core.simple("recording", self.id, raw=True))
        return text

    async def kill(self, signal: Optional[str] = None) -> Dict[str, Any]:
        self.info = await self._run(_core.simple("kill", self.id, body={"signal": signal} if signal else {}))
        return self.info

    async def close(self, *, force: bool = False) -> Dict[str, Any]:
        self.info = await self._run(_core.simple("close", self.id, body={"force": True} if force else None))
        return self.info

    def stream(self, from_byte: Optional[int] = None, *, reconnect_timeout: float = 60.0) -> "AsyncStream":
        """`async for chunk in t.stream(): ...`, reconnecting by byte offset as Terminal.stream does."""
        return AsyncStream(self, from_byte, reconnect_timeout)


class AsyncStream:
    """As Stream, iterated with `async for`."""

    def __init__(self, terminal: AsyncTerminal, from_byte: Optional[int], reconnect_timeout: float) -> None:
        self.terminal = terminal
        self.state = StreamState(terminal.id, from_byte, reconnect_timeout)
        self._connection: Optional[ClientConnection] = None

    @property
    def position(self) -> Optional[int]:
        return self.state.position

    @property
    def exit_status(self) -> Optional[ExitStatus]:
        return self.state.exit_status

    async def __aiter__(self) -> AsyncIterator[str]:
        transport = self.terminal.client._transport
        while True:
            url = websocket_url(transport.url, self.terminal.id, self.state.position, view=False)
            try:
                connection = await connect(url, additional_headers=headers(transport.key), max_size=MAX_FRAME,
                                           open_timeout=transport.timeout)
            except Exception:  # refused handshake, connection refused, timeout: a drop like any other
                await asyncio.sleep(self.state.failed())
                continue
            self._connection = connection
            code: Optional[int] = None
            async with connection:
                try:
                    while not self.state.done:
                        text, replies = self.state.frame(await connection.recv())
                        for reply in replies:
                            await connection.send(reply)
                        if text:
                            yield text
                    code = 1000
                except ConnectionClosed as closed:
                    code = closed.rcvd.code if closed.rcvd is not None else None
                except OSError:
                    code = None
            delay = self.state.closed(code)
            if delay is None:
                return
            await asyncio.sleep(delay)

    async def send_frame(self, frame: Dict[str, Any]) -> None:
        connection = self._connection
        if connection is not None:
            try:
                await connection.send(json.dumps(frame))
            except (ConnectionClosed, OSError, RuntimeError):
                pass
