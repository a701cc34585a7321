"""A read of a terminal's lines as the API returns it: which lines a mode shows (full, head, tail, head-tail), the
gap left out, and an estimate of what the text costs an agent in tokens."""

from __future__ import annotations

import math
from dataclasses import dataclass

MODES = ("full", "head", "tail", "head-tail")


@dataclass(frozen=True)
class LineRead:
    """One slice of output by line number, as the output endpoint returns it."""

    lines: list[str]  # with a "... [N lines omitted] ..." marker in head-tail mode
    lines_shown: int
    total_lines: int
    next_read_from: int
    has_more: bool
    truncated: bool
    lines_omitted: int
    lines_evicted: int
    oldest_line: int

    @property
    def output(self) -> str:
        return "\n".join(self.lines)


def estimate_tokens(text: str) -> int:
    """About four characters make a token, as the REST contract says."""
    return math.ceil(len(text) / 4)


def choose_lines(mode: str, count: int, head: int, tail: int, limit: int) -> tuple[list[int], int, int]:
    """Picks which of count lines a read shows: (offsets shown, where a head-tail gap marker goes, lines in the gap)."""
    if mode == "full":
        return list(range(min(count, limit))), 0, 0
    if mode == "head":
        return list(range(min(count, head, limit))), 0, 0
    if mode == "tail":
        keep = min(count, tail, limit)
        return list(range(count - keep, count)), 0, 0
    head = min(head, limit)
    tail = min(tail, limit - head)
    if count <= head + tail:
        return list(range(count)), 0, 0
    return list(range(head)) + list(range(count - tail, count)), head, count - head - tail


def shape_lines(lines: list[str], mode: str, head: int, tail: int, limit: int) -> tuple[list[str], int, int]:
    """Applies a read mode to a list of lines: (lines to show with any gap marker, lines shown, lines omitted)."""
    shown, gap_at, gap = choose_lines(mode, len(lines), head, tail, limit)
    result = [lines[offset] for offset in shown]
    if gap:
        result.insert(gap_at, f"... [{gap} lines omitted] ...")
    return result, len(shown), len(lines) - len(shown)
