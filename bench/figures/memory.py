"""Figure 6: the service's own RSS per idle terminal, and with full 10,000-line buffers, against terminado's."""

from __future__ import annotations

import asyncio

import aiohttp

from .. import live, terminado_server
from ..common import log, scaled
from ..results import FigureResult, Target, attempt, pick
from ..service import rss_bytes, running

TITLE = "6. Memory"
WARM_UP = 5  # terminals made before the first reading, so code paths and caches are warm
LINES = 12_000  # more than MAX_BUFFER_SIZE (10,000) lines of 80 bytes
FILL = f"seq -f '%078.0f' 1 {LINES}; echo __DO''NE__"
SETTLE_SECONDS = 1.0


def sizes() -> tuple[int, int]:
    """(idle terminals added between two readings, terminals with full buffers)."""
    return scaled(100, 10), scaled(50, 5)


async def measure(modes: list[str]) -> FigureResult:
    result = FigureResult(TITLE)
    idle, full = sizes()
    peer_idle = await attempt("terminado idle memory", _terminado_idle, idle)
    peer_full = await attempt("terminado full buffers", _terminado_full, full)
    ours_idle, ours_full = {}, {}
    for mode in modes:
        ours_idle[mode] = await attempt(f"{mode} idle memory", _ours_idle, mode, idle)
        ours_full[mode] = await attempt(f"{mode} full buffers", _ours_full, mode, full)
    result.row(
        "service RSS with no terminal yet, MB",
        values={mode: pick(ours_idle[mode], "base_mb") for mode in modes},
        reference=pick(peer_idle, "base_mb"),
        reference_name="terminado",
        target=Target.at_most(60, "≤ 60 MB"),
    )
    result.row(
        "service RSS added per idle terminal, KiB",
        values={mode: pick(ours_idle[mode], "kib") for mode in modes},
        reference=pick(peer_idle, "kib"),
        reference_name="terminado",
        target=Target.ratio_at_most(1.0, "≤ terminado's"),
    )
    result.row(
        f"service RSS with {full} terminals holding full buffers, MB",
        values={mode: pick(ours_full[mode], "mb") for mode in modes},
        reference=pick(peer_full, "mb"),
        reference_name="terminado",
        target=Target.below(120, "< 120 MB (seed 000: < 500 MB for 50)"),
    )
    result.notes.append(
        f"RSS is VmRSS of the service's processes (split: web + worker; never the shells) from "
        f"/proc. Idle: {idle} bash terminals added after {WARM_UP} warm-up ones, read "
        f"{SETTLE_SECONDS:g} s after the last prompt. Full: `{FILL.split(';')[0]}` in each terminal "
        "(80-byte lines, past the 10,000-line buffer), then a tail read of each."
    )
    return result


async def _ours_idle(mode: str, count: int) -> dict:
    async with running(mode) as service, service.rest() as rest:
        base = service.rss_bytes()
        for _ in range(WARM_UP):
            await rest.wait_for_prompt(await rest.create())
        await asyncio.sleep(SETTLE_SECONDS)
        before = service.rss_bytes()
        terminals = [await rest.create() for _ in range(count)]
        for terminal in terminals:
            await rest.wait_for_prompt(terminal)
        await asyncio.sleep(SETTLE_SECONDS)
        after = service.rss_bytes()
        return {"kib": (after - before) / count / 1024, "base_mb": base / 1e6}


async def _ours_full(mode: str, count: int) -> dict:
    async with running(mode) as service, service.rest() as rest:
        terminals = [await rest.create() for _ in range(count)]
        for terminal in terminals:
            await rest.wait_for_prompt(terminal)
            await rest.type(terminal, FILL + "\r")
        for terminal in terminals:
            await _wait_done(rest, terminal)
        held = 0
        for terminal in terminals:
            await rest.output(terminal, mode="tail", tailLines=50)
            held += (await rest.stats(terminal))["bufferBytes"]
        await asyncio.sleep(SETTLE_SECONDS)
        megabytes = service.rss_bytes() / 1e6
        log(f"{mode}: {count} full buffers hold {held / 1e6:.1f} MB; service RSS {megabytes:.0f} MB")
        return {"mb": megabytes}


async def _wait_done(rest, terminal: str, timeout: float = 120.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while "__DONE__" not in (await rest.output(terminal, mode="tail", tailLines=3))["output"]:
        if asyncio.get_running_loop().time() > deadline:
            raise TimeoutError(f"the buffer of {terminal} did not fill within {timeout:g} s")
        await asyncio.sleep(0.05)


async def _terminado_idle(count: int) -> dict:
    async with terminado_server.running() as peer, aiohttp.ClientSession() as http:
        base = rss_bytes(peer.pid)
        for _ in range(WARM_UP):
            await peer.new_terminal(http)
        await asyncio.sleep(SETTLE_SECONDS)
        before = rss_bytes(peer.pid)
        for _ in range(count):
            await peer.new_terminal(http)
        await asyncio.sleep(SETTLE_SECONDS + count * 0.005)  # their prompts arrive with no client to wait on
        return {"kib": (rss_bytes(peer.pid) - before) / count / 1024, "base_mb": base / 1e6}


async def _terminado_full(count: int) -> dict:
    async with terminado_server.running() as peer, aiohttp.ClientSession() as http:
        names = [await peer.new_terminal(http) for _ in range(count)]
        for name in names:
            socket = await live.TerminadoSocket.open(peer.named_url(name))
            try:
                await live.wait_for_prompt(socket)
                await socket.send(FILL + "\r")
                await live.count_until(socket, "__DONE__", timeout=120)
            finally:
                await socket.close()
        await asyncio.sleep(SETTLE_SECONDS)
        return {"mb": rss_bytes(peer.pid) / 1e6}
