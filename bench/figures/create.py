"""Figure 5: create a terminal through the API and see its first prompt; then 1,000 terminals alive on one worker."""

from __future__ import annotations

import asyncio
import time

from .. import live, reference, terminado_server
from ..common import log, ms, percentile, scaled
from ..floor import server as floor_server
from ..results import FigureResult, Target, attempt, column, pick
from ..service import SHELL_HOME, Rest, open_files_limit, running

TITLE = "5. Create and first prompt"
PANEL = "5. Create a terminal and see its first prompt"
CONCURRENCY = 4  # clients creating (and then commanding) the bulk of terminals at once
TIMED_SECONDS = 30.0  # the one-by-one creations stop early past this


def sizes() -> tuple[int, int]:
    """(terminals timed one by one, terminals alive at once in the end)."""
    return scaled(100, 10), scaled(1000, 20)


async def measure(modes: list[str]) -> FigureResult:
    result = FigureResult(TITLE)
    timed, total = sizes()
    peer = await attempt("terminado first prompt", _terminado, timed)
    limit = await attempt("limit first prompt", _limit, timed)
    floor = await attempt("create floor first prompt", _floor, timed)
    ours = {}
    for mode in modes:
        ours[mode] = await attempt(f"{mode} create", _ours, mode, timed, total)
    result.row(
        "create → first prompt p50, ms",
        values=column(ours, "first", "p50"),
        reference=pick(peer, "p50"),
        reference_name="terminado",
        target=Target.below(10, "< 10 ms"),
    )
    result.row(
        "create → first prompt p99, ms",
        values=column(ours, "first", "p99"),
        reference=pick(peer, "p99"),
        reference_name="terminado",
        target=Target.note("reported"),
    )
    result.row(
        "spawn → first prompt p50 (the limit), ms",
        values=column(ours, "first", "p50"),
        reference=pick(limit, "p50"),
        reference_name="limit",
        target=Target.note("context: the floor"),
    )
    result.row(
        "create → first prompt p50 of the create floor (the same three durable writes, no worker), ms",
        values=column(ours, "first", "p50"),
        reference=pick(floor, "p50"),
        reference_name="floor",
        target=Target.note("context: the stack's own floor"),
    )
    result.row(
        f"creations of the {total} answered with an error",
        values=column(ours, "bulk", "failed"),
        target=Target.below(1, "none"),
    )
    result.row(
        f"terminals alive at once (of {total})",
        values=column(ours, "bulk", "alive"),
        target=Target.at_least(total, f"all {total}"),
    )
    result.row(
        "of them answering `echo` through the commands endpoint",
        values=column(ours, "bulk", "answered"),
        target=Target.at_least(total, f"all {total}"),
    )
    result.row(
        f"command p99 with {total} terminals, ms",
        values=column(ours, "bulk", "command_p99"),
        target=Target.note("reported"),
    )
    result.row(
        f"service RSS with {total} terminals, MB", values=column(ours, "bulk", "rss_mb"), target=Target.note("reported")
    )
    result.row(
        f"creation rate with {CONCURRENCY} clients, terminals/s",
        values=column(ours, "bulk", "rate"),
        target=Target.note("reported"),
    )
    for series, measured in (
        *((f"ours ({mode})", pick(ours[mode], "first")) for mode in modes),
        ("terminado", peer),
        ("limit", limit),
        ("create floor", floor),
    ):
        if isinstance(measured, dict):
            result.add_samples(PANEL, series, measured["samples"])
    limits = ", ".join(f"{mode} {value}" for mode, value in column(ours, "bulk", "nofile").items())
    result.notes.append(
        f"{timed} terminals one at a time (fewer if that takes over {TIMED_SECONDS:g} s): "
        "POST /api/terminals, then a WebSocket attach from byte 0 until the output ends in a prompt, each socket kept "
        "open until the last creation, as terminado's are (terminado: "
        "a WebSocket to a UniqueTermManager route until its prompt; the limit: spawning bash on a PTY until its "
        "prompt). The create floor is bench/floor/create.py under daphne with the service's settings and database: "
        "the key found with one query, the terminal's row written before bash starts on a PTY in the request's "
        "thread, its pid and audit row after, and an attach that writes its audit row and sends the prompt; the "
        "same client, one at a time. Then terminals up to "
        f"{total} by {CONCURRENCY} concurrent clients, and `echo` through the commands endpoint in "
        f"every one. Open-files limit (soft/hard) of the service: {limits}."
    )
    return result


def summary(seconds: list[float]) -> dict:
    samples = ms(seconds)
    return {"p50": percentile(samples, 0.5), "p99": percentile(samples, 0.99), "samples": samples}


async def _limit(count: int) -> dict:
    return summary((await reference.run("prompt", "--count", str(count), home=SHELL_HOME))["latencies"])


async def _terminado(count: int) -> dict:
    async with terminado_server.running() as peer:
        # Sockets stay open until the end: closing one makes terminado end its terminal, and ptyprocess's close
        # sleeps 0.1 s on the event loop, which would land on the next measurement.
        latencies, sockets = [], []
        try:
            for _ in range(count):
                started = time.perf_counter()
                sockets.append(await live.TerminadoSocket.open(peer.unique_url()))
                await live.wait_for_prompt(sockets[-1])
                latencies.append(time.perf_counter() - started)
        finally:
            await asyncio.gather(*(socket.close() for socket in sockets), return_exceptions=True)
        return summary(latencies)


async def _floor(count: int) -> dict:
    """The same creations against bench/floor/create.py (started beside a service, for its settings, database and
    key)."""

    class FloorAttach:
        def __init__(self, url: str, key: str) -> None:
            self.url, self.key = url, key

        def ws_url(self, terminal_id: str, **query) -> str:
            return f"{self.url.replace('http://', 'ws://', 1)}/ws/floor/{terminal_id}/"

    async with running("embedded") as service:
        floor = await asyncio.to_thread(floor_server.start, service, 0)
        try:
            async with Rest(floor[1], service.key, CONCURRENCY * 2) as rest:
                return await _first_prompts(FloorAttach(floor[1], service.key), rest, count, [])
        finally:
            await asyncio.to_thread(floor_server.stop, floor[0])


async def _ours(mode: str, timed: int, total: int) -> dict:
    async with running(mode) as service, service.rest(connections=CONCURRENCY * 2) as rest:
        terminals: list[str] = []
        first = await attempt(f"{mode} create → first prompt", _first_prompts, service, rest, timed, terminals)
        bulk = await attempt(f"{mode} {total} terminals", _bulk, service, rest, total, terminals)
        return {"first": first, "bulk": bulk}


async def _first_prompts(service, rest, count: int, terminals: list[str]) -> dict:
    """Creates terminals one by one, each timed until its first prompt arrives over a WebSocket.

    The sockets stay open until the last creation, as terminado's do: a socket closed at once has the server
    record its client's leaving (the detach, its audit row) while the next creation is timed."""
    latencies, sockets = [], []
    stop_at = time.monotonic() + TIMED_SECONDS
    try:
        for _ in range(count):
            if time.monotonic() > stop_at:
                log(f"{getattr(service, 'mode', 'floor')}: stopped timing creations after {len(latencies)} "
                    f"(over {TIMED_SECONDS:g} s)")
                break
            started = time.perf_counter()
            terminal = await rest.create()
            terminals.append(terminal)
            sockets.append(await live.OurSocket.open(service, terminal, fromByte=0))
            await live.wait_for_prompt(sockets[-1])
            latencies.append(time.perf_counter() - started)
    finally:
        await asyncio.gather(*(socket.close() for socket in sockets), return_exceptions=True)
    return summary(latencies)


async def _bulk(service, rest, total: int, terminals: list[str]) -> dict:
    """Brings the worker to total terminals, then has each answer a command."""
    failures: list[str] = []
    started = time.perf_counter()
    wanted = total - len(terminals)
    created = await _in_parallel(wanted, lambda _: _create(rest, failures))
    terminals += [terminal for terminal in created if terminal is not None]
    measured = {"rate": wanted / (time.perf_counter() - started) if wanted else None, "failed": len(failures)}
    log(
        f"{service.mode}: {len(terminals)} terminals created"
        + (f"; {len(failures)} creations failed, first: {failures[0]}" if failures else "")
    )
    measured["alive"] = (await rest.call("GET", "/api/terminals", params={"status": "active"}))["count"]
    measured["rss_mb"] = service.rss_bytes() / 1e6
    failures.clear()
    answers = await _in_parallel(len(terminals), lambda index: _answer(rest, terminals[index], failures))
    answered = [seconds for seconds in answers if seconds is not None]
    measured["answered"] = len(answered)
    measured["command_p99"] = percentile(ms(answered), 0.99)
    measured["nofile"] = open_files_limit(service.pids[0])  # split: the worker comes first
    log(
        f"{service.mode}: {len(answered)} of {len(terminals)} terminals answered a command"
        + (f"; first failure: {failures[0]}" if failures else "")
    )
    return measured


async def _create(rest, failures: list[str]) -> str | None:
    try:
        return await rest.create()
    except Exception as error:  # noqa: BLE001 - counted: the table shows how many are alive
        failures.append(str(error))
        return None


async def _answer(rest, terminal: str, failures: list[str]) -> float | None:
    """Seconds for `echo ok` through the commands endpoint; None (and the reason in failures) if it failed."""
    started = time.perf_counter()
    try:
        data = await rest.command(terminal, "echo ok", timeoutMs=30000)
    except Exception as error:  # noqa: BLE001 - counted as a terminal that did not answer
        failures.append(str(error))
        return None
    if data.get("output") != "ok\n":
        failures.append(f"output {data.get('output')!r}")
        return None
    return time.perf_counter() - started


async def _in_parallel(count: int, work) -> list:
    """work(index) for each index, CONCURRENCY at a time; returns the results in order."""
    results: list = [None] * count
    indexes = iter(range(count))

    async def client() -> None:
        for index in indexes:
            results[index] = await work(index)

    await asyncio.gather(*(client() for _ in range(CONCURRENCY)))
    return results
