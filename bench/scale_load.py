"""The load of figure 11: terminals, watchers that account for every byte, typists, pollers and a creator.

A watcher checks the live protocol's promise byte by byte: every byte a terminal printed reaches it as `output` or is
announced by a `gap` frame, in order; a byte skipped without a `gap` is a silent loss, counted apart."""

from __future__ import annotations

import asyncio
import json
import random
import time
from dataclasses import dataclass, field

import websockets

from . import live
from .common import log

ACK_EVERY = live.ACK_EVERY
# 1,000 x's and a newline about 40 times a second, from bash alone (no process forked per line): Coder's 40 KB/s.
PRINT = "printf -v s '%*s' 1000 ''; s=${s// /x}; while :; do echo \"$s\"; read -t 0.025 -r _; done"
PRINTED_LINE = 1002  # 1,000 x's, \r\n


@dataclass
class Counts:
    received: int = 0  # bytes that came as output
    gap_bytes: int = 0  # bytes announced missing by gap frames
    gap_frames: int = 0
    silent: int = 0  # bytes skipped with no gap frame: the loss the protocol promises never happens
    repeated: int = 0  # bytes sent twice


@dataclass
class Watcher:
    """Our WebSocket client on a printing terminal: receives, acknowledges, accounts for every byte."""

    ws: object
    terminal: str
    next: int
    counts: Counts = field(default_factory=Counts)
    cut: int | None = None  # account up to this byte, then stop the step's book (see mark)
    at_cut: Counts | None = None
    reached: asyncio.Event = field(default_factory=asyncio.Event)
    closed: tuple[int | None, float] | None = None  # (close code, monotonic time) once the server closed it
    acked: int = 0

    @classmethod
    async def open(cls, endpoint, terminal: str, **query) -> Watcher:
        socket = await live.OurSocket.open(endpoint, terminal, **query)
        return cls(socket.ws, terminal, socket.attached["fromByte"], acked=socket.attached["fromByte"])

    async def run(self) -> None:
        """Receives until the connection ends, noting the close code and when."""
        try:
            async for message in self.ws:
                await self._frame(json.loads(message))
        except websockets.ConnectionClosed:
            pass
        finally:
            close = self.ws.close_code if self.ws.close_code is not None else None
            self.closed = (close, time.monotonic())
            self.reached.set()

    async def _frame(self, frame: dict) -> None:
        kind = frame.get("type")
        if kind == "output":
            self._account(frame["offset"], frame["next"], gap=False)
            if self.next - self.acked >= ACK_EVERY:
                await self._ack()
        elif kind == "gap":
            self._account(frame["from"], frame["to"], gap=True)
        elif kind == "paused":
            await self._ack()

    def _account(self, start: int, end: int, gap: bool) -> None:
        counts = self.counts
        if start > self.next:
            counts.silent += start - self.next
        elif start < self.next:
            counts.repeated += min(end, self.next) - start
        fresh = end - max(start, self.next)
        if fresh > 0:
            if gap:
                counts.gap_bytes += fresh
                counts.gap_frames += 1
            else:
                counts.received += fresh
        self.next = max(self.next, end)
        if self.cut is not None and self.at_cut is None and self.next >= self.cut:
            beyond = min(self.next - self.cut, max(fresh, 0))  # the part of this frame past the cut
            self.at_cut = Counts(**vars(counts))
            if gap:
                self.at_cut.gap_bytes -= beyond
            else:
                self.at_cut.received -= beyond
            self.reached.set()

    def mark(self, cut: int) -> None:
        """Book the counts as they stand when the stream reaches byte cut (the terminal's total at a step's end)."""
        self.cut, self.at_cut = cut, None
        self.reached.clear()
        if self.next >= cut:  # already past it (the total was read a moment ago): the book closes here instead
            self.cut, self.at_cut = self.next, Counts(**vars(self.counts))
            self.reached.set()

    async def _ack(self) -> None:
        self.acked = self.next
        try:
            await self.ws.send(json.dumps({"type": "ack", "offset": self.next}))
        except websockets.ConnectionClosed:
            pass

    async def close(self) -> None:
        await self.ws.close()


@dataclass
class Typist:
    """Our WebSocket client typing into `cat`, a key at a time, timing each echo."""

    socket: live.OurSocket
    terminal: str
    closed: tuple[int | None, float] | None = None
    stop_at: float = 0.0  # the monotonic time to stop typing at (may be moved while typing)

    async def type_until(self, until: float, pause: float) -> list[tuple[float, float]]:
        """(when, seconds) of each key's echo until the monotonic time until (or stop_at, if moved meanwhile);
        stops when the server closes the connection, noting its code."""
        samples, self.stop_at = [], until
        try:
            while time.monotonic() < self.stop_at:
                started = time.perf_counter()
                await self.socket.send("x")
                await live.read_until(self.socket, lambda seen: "x" in seen, timeout=max(1.0, self.stop_at - time.monotonic()))
                samples.append((time.monotonic(), time.perf_counter() - started))
                if len(samples) % 2000 == 0:
                    await self.socket.send("\r")  # a line of the line discipline holds at most 4095 characters
                await asyncio.sleep(pause)
        except websockets.ConnectionClosed as closed:
            self.closed = (closed.rcvd.code if closed.rcvd else None, time.monotonic())
        except RuntimeError:  # an error frame: the close follows it
            await self.socket.ws.wait_closed()
            self.closed = (self.socket.ws.close_code, time.monotonic())
        except (TimeoutError, EOFError):
            pass
        return samples


class TerminadoWatcher:
    """A terminado client on a printing terminal: counts the characters it receives (terminado announces nothing
    it drops, so there is nothing to account against)."""

    def __init__(self, socket: live.TerminadoSocket) -> None:
        self.socket = socket
        self.received = 0

    async def run(self) -> None:
        try:
            while True:
                self.received += len(await self.socket.receive())
        except (websockets.ConnectionClosed, EOFError):
            pass


async def poll_open_loop(rests: list, terminals: list[str], until: float, period: float, errors: list) -> list[float]:
    """GET output?mode=tail&tailLines=50 of a random terminal every period seconds (open loop: each latency runs
    from when the poll was due, so a slow answer delays the next and counts twice, as a real poller's would)."""
    latencies, due = [], time.monotonic() + random.uniform(0, period)
    number = random.randrange(len(rests))
    while due < until and time.monotonic() < until:  # period 0: back to back
        await asyncio.sleep(max(0.0, due - time.monotonic()))
        rest = rests[number % len(rests)]
        number += 1
        try:
            await rest.output(random.choice(terminals), mode="tail", tailLines=50)
            latencies.append(time.monotonic() - due)
        except Exception as error:  # noqa: BLE001 - counted; a real poller goes on
            errors.append(repr(error))
        due += period
    return latencies


async def create_open_loop(rests: list, rate: float, until: float, errors: list, deletes: list) -> list[float]:
    """A creation every 1/rate seconds (open loop) through the web processes in turn; each terminal deleted right
    after, untimed (the deletes are collected in deletes). The creations' latencies."""
    latencies, tasks, number = [], [], 0
    due = time.monotonic()

    async def create(rest) -> None:
        started = time.perf_counter()
        try:
            terminal = await rest.create()
        except Exception as error:  # noqa: BLE001 - counted
            errors.append(repr(error))
            return
        latencies.append(time.perf_counter() - started)
        deletes.append(asyncio.ensure_future(_quiet_delete(rest, terminal)))

    while due < until:
        await asyncio.sleep(max(0.0, due - time.monotonic()))
        tasks.append(asyncio.ensure_future(create(rests[number % len(rests)])))
        number += 1
        due += 1 / rate
    await asyncio.gather(*tasks)
    return latencies


async def _quiet_delete(rest, terminal: str) -> None:
    try:
        await rest.delete(terminal)
    except Exception as error:  # noqa: BLE001 - a delete is clean-up here, not a measurement
        log(f"deleting {terminal} failed: {error!r}")


async def stalled_client(endpoint, terminal: str):
    """A WebSocket client that attaches to a printing terminal and never reads (nor acknowledges) again: its TCP
    window fills, then the server's unacknowledged window; nobody else may notice."""
    return await websockets.connect(
        endpoint.ws_url(terminal, mode="view"),
        additional_headers={"X-API-Key": endpoint.key},
        max_size=None,
        max_queue=1,
        compression=None,
        open_timeout=30,
    )
