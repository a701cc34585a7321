"""Which terminals their worker left behind, as the web processes ask it: a request waiting on a worker, and the
live clients of a worker, give up when the answer is yes."""

from __future__ import annotations

from django.db.models import BooleanField, ExpressionWrapper

from ..ids import uuid_keys
from ..models import TerminalSession, Worker

LOST = TerminalSession.Status.LOST
RESTARTED = "restarted"


def terminals_cut_off(keys) -> dict:
    """Which of these (terminal id as a string, the worker channel a connection reads it from) their worker left
    behind: lost (True); hosted by a worker that stopped or stopped beating, by the database's clock, and not
    marked lost yet (False); or hosted now on another channel (RESTARTED: its worker restarted under its keeper,
    runtime/keeper.py, and no longer streams to that connection)."""
    keys = list(keys)
    ids = uuid_keys([terminal_id for terminal_id, _ in keys])
    worker_live = ExpressionWrapper(Worker.live_condition("worker__"), output_field=BooleanField())
    rows = {}
    for start in range(0, len(ids), 500):  # stay under SQLite's parameter limit
        rows.update({str(key): row for key, *row in TerminalSession.objects.filter(pk__in=ids[start : start + 500])
                     .annotate(worker_live=worker_live).values_list("id", "status", "worker_live", "worker__channel")})
    cut_off = {}
    for key in keys:
        status, live, channel = rows.get(key[0], (None, True, key[1]))
        if status == LOST or not live:
            cut_off[key] = status == LOST
        elif channel != key[1]:
            cut_off[key] = RESTARTED
    return cut_off


def terminal_lost(terminal_id: str) -> bool:
    """Whether the terminal was marked lost (its worker gone): a request waiting on that worker gives up."""
    return TerminalSession.objects.filter(pk=terminal_id, status=LOST).exists()
