"""Figure 1: how fast a terminal takes in a flood of output, against the limit of a minimal asyncio reader."""

from __future__ import annotations

import asyncio
import time

from .. import reference
from ..common import log, median, scale, scaled
from ..results import Failure, FigureResult, Target, attempt, pick
from ..service import SHELL_HOME, Rest, running

TITLE = "1. Output ingest"
POLL_SECONDS = 0.01
TARGET = Target.ratio_at_least(0.85, "≥ 0.85× the limit")
RECORDED_TARGET = Target.ratio_at_least(0.9, "within 10% of not recorded")


def seq_bytes(count: int) -> int:
    """Bytes `seq 1 count` prints on a PTY, where each newline becomes CR LF."""
    total, digits, first = 0, 1, 1
    while first <= count:
        last = min(count, 10**digits - 1)
        total += (last - first + 1) * (digits + 2)
        digits, first = digits + 1, 10**digits
    return total


def workloads() -> list[tuple[str, int]]:
    head_mib = scaled(256, 8)
    lines = scaled(5_000_000, 100_000)
    return [(f"head -c {head_mib}M /dev/zero", head_mib << 20), (f"seq 1 {lines}", seq_bytes(lines))]


def repeats() -> int:
    return 3 if scale() >= 0.5 else 1


async def measure(modes: list[str]) -> FigureResult:
    result = FigureResult(TITLE)
    loads = workloads()
    # Limit runs alternate with the service's, so a neighbour's load on the machine hits both alike.
    limit_rates: dict[str, list[float]] = {command: [] for command, _ in loads}
    ours = {}
    for mode in modes:
        ours[mode] = await attempt(f"{mode} ingest", _ours, mode, loads, limit_rates)
    # Recording's cost (docs/recording.md), on the first deployment: the same terminal work, recorded.
    recorded = await attempt(f"{modes[0]} ingest recorded", _ours, modes[0], loads, limit_rates, True)
    for command, size in loads:
        if not limit_rates[command]:
            await attempt(f"limit ingest of {command}", _limit_rate, command, size, limit_rates[command])
        limit = median(limit_rates[command]) if limit_rates[command] else Failure("no limit run completed")
        result.row(
            f"`{command}` ({size / 1e6:.0f} MB), MB/s",
            values={mode: pick(ours[mode], command) for mode in modes},
            reference=limit,
            reference_name="limit",
            target=TARGET,
        )
    for command, size in loads:
        result.row(
            f"`{command}` recorded ({modes[0]}), MB/s",
            values={modes[0]: pick(recorded, command)},
            reference=pick(ours[modes[0]], command),
            reference_name="not recorded",
            target=RECORDED_TARGET,
        )
    result.notes.append(
        f"Medians of {_runs(repeats())} per deployment, each run of the service right after a run of the limit "
        "(the limit's median is over all of its runs). The limit times from spawning `bash -c COMMAND` on a PTY to "
        "having read every byte; the service times from POST input to `totalBytes` (stats endpoint, polled every "
        f"{POLL_SECONDS * 1000:.0f} ms once 80% of the limit's time has passed) counting all of it."
    )
    return result


async def _limit_rate(command: str, size: int, rates: list[float]) -> float:
    """Runs the limit once; appends its MB/s to rates and returns its seconds."""
    run = await reference.run("ingest", "--command", command, "--bytes", str(size), home=SHELL_HOME)
    if run["bytes"] < size:
        raise RuntimeError(f"the limit read {run['bytes']} of {size} bytes")
    rates.append(size / run["seconds"] / 1e6)
    return run["seconds"]


async def _ours(mode: str, loads: list[tuple[str, int]], limit_rates: dict[str, list[float]],
                record: bool = False) -> dict:
    async with running(mode) as service, service.rest() as rest:
        terminal = await rest.create(record=record)
        await rest.wait_for_prompt(terminal)
        rates = {}
        for command, size in loads:
            runs = []
            for _ in range(repeats()):
                limit = await attempt(f"limit ingest of {command}", _limit_rate, command, size, limit_rates[command])
                floor = 0.8 * limit if isinstance(limit, float) else 0.0
                runs.append(size / await _ingest_once(rest, terminal, command, size, floor) / 1e6)
            rates[command] = median(runs)
            log(f"{mode}{' recorded' if record else ''}: {command}: {rates[command]:.1f} MB/s "
                f"(limit {median(limit_rates[command]):.1f})")
        return rates


async def _ingest_once(rest: Rest, terminal: str, command: str, size: int, floor: float) -> float:
    """Seconds from typing the command until totalBytes has its whole output (and the typed line's echo)."""
    before = (await rest.stats(terminal))["totalBytes"]
    wanted = before + size + len(command) + 2
    started = time.perf_counter()
    await rest.type(terminal, command + "\r")
    # Polling takes the service's time too, so it polls once a second (a reader waiting on the command: a flood
    # nobody reads is read at a bounded rate) and often only when the limit would be nearly done.
    while (left := started + floor - time.perf_counter()) > 0:
        await asyncio.sleep(min(1.0, left))
        await rest.stats(terminal)
    deadline = started + max(120.0, 50 * floor)
    while (await rest.stats(terminal))["totalBytes"] < wanted:
        if time.perf_counter() > deadline:
            raise TimeoutError(f"`{command}` not ingested after {deadline - started:.0f} s")
        await asyncio.sleep(POLL_SECONDS)
    seconds = time.perf_counter() - started
    await rest.wait_for_prompt(terminal, timeout=60)
    return seconds


def _runs(count: int) -> str:
    return "1 run" if count == 1 else f"{count} runs"
