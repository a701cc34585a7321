"""The audit trail as a user may read it, filtered: the one query behind the REST list (`GET /api/audit`) and the
dashboard's audit page, so both show the same rows for the same filters."""

from __future__ import annotations

from datetime import datetime

from .models import AuditEvent, AuditQuerySet


def audit_events(*, user, terminal=None, action: str | None = None, outcome: str | None = None,
                 username: str | None = None, since: datetime | None = None, until: datetime | None = None,
                 newest_first: bool = True) -> AuditQuerySet:
    """The events user may see (staff: every event; others: their own and the system's about their terminals),
    each filter applied when given: since is inclusive, until exclusive. Ordered by id, which follows time (the
    hash chain's order)."""
    filters = {"terminal_id": terminal, "action": action, "outcome": outcome, "username": username,
               "at__gte": since, "at__lt": until}
    events = AuditEvent.objects.visible_to(user).filter(
        **{name: value for name, value in filters.items() if value not in (None, "")})
    return events.order_by("-id" if newest_first else "id")
