"""What every part of the benchmark shares: the scale of the run, progress messages and percentiles."""

from __future__ import annotations

import math
import os
import sys
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
ROOT = BENCH_DIR.parent
STARTED = time.monotonic()


def scale() -> float:
    """BENCH_SCALE: 1.0 is the full run; 0.1 a quick one. Sizes, counts and durations follow it."""
    value = float(os.environ.get("BENCH_SCALE", "1.0"))
    if not value > 0:
        raise ValueError(f"BENCH_SCALE must be a positive number, not {value}")
    return value


def scaled(full: float, minimum: float, maximum: float | None = None) -> int:
    """full at scale 1, in proportion otherwise, never under minimum (nor over maximum)."""
    value = max(minimum, full * scale())
    if maximum is not None:
        value = min(value, maximum)
    return round(value)


def log(message: str) -> None:
    print(f"[bench {time.monotonic() - STARTED:6.1f}s] {message}", file=sys.stderr, flush=True)


def percentile(samples: list[float], fraction: float) -> float:
    """The nearest-rank percentile (fraction 0.5 is the median); NaN for no samples."""
    if not samples:
        return math.nan
    ordered = sorted(samples)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]


def median(samples: list[float]) -> float:
    return percentile(samples, 0.5)


def ms(seconds: list[float]) -> list[float]:
    return [value * 1000 for value in seconds]
