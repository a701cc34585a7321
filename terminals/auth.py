"""API-key authentication for DRF: `Authorization: Api-Key <key>` or `X-API-Key: <key>`."""

from __future__ import annotations

import logging
import time

from django.db import DatabaseError
from rest_framework import authentication, exceptions

from .models import ApiKey, hash_key

logger = logging.getLogger(__name__)
SCHEMES = ("api-key", "bearer")
HOW_TO_SEND = "send it in a header: `X-API-Key: <key>` or `Authorization: Bearer <key>` (or `Api-Key <key>`)"
# Query parameters clients try for a key; the service never reads a key from a URL, which logs and histories keep.
KEY_PARAMETERS = ("api_key", "apikey", "key", "token", "access_token")
KEY_SHAPE = "tk_…"  # how a message shows a key: its form, never the caller's own


def missing_key_message(request) -> str:
    """Why a request without a usable key header was refused, and how to send the key."""
    if any(name in request.GET for name in KEY_PARAMETERS):
        return f"No API key: a key in the URL is not read (URLs end up in logs); {HOW_TO_SEND}"
    return missing_key_problem(request.META.get("HTTP_AUTHORIZATION", ""))


def missing_key_problem(authorization: str) -> str:
    """Why headers that carry no usable key were refused, and how to send the key (REST and MCP alike).
    Nothing of the header is quoted back: a client that put the bare key there would see part of it echoed."""
    scheme, _, value = authorization.strip().partition(" ")
    if scheme and not value.strip():
        return ("No API key: the Authorization header holds no scheme before the key; send "
                f"`Authorization: Bearer {KEY_SHAPE}` or `X-API-Key: {KEY_SHAPE}`")
    if scheme and scheme.lower() not in SCHEMES:
        return f"No API key: the Authorization header's scheme is not one this service takes; {HOW_TO_SEND}"
    return f"No API key: {HOW_TO_SEND}"


def misplaced_scheme(key: str) -> str | None:
    """What to send instead when X-API-Key carried a scheme before the key ("Bearer tk_..."); None otherwise."""
    scheme, _, value = key.partition(" ")
    if scheme.lower() in SCHEMES and value.strip():
        return (f"Unknown API key: the X-API-Key header takes the key alone, without {scheme.title()!r}; send "
                f"`X-API-Key: {KEY_SHAPE}` or `Authorization: Bearer {KEY_SHAPE}`")
    return None


def presented_key(request) -> str | None:
    """Returns the key the request carries, or None when it carries none."""
    return key_from_headers(request.META.get("HTTP_X_API_KEY", ""), request.META.get("HTTP_AUTHORIZATION", ""))


def key_from_headers(x_api_key: str, authorization: str) -> str | None:
    """The key in these header values (X-API-Key first, then Authorization: Bearer or Api-Key), or None."""
    if x_api_key.strip():
        return x_api_key.strip()
    scheme, _, value = authorization.partition(" ")
    if scheme.lower() in SCHEMES and value.strip():
        return value.strip()
    return None


# A key found usable is taken as usable for this long by the process that checked it, without asking the database
# again (the lookup was a tenth of a poll's CPU). So a revocation, or a user disabled, takes effect in every
# process within this bound (SECURITY.md), and at once in the process that did it (forget_checked_keys).
KEY_CHECK_SECONDS = 1.0
_CHECKED_MAX = 10_000
_checked: dict[str, tuple[float, ApiKey]] = {}  # the key's SHA-256 -> (when it was found usable, its record)


def forget_checked_keys() -> None:
    """Makes this process check every key against the database again, now (a key revoked, a user disabled)."""
    _checked.clear()


def usable_key(key: str) -> ApiKey:
    """The key's record, its use noted; AuthenticationFailed saying why when it is unknown, revoked, expired or its
    user disabled. Every interface that takes keys (REST, MCP) checks them here."""
    digest = hash_key(key)
    checked = _checked.get(digest)
    if checked is not None and time.monotonic() - checked[0] < KEY_CHECK_SECONDS and checked[1].is_usable():
        record = checked[1]
    else:
        record = _looked_up(key)
        if len(_checked) >= _CHECKED_MAX:
            _checked.clear()
        _checked[digest] = (time.monotonic(), record)
    try:
        record.note_use()
    except DatabaseError as error:  # a busy database must not refuse a request over a bookkeeping write
        logger.warning("could not record the use of key %s: %s", record.display_prefix, error)
    return record


def _looked_up(key: str) -> ApiKey:
    record = ApiKey.objects.for_key(key)
    if record is None:
        raise exceptions.AuthenticationFailed(misplaced_scheme(key) or "Unknown API key")
    if record.revoked_at is not None:
        raise exceptions.AuthenticationFailed("This API key was revoked")
    if not record.is_usable():
        raise exceptions.AuthenticationFailed("This API key has expired")
    if not record.user.is_active:
        raise exceptions.AuthenticationFailed("This API key's user is disabled")
    return record


class ApiKeyAuthentication(authentication.BaseAuthentication):
    """None without a key; AuthenticationFailed for a bad one; (user, ApiKey) for a good one."""

    def authenticate(self, request):
        key = presented_key(request)
        if key is None:
            return None
        record = usable_key(key)
        return record.user, record

    def authenticate_header(self, request) -> str:
        return "Api-Key"
