"""WebSocket clients of a terminal, ours and terminado's, behind one small interface: send keys, receive output."""

from __future__ import annotations

import asyncio
import json
import time

import websockets

from .service import Service, ends_with_prompt

ACK_EVERY = 256 * 1024  # the protocol asks for an ack at least every 1 MiB
FRAME_TIMEOUT = 30.0
CLOSE_REASONS = {
    4401: "no valid key",
    4403: "foreign origin",
    4404: "no such terminal",
    4409: "terminal no longer holds output",
    4503: "no worker answered",
}  # terminals/live/close_codes.py


class OurSocket:
    """A client of /ws/terminals/<id>/: output frames in order, acknowledged as the protocol asks."""

    def __init__(self, ws, attached: dict) -> None:
        self.ws = ws
        self.attached = attached
        self.next = self.acked = attached["fromByte"]
        self.gaps = self.pauses = 0
        self.gap_bytes = self.received_bytes = 0

    @classmethod
    async def open(cls, service: Service, terminal_id: str, **query) -> OurSocket:
        ws = await websockets.connect(
            service.ws_url(terminal_id, **query),
            additional_headers={"X-API-Key": service.key},
            max_size=None,
            compression=None,
            open_timeout=30,
        )
        try:
            first = json.loads(await asyncio.wait_for(ws.recv(), FRAME_TIMEOUT))
        except websockets.ConnectionClosed as closed:
            code = closed.rcvd.code if closed.rcvd else None
            raise RuntimeError(f"attach refused: close code {code} ({CLOSE_REASONS.get(code, 'unknown')})") from None
        if first.get("type") != "attached":
            await ws.close()
            raise RuntimeError(f"expected an attached frame, got {first}")
        return cls(ws, first)

    async def send(self, text: str) -> None:
        await self.ws.send(json.dumps({"type": "input", "data": text}))

    async def receive(self) -> str:
        """The text of the next output frame; raises EOFError when the terminal exits."""
        while True:
            frame = json.loads(await self.ws.recv())
            kind = frame.get("type")
            if kind == "output":
                self.received_bytes += frame["next"] - frame["offset"]
                self.next = frame["next"]
                if self.next - self.acked >= ACK_EVERY:
                    await self._ack()
                return frame["data"]
            if kind == "paused":
                self.pauses += 1
                await self._ack()
            elif kind == "gap":
                self.gaps += 1
                self.gap_bytes += frame["to"] - frame["from"]
                self.next = frame["to"]
            elif kind == "exit":
                raise EOFError("the terminal exited")
            elif kind == "error":
                raise RuntimeError(f"server error frame: {frame}")

    async def _ack(self) -> None:
        self.acked = self.next
        await self.ws.send(json.dumps({"type": "ack", "offset": self.next}))

    async def close(self) -> None:
        await self.ws.close()


class TerminadoSocket:
    """A client of terminado's TermSocket: JSON arrays ["stdin", text] out, ["stdout", text] in."""

    def __init__(self, ws) -> None:
        self.ws = ws

    @classmethod
    async def open(cls, url: str) -> TerminadoSocket:
        return cls(await websockets.connect(url, max_size=None, compression=None, open_timeout=30))

    async def send(self, text: str) -> None:
        await self.ws.send(json.dumps(["stdin", text]))

    async def receive(self) -> str:
        while True:
            message = json.loads(await self.ws.recv())
            if message[0] == "stdout":
                return message[1]
            if message[0] == "disconnect":
                raise EOFError("the terminal exited")

    async def close(self) -> None:
        await self.ws.close()


async def read_until(socket, done, timeout: float = FRAME_TIMEOUT, text: str = "") -> str:
    """Receives output, appended to text, until done(text) holds; returns the text."""
    deadline = time.monotonic() + timeout
    while not done(text):
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"output did not arrive within {timeout:g} s; last: {text[-120:]!r}")
        try:
            text += await asyncio.wait_for(socket.receive(), left)
        except TimeoutError:
            continue
    return text


async def count_until(socket, marker: str, timeout: float) -> tuple[int, str]:
    """Receives output until marker appears; returns the characters received and the text after the marker.

    Keeps only a tail in memory."""
    deadline = time.monotonic() + timeout
    received, tail = 0, ""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"{marker!r} did not arrive within {timeout:g} s ({received} characters received)")
        chunk = await asyncio.wait_for(socket.receive(), left)
        received += len(chunk)
        window = tail + chunk
        if marker in window:
            return received, window.split(marker, 1)[1]
        tail = window[-len(marker) :]


async def wait_for_prompt(socket, timeout: float = FRAME_TIMEOUT) -> str:
    return await read_until(socket, ends_with_prompt, timeout)


async def start_cat(socket) -> None:
    """Runs `cat` at the shell's prompt and waits until the terminal's own echo answers keys."""
    await wait_for_prompt(socket)
    await socket.send("cat\r")
    await read_until(socket, lambda seen: "cat\r\n" in seen)
    await asyncio.sleep(0.2)  # the shell hands the terminal to cat
    await socket.send("probe\r")
    # Once as the line discipline's echo, once as what cat printed.
    await read_until(socket, lambda seen: seen.count("probe") >= 2)


async def keystroke_echo(socket, count: int, pause: float = 0.0, until: float | None = None) -> list[float]:
    """Seconds from sending one key to seeing it echoed, for count keys (or until the monotonic time `until`)."""
    latencies = []
    for number in range(count):
        if until is not None and time.monotonic() >= until:
            break
        started = time.perf_counter()
        await socket.send("x")
        await read_until(socket, lambda seen: "x" in seen)
        latencies.append(time.perf_counter() - started)
        if number % 4000 == 3999:
            await socket.send("\r")  # a canonical-mode line holds at most 4095 characters
            await _drain(socket)
        if pause:
            await asyncio.sleep(pause)
    return latencies


async def _drain(socket) -> None:
    """Receives until the terminal has been quiet for 0.2 s."""
    while True:
        try:
            await asyncio.wait_for(socket.receive(), 0.2)
        except TimeoutError:
            return


async def collect_until(socket, marker: str, timeout: float) -> str:
    """Receives output until marker appears; returns all of it (the marker is searched in new text only)."""
    deadline = time.monotonic() + timeout
    chunks, tail = [], ""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"{marker!r} did not arrive within {timeout:g} s")
        chunk = await asyncio.wait_for(socket.receive(), left)
        chunks.append(chunk)
        window = tail + chunk
        if marker in window:
            return "".join(chunks)
        tail = window[-len(marker) :]
