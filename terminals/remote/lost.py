"""Which terminals their worker left behind, as the web processes ask it: a request waiting on a worker, and the
live clients of a worker, give up when the answer is yes."""

from __future__ import annotations

from django.db.models import BooleanField, ExpressionWrapper

from ..ids import uuid_keys
from ..models import TerminalSession, Worker

LOST = TerminalSession.Status.LOST


def terminals_cut_off(terminal_ids) -> dict[str, bool]:
    """Which of these terminals (ids as strings) their worker left behind: lost (True), or hosted by a worker that
    stopped or stopped beating, by the database's clock, and not marked lost yet (False)."""
    keys = uuid_keys(terminal_ids)
    worker_live = ExpressionWrapper(Worker.live_condition("worker__"), output_field=BooleanField())
    cut_off = {}
    for start in range(0, len(keys), 500):  # stay under SQLite's parameter limit
        rows = (TerminalSession.objects.filter(pk__in=keys[start : start + 500]).annotate(worker_live=worker_live)
                .values_list("id", "status", "worker_live"))
        cut_off.update({str(key): status == LOST for key, status, live in rows if status == LOST or not live})
    return cut_off


def terminal_lost(terminal_id: str) -> bool:
    """Whether the terminal was marked lost (its worker gone): a request waiting on that worker gives up."""
    return TerminalSession.objects.filter(pk=terminal_id, status=LOST).exists()
