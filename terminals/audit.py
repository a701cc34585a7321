"""Writing audit events: who did what to which terminal, and how it ended."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from django.db import DatabaseError

from . import metrics
from .exceptions import AuditUnavailable, database_unavailable
from .ids import parse_uuid
from .models import AuditEvent, key_prefix, newest_audit_hash
from .redaction import redact

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Actor:
    """Who is acting: a user with the key they used and the address they came from, and the longest the
    interface they came through lets one call wait (None: only the core's MAX_WAIT_MS; sessions.wait_bound_ms)."""

    user: object | None = None
    api_key: object | None = None
    source: str = ""
    max_wait_ms: int | None = None

    @classmethod
    def from_request(cls, request) -> Actor:
        user = getattr(request, "user", None)
        if user is not None and not user.is_authenticated:
            user = None
        return cls(user=user, api_key=getattr(request, "auth", None), source=client_address(request))

    @property
    def username(self) -> str:
        return self.user.get_username() if self.user is not None else ""

    @property
    def key_prefix(self) -> str:
        return self.api_key.display_prefix if self.api_key is not None else ""

    def as_dict(self) -> dict:
        """Who, in a form a worker can carry and write into its own audit rows."""
        return {
            "user_id": self.user.pk if self.user is not None else None,
            "username": self.username,
            "key_prefix": self.key_prefix,
            "source": self.source,
        }


SYSTEM = Actor()

# Refusals are recorded under the same action names as the successes they stand for.
VIEW_ACTIONS = {"destroy": "delete", "retrieve": "detail"}
# A refused request is recorded under the name its accepted form has: running a command is "command" either way
# (the commands view lists them on GET, which keeps the view's name).
METHOD_ACTIONS = {("commands", "POST"): "command"}


def client_address(request) -> str:
    # X-Forwarded-For is ignored: it is the client's to forge.
    meta = getattr(request, "META", {})
    return meta.get("REMOTE_ADDR", "") or ""


def audit(actor: Actor, action: str, *, outcome: str = "ok", terminal_id=None, **details) -> AuditEvent:
    """Writes one audit event; raises AuditUnavailable (503) when the database refuses it."""
    return audit_carried(actor.as_dict(), action, outcome=outcome, terminal_id=terminal_id, **details)


def audit_carried(actor: dict, action: str, *, outcome: str = "ok", terminal_id=None, **details) -> AuditEvent:
    """audit() under an actor carried as Actor.as_dict(), the way a worker writes rows for a web process's user."""
    try:
        return AuditEvent.objects.create(
            user_id=actor.get("user_id"),
            username=actor.get("username", ""),
            key_prefix=actor.get("key_prefix", ""),
            source=actor.get("source", ""),
            action=action,
            terminal_id=terminal_id,
            outcome=outcome,
            details=details,
        )
    except DatabaseError as error:
        metrics.AUDIT_FAILURES.inc()
        unavailable = database_unavailable(error)  # the database away: its outage is logged once, not each row
        if unavailable is not None:
            raise unavailable from error
        logger.error("audit event %s for terminal %s could not be written: %s", action, terminal_id or "-", error)
        raise AuditUnavailable(details={"action": action}) from error


def audit_refusal(request, view, error) -> None:
    """Records a request the API refused, with the key's public prefix only."""
    actor = Actor.from_request(request)
    prefix = actor.key_prefix or _presented_prefix(request)
    action = getattr(view, "audit_action", None) or getattr(view, "action", None) or "request"
    action = VIEW_ACTIONS.get(action, action)
    action = METHOD_ACTIONS.get((action, request.method), action)
    kwargs = getattr(view, "kwargs", {}) or {}
    AuditEvent.objects.create(
        user=actor.user,
        username=actor.username,
        key_prefix=prefix,
        source=actor.source,
        action=str(action),
        terminal_id=parse_uuid(kwargs.get("pk")),
        outcome=error.default_code,
        # The path and the message may quote a key the client put in the wrong place.
        details={"method": request.method, "path": redact(request.path), "message": redact(error.message)},
    )


def _presented_prefix(request) -> str:
    from .auth import presented_key

    key = presented_key(request)
    prefix = key_prefix(key) if key else None
    return f"tk_{prefix}" if prefix else ""


def verify_chain() -> tuple[int, str | None]:
    """Walks the hash chain from the first event: (events checked, None) when intact, else the first broken link
    described (an event changed, removed or inserted). manage.py verify_audit and the dashboard show it."""
    previous, count = "", 0
    for event in AuditEvent.objects.order_by("id").iterator(chunk_size=2000):
        if event.previous_hash != previous:
            return count, (f"broken link at audit event {event.id}: it follows {event.previous_hash[:16] or '(nothing)'}"
                           f"..., but the event before it hashes to {previous[:16] or '(nothing)'}... (an event was "
                           "removed or inserted)")
        if event.compute_hash() != event.hash:
            return count, f"broken link at audit event {event.id}: its content does not match its hash (it was changed)"
        previous, count = event.hash, count + 1
    return count, None


def last_hash() -> str:
    return newest_audit_hash()
