"""Figure 7: many clients polling the tail of busy terminals, then the same while one terminal floods `yes`."""

from __future__ import annotations

import asyncio
import time

from .. import live
from ..common import log, ms, percentile, scaled
from ..results import FigureResult, Target, attempt, column, pick
from ..service import running

TITLE = "7. REST under load"
POLLS_PANEL = "7. GET output?mode=tail&tailLines=50 under load"
ECHO_PANEL = "7. Keystroke echo while another terminal floods `yes`"
FEED = "seq 1 5000; while :; do echo tick $RANDOM; read -t 0.2 -r _; done"  # a line every 0.2 s, no fork
ECHO_TERMINALS = 2
ECHO_PAUSE = 0.02


def sizes() -> tuple[int, float]:
    """(clients, each with its own busy terminal; seconds per polling phase)."""
    return scaled(50, 5), float(scaled(30, 3))


async def measure(modes: list[str]) -> FigureResult:
    result = FigureResult(TITLE)
    clients, seconds = sizes()
    ours = {}
    for mode in modes:
        ours[mode] = await attempt(f"{mode} REST load", _ours, mode, clients, seconds)
    rows = (
        ("calm", "p50", "tail polls p50, ms", Target.note("reported")),
        ("calm", "p99", "tail polls p99, ms", Target.below(50, "< 50 ms (seed 000: answers < 100 ms)")),
        ("calm", "rps", "tail polls per second", Target.note("reported")),
        ("flood", "p50", "tail polls p50 while `yes` floods, ms", Target.note("reported")),
        ("flood", "p99", "tail polls p99 while `yes` floods, ms", Target.below(100, "< 100 ms")),
        ("flood", "rps", "tail polls per second while `yes` floods", Target.note("reported")),
        ("echo", "p50", "echo p50 in other terminals while `yes` floods, ms", Target.note("reported")),
        ("echo", "p99", "echo p99 in other terminals while `yes` floods, ms", Target.below(5, "< 5 ms")),
    )
    for phase, key, label, target in rows:
        result.row(label, values=column(ours, phase, key), target=target)
    result.row("failed polls (all phases)", values=column(ours, "errors"), target=Target.below(1, "none"))
    for mode in modes:
        if isinstance(ours[mode], dict):
            result.add_samples(POLLS_PANEL, f"calm ({mode})", ours[mode]["calm"]["samples"])
            result.add_samples(POLLS_PANEL, f"`yes` flood ({mode})", ours[mode]["flood"]["samples"])
            if isinstance(ours[mode]["echo"], dict):
                result.add_samples(ECHO_PANEL, f"during flood ({mode})", ours[mode]["echo"]["samples"])
    result.notes.append(
        f"{clients} clients, each polling its own terminal back to back for {seconds:g} s; each "
        f"terminal has printed 5,000 lines and prints a line every 0.2 s. Then again with one more "
        f"terminal running `yes`. Then, with `yes` still running and no polling, {ECHO_TERMINALS} "
        "WebSocket clients type into `cat` in their own terminals (a key every "
        f"{ECHO_PAUSE * 1000:g} ms) for {seconds / 2:g} s."
    )
    return result


async def busy_terminals(rest, count: int) -> list[str]:
    """count shell terminals, each running FEED (5,000 lines, then a line every 0.2 s)."""
    busy = [await rest.create() for _ in range(count)]
    for terminal in busy:
        await rest.wait_for_prompt(terminal)
        await rest.type(terminal, FEED + "\r")
    return busy


def summary(seconds: list[float], duration: float) -> dict:
    samples = ms(seconds)
    return {
        "p50": percentile(samples, 0.5),
        "p99": percentile(samples, 0.99),
        "rps": len(samples) / duration,
        "samples": samples,
    }


async def _ours(mode: str, clients: int, seconds: float) -> dict:
    async with running(mode) as service, service.rest(connections=clients + 8) as rest:
        busy = await busy_terminals(rest, clients)
        errors = [0]
        calm = await _poll_phase(rest, busy, seconds, errors)
        log(f"{mode}: calm polling p99 {calm['p99']:.1f} ms, {calm['rps']:.0f}/s")
        flood = await rest.create()
        await rest.wait_for_prompt(flood)
        await rest.type(flood, "yes\r")
        await asyncio.sleep(0.5)
        flooded = await _poll_phase(rest, busy, seconds, errors)
        log(f"{mode}: polling during flood p99 {flooded['p99']:.1f} ms, {flooded['rps']:.0f}/s")
        echo = await attempt(f"{mode} echo during flood", _echo_phase, service, rest, seconds / 2)
        log(f"{mode}: echo during flood: {pick(echo, 'p99')} ms p99")
        return {"calm": calm, "flood": flooded, "echo": echo, "errors": errors[0]}


async def _poll_phase(rest, terminals: list[str], seconds: float, errors: list[int]) -> dict:
    until = time.monotonic() + seconds
    started = time.perf_counter()
    results = await asyncio.gather(*(_poll(rest, terminal, until, errors) for terminal in terminals))
    return summary([latency for latencies in results for latency in latencies], time.perf_counter() - started)


async def _poll(rest, terminal: str, until: float, errors: list[int]) -> list[float]:
    latencies = []
    while time.monotonic() < until:
        started = time.perf_counter()
        try:
            await rest.output(terminal, mode="tail", tailLines=50)
        except Exception as error:  # noqa: BLE001 - counted, and the client goes on like a real poller
            errors[0] += 1
            if errors[0] <= 3:
                log(f"poll failed: {error}")
            continue
        latencies.append(time.perf_counter() - started)
    return latencies


async def _echo_phase(service, rest, seconds: float) -> dict:
    terminals = [await rest.create() for _ in range(ECHO_TERMINALS)]
    sockets = [await live.OurSocket.open(service, terminal) for terminal in terminals]
    try:
        for socket in sockets:
            await live.start_cat(socket)
        until = time.monotonic() + seconds
        started = time.perf_counter()
        results = await asyncio.gather(
            *(live.keystroke_echo(socket, 1_000_000, ECHO_PAUSE, until) for socket in sockets)
        )
        return summary([latency for latencies in results for latency in latencies], time.perf_counter() - started)
    finally:
        for socket in sockets:
            await socket.close()
