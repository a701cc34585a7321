"""Read-only looks that owners give (the dashboard's sharing)."""

from __future__ import annotations

from django.contrib.auth import get_user_model

from ..audit import Actor, audit
from ..exceptions import InvalidInput
from ..models import TerminalSession, ViewGrant
from ..record_shapes import session_data
from .lookup import session_get_for

def session_share(*, actor: Actor, terminal_id, username: str) -> list[str]:
    """Lets another user watch the terminal read-only; the owner (or staff) may. Returns who may watch now."""
    record = session_get_for(user=actor.user, terminal_id=terminal_id)
    user = get_user_model().objects.filter(username=username, is_active=True).first()
    if user is None or user.pk == record.owner_id:
        # One answer for a name nobody has, the owner's and a disabled user's: sharing must not tell who exists.
        raise InvalidInput(f"cannot share with {username!r}: give the user name of an active user other than the "
                           "terminal's owner")
    ViewGrant.objects.get_or_create(terminal=record, user=user, defaults={"granted_by": actor.user})
    audit(actor, "share", terminal_id=record.id, subject=user.get_username())
    return session_shares(user=actor.user, terminal_id=record.id)


def session_unshare(*, actor: Actor, terminal_id, username: str) -> list[str]:
    record = session_get_for(user=actor.user, terminal_id=terminal_id)
    removed, _ = ViewGrant.objects.filter(terminal=record, user__username=username).delete()
    if removed:
        audit(actor, "unshare", terminal_id=record.id, subject=username)
    return session_shares(user=actor.user, terminal_id=record.id)


def session_shares(*, user, terminal_id) -> list[str]:
    record = session_get_for(user=user, terminal_id=terminal_id)
    return list(ViewGrant.objects.filter(terminal=record).order_by("user__username")
                .values_list("user__username", flat=True))


def session_shared_with(*, user) -> list[dict]:
    """Terminals other users shared with this one."""
    records = TerminalSession.objects.filter(view_grants__user=user).select_related("owner").order_by("-created")
    return [session_data(record) for record in records]
