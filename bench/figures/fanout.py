"""Figure 8: one terminal, many attached WebSocket viewers, every one receiving `seq 1 100000` complete."""

from __future__ import annotations

import asyncio
import time

from .. import live, terminado_server
from ..common import ms, percentile, scaled
from ..results import FigureResult, Target, attempt, column, pick
from ..service import running

TITLE = "8. Fan-out"
PANEL = "8. Fan-out: until each viewer has all of the output"
MARKER = "__DONE__"


def sizes() -> tuple[int, int]:
    """(viewers, lines)."""
    return scaled(100, 10), scaled(100_000, 10_000)


async def measure(modes: list[str]) -> FigureResult:
    result = FigureResult(TITLE)
    viewers, lines = sizes()
    peer = await attempt("terminado fan-out", _terminado, viewers, lines)
    ours = {}
    for mode in modes:
        ours[mode] = await attempt(f"{mode} fan-out", _ours, mode, viewers, lines)
    result.row(
        f"viewers with all of `seq 1 {lines}` (of {viewers})",
        values=column(ours, "complete"),
        reference=pick(peer, "complete"),
        reference_name="terminado",
        target=Target.at_least(viewers, f"all {viewers}"),
    )
    result.row(
        "until the last viewer has it all, ms",
        values=column(ours, "last"),
        reference=pick(peer, "last"),
        reference_name="terminado",
        target=Target.note("reported"),
    )
    for series, measured in (*((f"ours ({mode})", ours[mode]) for mode in modes), ("terminado", peer)):
        if isinstance(measured, dict):
            result.add_samples(PANEL, series, measured["samples"])
    result.notes.append(
        f"{viewers} WebSocket clients attached to one terminal (ours: one interactive, the others "
        f"`mode=view`); the interactive one types `seq 1 {lines}; echo __DO''NE__`. A viewer is "
        "complete when its text holds every line in order; times run from the typing to each "
        "viewer's end marker."
    )
    return result


def expected_output(lines: int) -> str:
    return "\r\n".join(str(number) for number in range(1, lines + 1)) + "\r\n"


async def _fan_out(sockets: list, lines: int) -> dict:
    for socket in sockets:
        await live.wait_for_prompt(socket)
    expected = expected_output(lines)
    started = time.perf_counter()

    async def watch(socket) -> tuple[bool, float]:
        text = await live.collect_until(socket, MARKER, timeout=120)
        return expected in text, time.perf_counter() - started

    await sockets[0].send(f"seq 1 {lines}; echo __DO''NE__\r")
    seen = await asyncio.gather(*(watch(socket) for socket in sockets))
    samples = ms([seconds for _, seconds in seen])
    return {
        "complete": sum(complete for complete, _ in seen),
        "last": max(samples),
        "p50": percentile(samples, 0.5),
        "samples": samples,
    }


async def _ours(mode: str, viewers: int, lines: int) -> dict:
    async with running(mode) as service, service.rest() as rest:
        terminal = await rest.create()
        await rest.wait_for_prompt(terminal)
        sockets = [await live.OurSocket.open(service, terminal)]
        try:
            for _ in range(viewers - 1):
                sockets.append(await live.OurSocket.open(service, terminal, mode="view"))
            measured = await _fan_out(sockets, lines)
            measured["gaps"] = sum(socket.gaps for socket in sockets)
            return measured
        finally:
            await asyncio.gather(*(socket.close() for socket in sockets), return_exceptions=True)


async def _terminado(viewers: int, lines: int) -> dict:
    async with terminado_server.running() as peer:
        sockets = []
        try:
            for _ in range(viewers):
                sockets.append(await live.TerminadoSocket.open(peer.named_url("fan")))
            return await _fan_out(sockets, lines)
        finally:
            await asyncio.gather(*(socket.close() for socket in sockets), return_exceptions=True)
