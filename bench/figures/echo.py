"""Figure 2: a keystroke's round trip over the WebSocket to `cat` on the PTY and back, against terminado's."""

from __future__ import annotations

import asyncio
import json
import time

import websockets

from .. import live, reference, terminado_server
from ..common import ms, percentile, scaled
from ..floor import server as floor_server
from ..results import FigureResult, Target, attempt, pick
from ..service import SHELL_HOME, running

TITLE = "2. Keystroke echo"
PANEL = "2. Keystroke echo over the WebSocket"
WARM_UP = 20


def keystrokes() -> int:
    return scaled(500, 50, 4000)


async def measure(modes: list[str]) -> FigureResult:
    result = FigureResult(TITLE)
    count = keystrokes()
    peer = await attempt("terminado echo", _terminado, count)
    limit = await attempt("limit echo", _limit, count)
    floor = await attempt("daphne + channels echo floor", _floor, count)
    layer = await attempt("Redis channel layer round trip", _layer_round_trip, count) if "split" in modes else None
    ours = {}
    for mode in modes:
        ours[mode] = await attempt(f"{mode} echo", _ours, mode, count)
    # Recording's cost (docs/recording.md), on the first deployment: the same keys into a recorded terminal.
    recorded = await attempt(f"{modes[0]} echo recorded", _ours, modes[0], count, True)
    for key, label, target in (
        ("p50", "p50, ms", Target.ratio_at_most(1.0, "≤ terminado's (ratio ≤ 1.0)")),
        ("p99", "p99, ms", Target.ratio_at_most(2.0, "≤ 2× terminado's")),
    ):
        result.row(
            label,
            values={mode: pick(ours[mode], key) for mode in modes},
            reference=pick(peer, key),
            reference_name="terminado",
            target=target,
        )
    result.row(
        "p50 against the raw PTY echo, ms",
        values={mode: pick(ours[mode], "p50") for mode in modes},
        reference=pick(limit, "p50"),
        reference_name="limit",
        target=Target.note("context: the floor"),
    )
    for key in ("p50", "p99"):
        result.row(
            f"{key} of daphne + channels alone (an echo consumer, no terminal), ms",
            values={mode: pick(floor, key) for mode in modes},
            reference=pick(peer, key),
            reference_name="terminado",
            target=Target.note("context: the stack's own floor"),
        )
    if layer is not None:
        result.row(
            "p50 of one round trip through the Redis channel layer alone (split's hop), ms",
            values={"split": pick(layer, "p50")},
            reference=pick(peer, "p50"),
            reference_name="terminado",
            target=Target.note("context: split's own floor"),
        )
    for key in ("p50", "p99"):
        result.row(
            f"{key} recorded ({modes[0]}), ms",
            values={modes[0]: pick(recorded, key)},
            reference=pick(ours[modes[0]], key),
            reference_name="not recorded",
            target=Target.ratio_at_most(1.1, "within 10% of not recorded"),
        )
    for series, measured in (
        *((f"ours ({mode})", ours[mode]) for mode in modes),
        ("terminado", peer),
        ("limit", limit),
        ("daphne + channels floor", floor),
    ):
        if isinstance(measured, dict):
            result.add_samples(PANEL, series, measured["samples"])
    result.notes.append(
        f"{count} keys, one at a time, each timed from sending it to receiving its echo from `cat` "
        f'(after {WARM_UP} untimed keys). Ours: `{{"type": "input", "data": "x"}}` frames; '
        'terminado: `["stdin", "x"]`; the limit writes to the PTY master and reads it. The daphne + channels '
        "floor is a channels consumer under daphne (bench/floor/echo.py) that answers each input frame with an "
        "output frame at once, with no terminal, worker or channel layer: the part of a key that is the stack's. "
        "The Redis channel layer's round trip: split mode's layer (channels_redis's, with one receiver per "
        "process: terminals/plumbing/channel_layer.py), with its capacity and expiry, "
        "sending a message to a channel whose reader sends it back, on a redis-server of its own, one at a time; "
        "a key in split mode makes this trip once (to the worker and back) before its echo."
    )
    return result


def summary(seconds: list[float]) -> dict:
    samples = ms(seconds)
    return {"p50": percentile(samples, 0.5), "p99": percentile(samples, 0.99), "samples": samples}


async def _echo(socket, count: int) -> dict:
    await live.start_cat(socket)
    await live.keystroke_echo(socket, WARM_UP)
    return summary(await live.keystroke_echo(socket, count))


async def _ours(mode: str, count: int, record: bool = False) -> dict:
    async with running(mode) as service, service.rest() as rest:
        socket = await live.OurSocket.open(service, await rest.create(record=record))
        try:
            return await _echo(socket, count)
        finally:
            await socket.close()


async def _terminado(count: int) -> dict:
    async with terminado_server.running() as peer:
        socket = await live.TerminadoSocket.open(peer.named_url("echo"))
        try:
            return await _echo(socket, count)
        finally:
            await socket.close()


async def _floor(count: int) -> dict:
    """The same keys against bench/floor's echo consumer (started beside a service, for its settings and database)."""
    async with running("embedded") as service:
        floor = await asyncio.to_thread(floor_server.start, service, 0)
        try:
            ws = await websockets.connect(f"{floor[1].replace('http://', 'ws://', 1)}/ws/terminals/floor/",
                                          max_size=None, compression=None, open_timeout=30)
            socket = live.OurSocket(ws, json.loads(await ws.recv()))
            try:
                await live.keystroke_echo(socket, WARM_UP)
                return summary(await live.keystroke_echo(socket, count))
            finally:
                await socket.close()
        finally:
            await asyncio.to_thread(floor_server.stop, floor[0])


async def _layer_round_trip(count: int) -> dict:
    """One message to a channel and back through Redis with split mode's layer (not the service)."""
    from terminals.plumbing.channel_layer import RedisChannelLayer

    from tests import servers

    redis, url = await asyncio.to_thread(servers.start_redis)
    try:
        ours, echoer = (RedisChannelLayer(hosts=[url], capacity=1000, expiry=30) for _ in range(2))
        back, there = await ours.new_channel(), await echoer.new_channel()

        async def echo() -> None:
            while True:
                await echoer.send(back, await echoer.receive(there))

        task = asyncio.create_task(echo())
        latencies = []
        try:
            for _ in range(count + WARM_UP):
                started = time.perf_counter()
                await ours.send(there, {"type": "input", "data": "x"})
                await asyncio.wait_for(ours.receive(back), live.FRAME_TIMEOUT)
                latencies.append(time.perf_counter() - started)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await ours.flush()
            await ours.close_pools()
            await echoer.close_pools()
        return summary(latencies[WARM_UP:])
    finally:
        await asyncio.to_thread(redis.stop)


async def _limit(count: int) -> dict:
    report = await reference.run("echo", "--count", str(count + WARM_UP), home=SHELL_HOME)
    return summary(report["latencies"][WARM_UP:])
