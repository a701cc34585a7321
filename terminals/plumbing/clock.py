"""The database's clock: the one clock every process of a deployment shares, whatever host it runs on.

A deadline set by a web process and judged by a worker on another host would otherwise compare two hosts' clocks:
a worker whose clock runs ahead drops every request as expired, one whose clock runs behind runs a creation its
caller already gave up on (and answered 503 for). Each process keeps the offset of the database's clock from its
own, measured at most REFRESH_SECONDS apart, and expresses deadlines in database time.
"""

from __future__ import annotations

import time

from django.db import connection

REFRESH_SECONDS = 60.0

# The database's time now, in unix seconds, by vendor. SQLite's clock is this process's own (offset 0).
_NOW_SQL = {
    "postgresql": "SELECT extract(epoch FROM clock_timestamp())",
    "sqlite": "SELECT (julianday('now') - 2440587.5) * 86400.0",
}

_offset = 0.0  # the database's time minus this host's, in seconds
_measured_at: float | None = None  # time.monotonic() of the last measurement


def measure() -> float:
    """Reads the database's time (synchronous: a thread that may use the database) and keeps the offset."""
    global _offset, _measured_at
    before = time.time()
    with connection.cursor() as cursor:
        cursor.execute(_NOW_SQL.get(connection.vendor, _NOW_SQL["postgresql"]))
        (database_now,) = cursor.fetchone()
    after = time.time()
    _offset = float(database_now) - (before + after) / 2
    _measured_at = time.monotonic()
    return _offset


def needs_measuring() -> bool:
    return _measured_at is None or time.monotonic() - _measured_at > REFRESH_SECONDS


def now() -> float:
    """The database's time, in unix seconds, from this host's clock and the last measured offset."""
    return time.time() + _offset
