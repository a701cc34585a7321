"""Figure 10: a tail poll against the framework floor, and open-loop polling (calm, then while `yes` floods).

The floor (bench/floor/) is the smallest Django + DRF view of this stack, served by daphne like the service, with
the same key checked in one indexed query and a body of the same size from memory: the ratio of a tail poll to it
is the part of a poll that is the service's own. The open-loop clients poll at a fixed rate whatever the answers
do, and each latency counts from the time the poll was due, so a slow server cannot hide by slowing its clients.
"""

from __future__ import annotations

import asyncio
import random
import time

import aiohttp

from ..common import log, ms, percentile, scaled
from ..floor import server as floor_server
from ..results import FigureResult, Target, attempt
from ..service import running
from .rest_load import FEED, busy_terminals

TITLE = "10. Polling: the floor and open loop"
FLOOR_PANEL = "10. A tail poll and the framework floor"
OPEN_PANEL = "10. Open-loop tail polls (latency from the due time)"
RATE = 2.0  # polls per second per client


async def measure(modes: list[str]) -> FigureResult:
    result = FigureResult(TITLE)
    clients, seconds, count = scaled(50, 5), float(scaled(30, 4)), scaled(500, 50)
    for mode in modes:
        floor = await attempt(f"{mode} floor", _floor, mode, count, clients, float(scaled(10, 2)))
        for key in ("p50", "p99"):
            ours = floor[f"poll_{key}"] if isinstance(floor, dict) else floor
            reference = floor[f"floor_{key}"] if isinstance(floor, dict) else None
            result.row(f"tail poll {key}, ms ({mode})", values={mode: ours}, reference=reference,
                       reference_name="floor", target=Target.ratio_at_most(1.5, "≤ 1.5× the floor"))
        result.row(f"polls per second, {clients} clients back to back ({mode})",
                   values={mode: floor["poll_rate"] if isinstance(floor, dict) else floor},
                   reference=floor["floor_rate"] if isinstance(floor, dict) else None, reference_name="floor",
                   target=Target.note("context: what the framework serves"))
        if isinstance(floor, dict):
            result.add_samples(FLOOR_PANEL, f"tail poll ({mode})", floor["poll_samples"])
            result.add_samples(FLOOR_PANEL, f"floor ({mode})", floor["floor_samples"])
        opened = await attempt(f"{mode} open loop", _open_loop, mode, clients, seconds)
        for phase, bound in (("calm", 50), ("flood", 100)):
            value = opened[phase]["p99"] if isinstance(opened, dict) else opened
            label = "open-loop p99, ms" if phase == "calm" else "open-loop p99 while `yes` floods, ms"
            result.row(f"{label} ({mode})", values={mode: value}, target=Target.below(bound, f"< {bound} ms"))
            if isinstance(opened, dict):
                result.add_samples(OPEN_PANEL, f"{phase} ({mode})", opened[phase]["samples"])
    result.notes.append(
        f"Floor: {count} `GET .../output?mode=tail&tailLines=50` on a busy terminal and {count} GETs of the floor, "
        "alternating, one client, keep-alive. The floor is `bench/floor/` under daphne with the same settings and "
        "database, the same key (one indexed query) and a body as long as the poll's. Then "
        f"{clients} clients poll back to back, the tail of the one terminal and then the floor, "
        f"{scaled(10, 2)} s each. Open loop: "
        f"{clients} clients, each with its own busy terminal, each polling the tail {RATE:g} times a second at a "
        f"random phase for {seconds:g} s; then again while one more terminal runs `yes`."
    )
    return result


async def _floor(mode: str, count: int, clients: int, seconds: float) -> dict:
    async with running(mode) as service, service.rest() as rest:
        terminal = await rest.create()
        await rest.wait_for_prompt(terminal)
        await rest.type(terminal, FEED + "\r")
        await asyncio.sleep(1.0)
        headers = {"X-API-Key": service.key}
        async with aiohttp.ClientSession(headers=headers) as http:
            async with http.get(f"{service.url}/api/terminals/{terminal}/output",
                                params={"mode": "tail", "tailLines": "50"}) as answer:
                size = len(await answer.read())
            floor = await asyncio.to_thread(floor_server.start, service, size)
            try:
                polls, floors = [], []
                for _ in range(count):
                    polls.append(await _timed_get(http, f"{service.url}/api/terminals/{terminal}/output",
                                                  {"mode": "tail", "tailLines": "50"}))
                    floors.append(await _timed_get(http, f"{floor[1]}/api/terminals/{terminal}/output", None))
                poll_rate = await _rate(http, f"{service.url}/api/terminals/{terminal}/output",
                                        {"mode": "tail", "tailLines": "50"}, clients, seconds)
                floor_rate = await _rate(http, f"{floor[1]}/api/terminals/{terminal}/output", None, clients, seconds)
            finally:
                await asyncio.to_thread(floor_server.stop, floor[0])
    poll_ms, floor_ms = ms(polls), ms(floors)
    log(f"{mode}: tail poll p50 {percentile(poll_ms, 0.5):.2f} ms, floor p50 {percentile(floor_ms, 0.5):.2f} ms "
        f"({size} bytes each); {clients} clients: {poll_rate:.0f} polls/s, floor {floor_rate:.0f}/s")
    return {"poll_p50": percentile(poll_ms, 0.5), "poll_p99": percentile(poll_ms, 0.99),
            "floor_p50": percentile(floor_ms, 0.5), "floor_p99": percentile(floor_ms, 0.99),
            "poll_samples": poll_ms, "floor_samples": floor_ms, "poll_rate": poll_rate, "floor_rate": floor_rate}


async def _rate(http, url: str, params, clients: int, seconds: float) -> float:
    """Answers per second to clients polling url back to back for seconds."""
    until = time.monotonic() + seconds

    async def client() -> int:
        done = 0
        while time.monotonic() < until:
            await _timed_get(http, url, params)
            done += 1
        return done

    started = time.perf_counter()
    answered = await asyncio.gather(*(client() for _ in range(clients)))
    return sum(answered) / (time.perf_counter() - started)


async def _timed_get(http, url: str, params) -> float:
    started = time.perf_counter()
    async with http.get(url, params=params) as answer:
        await answer.read()
        if answer.status != 200:
            raise RuntimeError(f"GET {url}: HTTP {answer.status}")
    return time.perf_counter() - started


async def _open_loop(mode: str, clients: int, seconds: float) -> dict:
    async with running(mode) as service, service.rest(connections=clients + 8) as rest:
        busy = await busy_terminals(rest, clients)
        await asyncio.sleep(1.0)
        calm = await _open_phase(rest, busy, seconds)
        log(f"{mode}: open-loop p99 {calm['p99']:.1f} ms ({calm['late']} polls started late)")
        flood = await rest.create()
        await rest.wait_for_prompt(flood)
        await rest.type(flood, "yes\r")
        await asyncio.sleep(0.5)
        flooded = await _open_phase(rest, busy, seconds)
        log(f"{mode}: open-loop p99 during flood {flooded['p99']:.1f} ms")
        return {"calm": calm, "flood": flooded}


async def _open_phase(rest, terminals: list[str], seconds: float) -> dict:
    start = time.perf_counter() + 0.2
    results = await asyncio.gather(*(_open_client(rest, terminal, start, seconds) for terminal in terminals))
    latencies = [latency for latencies, _ in results for latency in latencies]
    samples = ms(latencies)
    return {"p50": percentile(samples, 0.5), "p99": percentile(samples, 0.99), "samples": samples,
            "late": sum(late for _, late in results)}


async def _open_client(rest, terminal: str, start: float, seconds: float) -> tuple[list[float], int]:
    """Polls at RATE from a random phase; each poll's latency counts from when it was due. A poll still running at
    its next due time delays that one (one connection per client, as a simple poller has), which counts too."""
    due = start + random.random() / RATE
    end = start + seconds
    latencies, late = [], 0
    while due < end:
        wait = due - time.perf_counter()
        if wait > 0:
            await asyncio.sleep(wait)
        else:
            late += 1
        try:
            await rest.output(terminal, mode="tail", tailLines=50)
        except Exception as error:  # noqa: BLE001 - a failed poll counts as the time it took, like a slow one
            log(f"open-loop poll failed: {error}")
        latencies.append(time.perf_counter() - due)
        due += 1 / RATE
    return latencies, late
