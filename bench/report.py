"""RESULTS.md (the table, the run's conditions, notes) and latency.png (latency distributions) from the figures."""

from __future__ import annotations

import math
import os
from pathlib import Path

from .common import BENCH_DIR
from .results import MODES, FigureResult, Row, Value, _number

RESULTS = BENCH_DIR / "RESULTS.md"
# Written by hand after profiling: before/after figures with their commits, and why a target is missed.
ANALYSIS = BENCH_DIR / "ANALYSIS.md"
PLOT = BENCH_DIR / "latency.png"
INTRODUCTION = (
    "Written by `bench/run` (`python -m bench`); see bench/README.md for what each figure measures. Ratios are "
    "ours ÷ the reference measured in the same run, on the same machine: they are what to compare between "
    "runs and machines, not the absolute times. Targets are meant for `BENCH_SCALE=1`."
)
HEADER = (
    "Figure",
    "Metric",
    "Embedded",
    "Split",
    "Reference",
    "Ratio (embedded)",
    "Ratio (split)",
    "Target",
    "Met (embedded / split)",
)


def number(value: float) -> str:
    if isinstance(value, int):
        return f"{value:,}"
    size = abs(value)
    if size >= 1000:
        return f"{value:,.0f}"
    if size >= 100:
        return f"{value:.0f}"
    if size >= 10:
        return f"{value:.1f}"
    if size >= 1:
        return f"{value:.2f}"
    return f"{value:.3f}"


def cell(value: Value) -> str:
    if value is None:
        return "—"
    if _number(value):
        return number(value)
    if isinstance(value, float) and math.isnan(value):
        return "—"
    text = str(value)
    return text if len(text) <= 120 else text[:117] + "…"


def _escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def met(row: Row, mode: str) -> str:
    verdict = row.met(mode)
    return "—" if verdict is None else ("yes" if verdict else "**no**")


def table_rows(results: list[FigureResult]) -> list[list[str]]:
    lines = []
    for result in results:
        for row in result.rows:
            reference = cell(row.reference)
            if row.reference_name and row.reference is not None:
                reference = f"{reference} ({row.reference_name})"
            ratios = [row.ratio(mode) for mode in MODES]
            lines.append(
                [
                    row.figure,
                    row.metric,
                    cell(row.values.get("embedded")),
                    cell(row.values.get("split")),
                    reference,
                    *("—" if ratio is None else f"{ratio:.2f}×" for ratio in ratios),
                    row.target.text if row.target else "—",
                    f"{met(row, 'embedded')} / {met(row, 'split')}",
                ]
            )
    return lines


def markdown_table(results: list[FigureResult]) -> str:
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join(_escape(text) for text in row) + " |" for row in table_rows(results)]
    return "\n".join(lines)


def write(results: list[FigureResult], conditions: dict[str, str]) -> str:
    """Writes RESULTS.md and the plot; returns the table."""
    table = markdown_table(results)
    plotted = plot(results)
    parts = [
        "# Benchmark results",
        "",
        INTRODUCTION,
        "",
        "## Conditions",
        "",
        *(f"- {name}: {value}" for name, value in conditions.items()),
        "",
        "## Results",
        "",
        table,
        "",
    ]
    if plotted:
        parts += ["## Latency distributions", "", f"![latency distributions]({PLOT.name})", ""]
    parts += ["## How each figure was measured", ""]
    for result in results:
        parts.append(f"- **{result.title}** ({result.seconds:.0f} s). " + " ".join(result.notes))
    failures = [
        (row, mode)
        for result in results
        for row in result.rows
        for mode in MODES
        if str(row.values.get(mode, "")).startswith("failed")
    ]
    if failures:
        parts += ["", "## Failures", ""]
        parts += [f"- {row.figure}, {row.metric}, {mode}: {row.values[mode]}" for row, mode in failures]
    if ANALYSIS.exists():
        parts += ["", ANALYSIS.read_text().rstrip()]
    RESULTS.write_text("\n".join(parts) + "\n")
    return table


def plot(results: list[FigureResult]) -> bool:
    """Empirical CDFs of every latency sample set, one panel per kind; returns whether a plot was written."""
    panels: dict[str, dict[str, list[float]]] = {}
    for result in results:
        for panel, series in result.samples.items():
            panels.setdefault(panel, {}).update(series)
    if not panels:
        return False
    os.environ.setdefault("MPLBACKEND", "Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, NullFormatter

    columns = 2
    rows = -(-len(panels) // columns)
    figure, axes = plt.subplots(rows, columns, figsize=(14, 4.2 * rows), squeeze=False)
    plain = FuncFormatter(lambda value, _: f"{value:g}")
    for axis, (title, series) in zip(axes.flat, panels.items(), strict=False):
        used: dict[str, int] = {}
        values = [value for samples in series.values() for value in samples if value > 0]
        for label, samples in series.items():
            ordered = sorted(value for value in samples if value > 0)
            if ordered:
                color = _color(label)
                style = LINE_STYLES[used.get(color, 0) % len(LINE_STYLES)]
                used[color] = used.get(color, 0) + 1
                fractions = [(index + 1) / len(ordered) for index in range(len(ordered))]
                axis.step(
                    ordered, fractions, where="post", color=color, linestyle=style, label=f"{label} (n={len(ordered)})"
                )
        axis.set_xscale("log")
        axis.xaxis.set_major_formatter(plain)
        # Within a decade a log axis has no major tick: label the minor ones then.
        narrow = bool(values) and max(values) / min(values) < 20
        axis.xaxis.set_minor_formatter(plain if narrow else NullFormatter())
        axis.set_title(title, fontsize=10)
        axis.set_xlabel("milliseconds (log scale)")
        axis.set_ylabel("fraction of samples ≤ x")
        for level in (0.5, 0.99):
            axis.axhline(level, color="grey", linewidth=0.6, linestyle=":")
        axis.grid(True, which="both", linewidth=0.3)
        axis.legend(fontsize=8, loc="lower right")
    for axis in list(axes.flat)[len(panels) :]:
        axis.set_visible(False)
    figure.tight_layout()
    figure.savefig(PLOT, dpi=100)
    plt.close(figure)
    return True


LINE_STYLES = ("-", "--", ":", "-.")
COLORS = (("embedded", "tab:blue"), ("split", "tab:orange"), ("terminado", "tab:green"), ("limit", "tab:red"))


def _color(label: str) -> str:
    """One colour per deployment or reference, the same in every panel."""
    return next((color for word, color in COLORS if word in label), "tab:gray")


def relative(path: Path) -> str:
    return os.path.relpath(path, Path.cwd())
