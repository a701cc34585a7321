"""The rows of the results table: a measured value per deployment, the reference of the same run, the target."""

from __future__ import annotations

import math
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from .common import log

MODES = ("embedded", "split")


@dataclass(frozen=True)
class Failure:
    """A measurement that did not complete; shown as `failed: <reason>` in its cell."""

    reason: str

    def __str__(self) -> str:
        return f"failed: {self.reason}"


Value = float | int | str | Failure | None


@dataclass(frozen=True)
class Target:
    """A goal in words, and how to tell whether a value (with its reference) meets it."""

    text: str
    check: Callable[[float, float | None], bool] | None = None

    @classmethod
    def ratio_at_least(cls, bound: float, text: str) -> Target:
        return cls(text, lambda value, reference: reference is not None and value >= bound * reference)

    @classmethod
    def ratio_at_most(cls, bound: float, text: str) -> Target:
        return cls(text, lambda value, reference: reference is not None and value <= bound * reference)

    @classmethod
    def below(cls, bound: float, text: str) -> Target:
        return cls(text, lambda value, reference: value < bound)

    @classmethod
    def at_most(cls, bound: float, text: str) -> Target:
        return cls(text, lambda value, reference: value <= bound)

    @classmethod
    def at_most_and_ratio_at_most(cls, bound: float, ratio: float, text: str) -> Target:
        """value ≤ bound, and value ≤ ratio × the reference (not met without a reference)."""
        return cls(
            text,
            lambda value, reference: value <= bound and reference is not None and value <= ratio * reference,
        )

    @classmethod
    def at_least(cls, bound: float, text: str) -> Target:
        return cls(text, lambda value, reference: value >= bound)

    @classmethod
    def note(cls, text: str) -> Target:
        return cls(text, None)


@dataclass
class Row:
    figure: str
    metric: str
    values: dict[str, Value] = field(default_factory=dict)  # by deployment (MODES)
    reference: Value = None
    reference_name: str = ""
    target: Target | None = None

    def ratio(self, mode: str) -> float | None:
        value, reference = self.values.get(mode), self.reference
        if not (_number(value) and _number(reference)) or reference == 0:
            return None
        return value / reference

    def met(self, mode: str) -> bool | None:
        value = self.values.get(mode)
        if self.target is None or self.target.check is None or not _number(value):
            return None
        reference = self.reference if _number(self.reference) else None
        return bool(self.target.check(value, reference))


@dataclass
class FigureResult:
    title: str
    rows: list[Row] = field(default_factory=list)
    samples: dict[str, dict[str, list[float]]] = field(default_factory=dict)  # plot panel -> series -> ms
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def row(self, metric: str, **fields) -> Row:
        row = Row(self.title, metric, **fields)
        self.rows.append(row)
        return row

    def add_samples(self, panel: str, series: str, values_ms: list[float]) -> None:
        if values_ms:
            self.samples.setdefault(panel, {})[series] = list(values_ms)


def _number(value: Value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and not math.isnan(value)


async def attempt(what: str, work: Callable[..., Awaitable], *args) -> object:
    """Awaits work(*args), one measurement; returns its result, or a Failure naming what went wrong."""
    try:
        return await work(*args)
    except Exception as error:  # noqa: BLE001 - one failed measurement must not end the run
        log(f"{what} failed: {error!r}")
        log("".join(traceback.format_exception(error)).rstrip())
        return Failure(_reason(error))


def column(by_mode: dict[str, object], *keys: str) -> dict[str, Value]:
    """The value under keys of each deployment's measurement: a table row's cells."""
    cells = {}
    for mode, measured in by_mode.items():
        for key in keys:
            measured = pick(measured, key)
        cells[mode] = measured
    return cells


def pick(result: object, key: str) -> Value:
    """result[key] for a finished measurement; the Failure itself for a failed one."""
    if isinstance(result, Failure):
        return result
    return result.get(key) if isinstance(result, dict) else None


def _reason(error: BaseException) -> str:
    text = str(error).strip().splitlines()[0] if str(error).strip() else ""
    text = f"{type(error).__name__}: {text}" if text else type(error).__name__
    return text[:160]
