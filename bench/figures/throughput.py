"""Figure 3: output streamed to one WebSocket client as fast as it comes (`head -c 64M /dev/zero | base64`)."""

from __future__ import annotations

import time

from .. import live, terminado_server
from ..common import log, median, scale, scaled
from ..results import FigureResult, Target, attempt, pick
from ..service import running

TITLE = "3. WebSocket throughput"
MARKER = "__DONE__"


def workload() -> tuple[str, int]:
    """The command line, and the bytes its output takes on a PTY (base64 lines of 76 characters, CR LF)."""
    mib = scaled(64, 4)
    encoded = 4 * -(-(mib << 20) // 3)
    lines = -(-encoded // 76)
    return f"head -c {mib}M /dev/zero | base64; echo __DO''NE__", encoded + 2 * lines


def repeats() -> int:
    return 3 if scale() >= 0.5 else 1


async def measure(modes: list[str]) -> FigureResult:
    result = FigureResult(TITLE)
    command, size = workload()
    peer = await attempt("terminado throughput", _terminado, command, size)
    ours = {}
    for mode in modes:
        ours[mode] = await attempt(f"{mode} throughput", _ours, mode, command, size)
    result.row(
        f"`{command.split(';')[0]}` ({size / 1e6:.0f} MB) to one client, MB/s delivered",
        values={mode: pick(ours[mode], "mb_s") for mode in modes},
        reference=pick(peer, "mb_s"),
        reference_name="terminado",
        target=Target.ratio_at_least(1.0, "≥ terminado's"),
    )
    result.row(
        "output delivered (the rest announced as gaps), %",
        values={mode: pick(ours[mode], "delivered") for mode in modes},
        reference=pick(peer, "delivered"),
        reference_name="terminado",
        target=Target.at_least(100.0, "all of it"),
    )
    result.notes.append(
        f"Median of {_runs(repeats())}: from sending the command over the WebSocket until the client "
        "has received the end marker printed after the output; MB/s counts what arrived. Our client "
        "acknowledges every 256 KiB; output the service skipped arrives as `gap` frames."
    )
    return result


async def _stream(socket, command: str, size: int) -> dict:
    await live.wait_for_prompt(socket)
    rates, delivered = [], []
    for _ in range(repeats()):
        started = time.perf_counter()
        await socket.send(command + "\r")
        received, after = await live.count_until(socket, MARKER, timeout=max(120.0, size / 1e6))
        seconds = time.perf_counter() - started
        log(
            f"received {received} of {size} characters in {seconds:.2f} s; gaps {getattr(socket, 'gaps', 0)} "
            f"({getattr(socket, 'gap_bytes', 0)} bytes), paused {getattr(socket, 'pauses', 0)}"
        )
        rates.append(received / seconds / 1e6)
        delivered.append(min(100.0, 100.0 * received / size))
        await live.read_until(socket, lambda text: text.endswith(("$ ", "# ")), text=after, timeout=30)
    return {"mb_s": median(rates), "delivered": min(delivered)}


async def _ours(mode: str, command: str, size: int) -> dict:
    async with running(mode) as service, service.rest() as rest:
        socket = await live.OurSocket.open(service, await rest.create())
        try:
            return await _stream(socket, command, size)
        finally:
            await socket.close()


async def _terminado(command: str, size: int) -> dict:
    async with terminado_server.running() as peer:
        socket = await live.TerminadoSocket.open(peer.named_url("stream"))
        try:
            return await _stream(socket, command, size)
        finally:
            await socket.close()


def _runs(count: int) -> str:
    return "1 run" if count == 1 else f"{count} runs"
