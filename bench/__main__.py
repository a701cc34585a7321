"""Runs every figure (`python -m bench` from the project root), prints the table, writes RESULTS.md and the plot."""

from __future__ import annotations

import asyncio
import os
import platform
import resource
import subprocess
import sys
import time
from datetime import UTC, datetime
from importlib import metadata

from . import report, service
from .common import ROOT, log, scale
from .figures import FIGURES
from .results import MODES, Failure, FigureResult

FIGURE_SECONDS = 480  # one figure that hangs must not eat the whole run
OPEN_FILES = 16384  # 1,000 terminals hold two descriptors each in the worker, plus sockets


def selected_figures() -> list:
    """BENCH_FIGURES=1,4 runs those figures only; every figure by default."""
    wanted = os.environ.get("BENCH_FIGURES", "").replace(" ", "")
    if not wanted:
        return FIGURES
    numbers = {int(part) for part in wanted.split(",")}
    return [figure for figure in FIGURES if int(figure.TITLE.split(".")[0]) in numbers]


def selected_modes() -> list[str]:
    modes = [mode for mode in os.environ.get("BENCH_MODES", ",".join(MODES)).replace(" ", "").split(",") if mode]
    unknown = set(modes) - set(MODES)
    if unknown:
        raise SystemExit(f"BENCH_MODES: unknown {', '.join(sorted(unknown))}; use {', '.join(MODES)}")
    return modes


def raise_open_files_limit() -> None:
    """The servers inherit this process's limit, which must cover 1,000 terminals."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = OPEN_FILES if hard == resource.RLIM_INFINITY else min(OPEN_FILES, hard)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
        log(f"open-files limit raised from {soft} to {wanted}")


def run_figure(figure, modes: list[str]) -> FigureResult:
    started = time.monotonic()
    log(f"figure {figure.TITLE}")
    try:
        result = asyncio.run(asyncio.wait_for(figure.measure(modes), FIGURE_SECONDS * max(1.0, scale())))
    except Exception as error:  # noqa: BLE001 - the table says what failed and the run goes on
        reason = "timed out" if isinstance(error, TimeoutError) else f"{type(error).__name__}: {error}"
        log(f"figure {figure.TITLE} failed: {reason}")
        result = FigureResult(figure.TITLE)
        result.row("(the whole figure)", values={mode: Failure(reason) for mode in modes})
    result.seconds = time.monotonic() - started
    log(f"figure {figure.TITLE} took {result.seconds:.0f} s")
    return result


def conditions(started: float, load_before: str) -> dict[str, str]:
    versions = ", ".join(
        f"{name} {_version(name)}"
        for name in ("Django", "daphne", "channels", "channels-redis", "terminado", "tornado")
    )
    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{_cpu_model()}, {os.cpu_count()} cores, {_memory()}, {platform.platform()}",
        "load average (1 min) before / after": f"{load_before} / {os.getloadavg()[0]:.2f}",
        "Python": platform.python_version(),
        "packages": versions,
        "commit": _commit(),
        "BENCH_SCALE": f"{scale():g}",
        "run time": f"{time.monotonic() - started:.0f} s",
    }


def _version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def _memory() -> str:
    with open("/proc/meminfo") as meminfo:
        kib = int(meminfo.readline().split()[1])
    return f"{kib / 1024 / 1024:.0f} GiB"


def _commit() -> str:
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], check=False, cwd=ROOT, capture_output=True, text=True).stdout.strip()

    head = git("rev-parse", "--short", "HEAD") or "unknown"
    return head + (" with uncommitted changes" if git("status", "--porcelain", "--untracked-files=no") else "")


def main() -> None:
    started = time.monotonic()
    load_before = f"{os.getloadavg()[0]:.2f}"
    os.chdir(ROOT)
    raise_open_files_limit()
    modes, figures = selected_modes(), selected_figures()
    log(f"BENCH_SCALE={scale():g}; modes {', '.join(modes)}; {len(figures)} figures")
    try:
        results = [run_figure(figure, modes) for figure in figures]
    finally:
        service.clean_up()
    table = report.write(results, conditions(started, load_before))
    print(table)
    log(
        f"wrote {report.relative(report.RESULTS)}"
        + (f" and {report.relative(report.PLOT)}" if report.PLOT.exists() else "")
    )
    log(f"done in {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    sys.exit(main())
