"""A terminal flooding output at full speed while a fast and a slow WebSocket client are attached, on an embedded
server and on a split deployment (one web, one worker), each of this module's own.

Measured on this 2-core machine with other test runs going on beside it: `head -c 50000000 /dev/urandom | base64
-w 76` prints 68.4 MB (877,000 lines) and reaches the fast client in 4-10 s, so the full 50 MB is used (the whole
module takes ~30-55 s). Resident memory: the embedded server idles at ~100-110 MB and peaked at 120-190 MB during
these floods; in the split deployment the worker and the web process stayed at ~105-110 MB and redis under 20 MB.
That is what the design promises: the terminal's buffer is bounded (4 MiB / 10,000 lines), each client's
unacknowledged output is bounded (4 MiB window) and a paused client's frames are dropped, not queued. The bound of
400 MB per process leaves room for allocator noise yet fails if the flood (68 MB, times two clients, plus JSON
copies) were held in memory.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from datetime import datetime

import pytest
import websockets

from .client import Api
from .servers import start_embedded, start_split

FLOOD_BYTES = 50_000_000
END = "FLOOD-END"
# The program waits for one line before flooding, so both clients are attached before the first byte.
FLOOD = f"echo ready; read go; head -c {FLOOD_BYTES} /dev/urandom | base64 -w 76; echo {END}"
ACK_EVERY = 256 * 1024
SLOW_SECONDS = 0.05  # the slow client's time per frame
RSS_LIMIT_MB = 400
FLOOD_DEADLINE = 240.0  # only so a broken run cannot hang; speed is measured in bench/
STALL_SECONDS = 20.0  # no frame at all for this long while output is pending is a stall


@pytest.fixture(scope="module", params=["embedded", "split"])
def flood_server(request, django_db_setup):
    """A deployment of this module's own, so the flood disturbs no other test."""
    server = start_embedded() if request.param == "embedded" else start_split(webs=1, workers=1)
    yield server
    server.stop()


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


class RssSampler(threading.Thread):
    """Samples the resident memory of every process of a deployment until stopped; keeps the peaks."""

    def __init__(self, server) -> None:
        super().__init__(daemon=True)
        self.pids = {process.name: process.pid for process in server.processes}
        if server.redis is not None:
            self.pids["redis"] = server.redis.pid
        self.peaks = {name: rss_mb(pid) for name, pid in self.pids.items()}
        self.baseline = dict(self.peaks)
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.05):
            for name, pid in self.pids.items():
                self.peaks[name] = max(self.peaks[name], rss_mb(pid))


class Reader:
    """One attached client that keeps only what the checks need: positions, counts and the tail of the text."""

    def __init__(self, name: str, ws, attached: dict) -> None:
        self.name = name
        self.ws = ws
        self.attached = attached
        self.start = self.next = attached["fromByte"]
        self.received = 0  # output bytes
        self.kinds: dict[str, int] = {}
        self.gaps: list[tuple[int, int]] = []
        self.tail = ""
        self.exit: dict | None = None
        self.close_code: int | None = None
        self.unacked = 0

    @classmethod
    async def open(cls, name: str, base: str, terminal: str, key: str) -> Reader:
        url = f"{base.replace('http://', 'ws://', 1)}/ws/terminals/{terminal}/"
        ws = await websockets.connect(url, additional_headers={"X-API-Key": key}, max_size=None)
        try:
            attached = json.loads(await asyncio.wait_for(ws.recv(), 15))
        except websockets.ConnectionClosed as closed:
            raise AssertionError(f"{name} was refused on attach with close code {closed.rcvd.code}") from None
        assert attached["type"] == "attached", attached
        return cls(name, ws, attached)

    async def ack(self, offset: int) -> None:
        try:
            await self.ws.send(json.dumps({"type": "ack", "offset": offset}))
        except websockets.ConnectionClosed:
            pass  # the server closed after the exit frame; what it sent before is still read

    async def read_to_exit(self, *, slow: bool, deadline: float) -> None:
        """Reads every frame, checking each output or gap starts where the last one ended, until the exit frame."""
        while True:
            left = deadline - time.monotonic()
            assert left > 0, f"{self.name} did not see the exit in time; at byte {self.next}, tail {self.tail[-80:]!r}"
            try:
                raw = await asyncio.wait_for(self.ws.recv(), min(left, STALL_SECONDS))
            except websockets.ConnectionClosed as closed:
                self.close_code = closed.rcvd.code if closed.rcvd else None
                raise AssertionError(f"{self.name}'s connection closed before the exit frame, at byte {self.next}: "
                                     f"{closed!r}") from None
            except TimeoutError:
                raise AssertionError(f"{self.name} stalled: nothing for {STALL_SECONDS:g} s at byte {self.next} "
                                     f"(frames so far {self.kinds}, last gap {self.gaps[-1:]}); "
                                     f"tail {self.tail[-80:]!r}") from None
            frame = json.loads(raw)
            kind = frame["type"]
            self.kinds[kind] = self.kinds.get(kind, 0) + 1
            if kind == "output":
                assert frame["offset"] == self.next, f"{self.name}: output at {frame['offset']}, expected {self.next}"
                size = frame["next"] - frame["offset"]
                assert size == len(frame["data"].encode("utf-8")), f"{self.name}: next does not match the data"
                self.received += size
                self.next = frame["next"]
                self.tail = (self.tail + frame["data"][-200:])[-200:]
                if slow:
                    await asyncio.sleep(SLOW_SECONDS)  # the simulated slow consumer
                    await self.ack(self.next)
                else:
                    self.unacked += size
                    if self.unacked >= ACK_EVERY:
                        self.unacked = 0
                        await self.ack(self.next)
            elif kind == "gap":
                assert frame["from"] == self.next, f"{self.name}: gap from {frame['from']}, expected {self.next}"
                assert frame["to"] > frame["from"]
                self.gaps.append((frame["from"], frame["to"]))
                self.next = frame["to"]
            elif kind == "paused":
                assert frame["offset"] == self.next, f"{self.name}: paused at {frame['offset']}, expected {self.next}"
                await self.ack(frame["offset"])  # caught up with everything sent: resume
            elif kind == "exit":
                self.exit = frame
                await self.ack(frame["offset"])  # the server closes once the end is acknowledged
                try:
                    await asyncio.wait_for(self.ws.recv(), 10)
                except websockets.ConnectionClosed as closed:
                    self.close_code = closed.rcvd.code if closed.rcvd else None
                return
            else:
                raise AssertionError(f"{self.name}: unexpected frame {frame}")


def test_flood_fast_client_gets_every_byte_slow_client_gets_bytes_or_gaps(flood_server, keys):
    """During a 50 MB flood a fast client that acknowledges every 256 KB receives every byte in order (no gap,
    ending with the end marker, as many bytes as the terminal printed); a slow client receives every byte or
    explicit gaps, contiguous to the same end; another terminal still runs a command before the flood is over;
    and the server's memory stays bounded."""
    api = Api(flood_server.url, keys["alice"])
    try:
        other = api.create(shell="/bin/bash")["terminalId"]
        terminal = api.create(command="sh", args=["-c", FLOOD])["terminalId"]
        api.wait_output(terminal, lambda out: "ready" in out)
        sampler = RssSampler(flood_server)
        sampler.start()
        command_result: dict = {}

        def run_command_on_other_terminal(fast: Reader) -> None:
            started = time.monotonic()
            response = api.post(f"/api/terminals/{other}/commands", json={"command": "echo ok", "timeoutMs": 10000},
                                timeout=30)
            command_result.update(status=response.status_code, body=response.json(),
                                  seconds=time.monotonic() - started, flood_at=fast.next)

        async def scenario():
            # Both attach from the oldest byte: the "ready" line, so the whole flood is theirs to receive.
            fast = await Reader.open("A", flood_server.url, terminal, keys["alice"])
            slow = await Reader.open("B", flood_server.url, terminal, keys["alice"])
            started = time.monotonic()
            await asyncio.to_thread(api.send, terminal, "go")
            deadline = started + FLOOD_DEADLINE

            async def command_during_flood():
                while fast.received < 5_000_000 and fast.exit is None and time.monotonic() < deadline:
                    await asyncio.sleep(0.01)  # polls the reader's progress, bounded by the flood deadline
                await asyncio.to_thread(run_command_on_other_terminal, fast)

            await asyncio.gather(fast.read_to_exit(slow=False, deadline=deadline),
                                 slow.read_to_exit(slow=True, deadline=deadline),
                                 command_during_flood())
            return fast, slow, time.monotonic() - started

        try:
            fast, slow, took = asyncio.run(asyncio.wait_for(scenario(), FLOOD_DEADLINE + 30))
        finally:
            sampler.done.set()
            sampler.join()
        stats = api.get(f"/api/terminals/{terminal}/stats").json()["data"]

        # The terminal printed the whole flood and ended.
        assert stats["isActive"] is False and stats["exitStatus"] == {"exitCode": 0, "signal": None}
        assert stats["totalBytes"] > FLOOD_BYTES * 4 // 3
        assert took < FLOOD_DEADLINE, "the readers gave up before the terminal's end"

        # Memory stayed bounded.
        assert all(peak < RSS_LIMIT_MB for peak in sampler.peaks.values()), (sampler.baseline, sampler.peaks)

        # Another terminal kept answering while the flood went on.
        assert command_result["status"] == 200, command_result["body"]
        assert command_result["body"]["data"]["output"].strip() == "ok"
        assert command_result["flood_at"] < stats["totalBytes"], "the command ran only after the flood"

        # B: every byte or an explicit gap, contiguous (checked frame by frame) to the same end.
        assert slow.exit["offset"] == slow.next == stats["totalBytes"]
        assert slow.received + sum(to - start for start, to in slow.gaps) == stats["totalBytes"] - slow.start
        assert slow.tail.endswith(f"\r\n{END}\r\n")
        # It was throttled, not fed without bound: a reader that spent longer asleep than the flood program ran
        # fell behind it, and then the server paused it (or skipped what it could not hold). On a machine so loaded
        # that the flood came slower than the slow reader read, there was nothing to throttle.
        record = api.get(f"/api/terminals/{terminal}").json()["data"]
        flood_seconds = (datetime.fromisoformat(record["ended"].replace("Z", "+00:00"))
                         - datetime.fromisoformat(record["created"].replace("Z", "+00:00"))).total_seconds()
        fell_behind = slow.kinds.get("output", 0) * SLOW_SECONDS > flood_seconds
        assert not fell_behind or slow.kinds.get("paused", 0) >= 1 or slow.gaps, (slow.kinds, flood_seconds)
        assert slow.close_code == 1000

        # A: every byte, in order, no gap, to the end.
        assert fast.attached["fromByte"] == fast.attached["oldestByte"] == 0
        assert fast.gaps == [], (f"the fast client lost {sum(to - start for start, to in fast.gaps)} bytes in "
                                 f"{len(fast.gaps)} gaps {fast.gaps[:5]} after {fast.kinds.get('paused', 0)} pauses")
        assert fast.tail.endswith(f"\r\n{END}\r\n")
        assert fast.received == stats["totalBytes"] - fast.start
        assert fast.exit["offset"] == fast.next == stats["totalBytes"]
        assert fast.exit["exitCode"] == 0 and fast.close_code == 1000
    finally:
        api.cleanup()
