"""API-key authentication for DRF: `Authorization: Api-Key <key>` or `X-API-Key: <key>`."""

from __future__ import annotations

import logging

from django.db import DatabaseError
from rest_framework import authentication, exceptions

from .models import ApiKey

logger = logging.getLogger(__name__)
SCHEMES = ("api-key", "bearer")
HOW_TO_SEND = "send it in a header: `X-API-Key: <key>` or `Authorization: Bearer <key>` (or `Api-Key <key>`)"
# Query parameters clients try for a key; the service never reads a key from a URL, which logs and histories keep.
KEY_PARAMETERS = ("api_key", "apikey", "key", "token", "access_token")


def missing_key_message(request) -> str:
    """Why a request without a usable key header was refused, and how to send the key."""
    scheme = request.META.get("HTTP_AUTHORIZATION", "").partition(" ")[0]
    if scheme and scheme.lower() not in SCHEMES:
        # The scheme is not quoted back: a client that put the bare key there would see part of it echoed.
        return f"No API key: the Authorization header's scheme is not one this service takes; {HOW_TO_SEND}"
    if any(name in request.GET for name in KEY_PARAMETERS):
        return f"No API key: a key in the URL is not read (URLs end up in logs); {HOW_TO_SEND}"
    return f"No API key: {HOW_TO_SEND}"


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


def usable_key(key: str) -> ApiKey:
    """The key's record, its use noted; AuthenticationFailed saying why when it is unknown, revoked, expired or its
    user disabled. Every interface that takes keys (REST, MCP) checks them here."""
    record = ApiKey.objects.for_key(key)
    if record is None:
        raise exceptions.AuthenticationFailed("Unknown API key")
    if record.revoked_at is not None:
        raise exceptions.AuthenticationFailed("This API key was revoked")
    if not record.is_usable():
        raise exceptions.AuthenticationFailed("This API key has expired")
    if not record.user.is_active:
        raise exceptions.AuthenticationFailed("This API key's user is disabled")
    try:
        record.note_use()
    except DatabaseError as error:  # a busy database must not refuse a request over a bookkeeping write
        logger.warning("could not record the use of key %s: %s", record.display_prefix, error)
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
