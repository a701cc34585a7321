"""Keys and users, managed the same way from every place that can (the admin, manage.py commands, the first
start), and always on the audit trail: who made or revoked which key, who made, disabled or changed which user.

No secret is recorded: a key appears by its public prefix, a password only as "changed".
"""

from __future__ import annotations

import getpass
import os

from django.contrib.auth import get_user_model
from django.db import transaction

from .audit import Actor, audit
from .auth import forget_checked_keys
from .exceptions import InvalidInput
from .models import KEY_TYPE, ApiKey


def command_line_actor(command: str) -> Actor:
    """Whoever runs a manage.py command: no API user, the command and the operating-system account as source."""
    try:
        account = getpass.getuser()
    except (KeyError, OSError):
        account = str(os.geteuid())
    return Actor(source=f"manage.py {command} (as {account})")


def create_user(actor: Actor, username: str, *, staff: bool = False, password: str | None = None):
    """A new user (an unusable password unless one is given); InvalidInput when the name is taken."""
    users = get_user_model().objects
    with transaction.atomic():
        if users.filter(username=username).exists():
            raise InvalidInput(f"a user named {username!r} exists already")
        user = users.create(username=username, is_staff=staff)
        if password is None:
            user.set_unusable_password()
        else:
            user.set_password(password)
        user.save()
        audit(actor, "user_create", subject=username, staff=staff, password=password is not None)
    return user


def set_user(actor: Actor, username: str, *, active: bool | None = None, staff: bool | None = None):
    """Disables or enables a user, or changes the staff flag; records what changed."""
    user = find_user(username)
    changes = {}
    if active is not None and user.is_active != active:
        user.is_active, changes["active"] = active, active
    if staff is not None and user.is_staff != staff:
        user.is_staff, changes["staff"] = staff, staff
    if changes:
        with transaction.atomic():
            user.save(update_fields=[field for field, change in (("is_active", "active"), ("is_staff", "staff"))
                                     if change in changes])
            audit(actor, "user_change", subject=username, **changes)
        forget_checked_keys()  # at once here; other processes within auth.KEY_CHECK_SECONDS
    return user, changes


def password_changed(actor: Actor, username: str) -> None:
    """Records that a user's password was changed outside the admin (the admin's own changes are logged there)."""
    audit(actor, "user_change", subject=username, password=True)


def find_user(username: str):
    try:
        return get_user_model().objects.get(username=username)
    except get_user_model().DoesNotExist:
        raise InvalidInput(f"there is no user named {username!r}; list them in the admin, or make one with "
                           "create_user") from None


def create_key(actor: Actor, user, *, name: str = "", expires_at=None) -> tuple[ApiKey, str]:
    """A new key for user; returns the record and the key, which is shown once and never stored."""
    with transaction.atomic():
        record, key = ApiKey.objects.create_key(user=user, name=name, expires_at=expires_at)
        audit(actor, "key_create", subject=user.get_username(), key=record.display_prefix, name=name,
              expires=expires_at.isoformat() if expires_at else None)
    return record, key


def find_key(prefix: str) -> ApiKey:
    """The key shown as tk_9b76e171 (or 9b76e171); InvalidInput when no key has that prefix."""
    bare = prefix.strip().removeprefix(f"{KEY_TYPE}_").split(".", 1)[0]
    try:
        return ApiKey.objects.select_related("user").get(prefix=bare)
    except ApiKey.DoesNotExist:
        raise InvalidInput(f"there is no key {KEY_TYPE}_{bare[:8]}; list the keys with list_api_keys") from None


def revoke_key(actor: Actor, record: ApiKey) -> bool:
    """Revokes the key for good; returns False when it was revoked already (and records nothing new)."""
    if record.revoked_at is not None:
        return False
    with transaction.atomic():
        record.revoke()
        audit(actor, "key_revoke", subject=record.user.get_username(), key=record.display_prefix)
    forget_checked_keys()  # at once here; other processes within auth.KEY_CHECK_SECONDS
    return True
