"""Figure 4: a bounded command through POST /api/terminals/{id}/commands (wait), from request to answer."""

from __future__ import annotations

import time

from .. import reference
from ..common import ms, percentile, scaled
from ..results import FigureResult, Target, attempt, column, pick
from ..service import SHELL_HOME, running

TITLE = "4. Command round trip"
PANEL = "4. Command round trip (commands endpoint)"
MEGABYTE = "yes " + "x" * 99 + " | head -n 10000"  # 10,000 lines of 100 bytes
WARM_UP = 5


def loads() -> list[tuple[str, str, int]]:
    """(label, command line, how many times)."""
    many, few = scaled(300, 30), scaled(30, 5)
    return [("true", "true", many), ("echo hi", "echo hi", many), ("1 MB output", MEGABYTE, few)]


TARGETS = {
    ("true", "p50"): Target.below(5, "< 5 ms"),
    ("true", "p99"): Target.below(25, "< 25 ms"),
}


async def measure(modes: list[str]) -> FigureResult:
    result = FigureResult(TITLE)
    limits = {}
    for label, line, count in loads():
        limits[label] = await attempt(f"limit command {label}", _limit, line, count)
    ours = {}
    for mode in modes:
        ours[mode] = await attempt(f"{mode} commands", _ours, mode)
    for label, _, _ in loads():
        for key in ("p50", "p99"):
            result.row(
                f"`{label}` {key}, ms",
                values=column(ours, label, key),
                reference=pick(limits[label], key),
                reference_name="limit",
                target=TARGETS.get((label, key), Target.note("reported")),
            )
        for mode in modes:
            if isinstance(ours[mode], dict):
                result.add_samples(PANEL, f"{label} ({mode})", ours[mode][label]["samples"])
        if isinstance(limits[label], dict) and label == "true":
            result.add_samples(PANEL, "true (limit)", limits[label]["samples"])
    counts = ", ".join(f"{count} × `{label}`" for label, _, count in loads())
    result.notes.append(
        f"{counts}, one after another in one bash terminal, each from sending POST .../commands "
        "(`wait` true, default read options) to its answer with status `completed`. The limit types the "
        "line into bash on a PTY and waits for the next prompt. 1 MB output: `" + MEGABYTE[:12] + "… | head -n 10000`."
    )
    return result


def summary(seconds: list[float]) -> dict:
    samples = ms(seconds)
    return {"p50": percentile(samples, 0.5), "p99": percentile(samples, 0.99), "samples": samples}


async def _limit(line: str, count: int) -> dict:
    report = await reference.run("command", "--count", str(count + WARM_UP), "--line", line, home=SHELL_HOME)
    return summary(report["latencies"][WARM_UP:])


async def _ours(mode: str) -> dict:
    async with running(mode) as service, service.rest() as rest:
        terminal = await rest.create()
        await rest.wait_for_prompt(terminal)
        for _ in range(WARM_UP):
            await _run(rest, terminal, "true")
        measured = {}
        for label, line, count in loads():
            measured[label] = summary([await _run(rest, terminal, line) for _ in range(count)])
        return measured


async def _run(rest, terminal: str, line: str) -> float:
    started = time.perf_counter()
    data = await rest.command(terminal, line, timeoutMs=30000)
    seconds = time.perf_counter() - started
    if data.get("status") != "completed" or data.get("exitCode") != 0:
        raise RuntimeError(f"`{line[:30]}` ended as {data.get('status')} with exit code {data.get('exitCode')}")
    return seconds
