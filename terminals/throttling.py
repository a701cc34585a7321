"""Per-key request throttles, counted in Django's cache (Redis in split mode, so every web process shares them).

DRF throttling is approximate under concurrency; hard limits (terminals per
user, bytes per buffer) are enforced by the worker, not here.

When the cache cannot be reached (Redis down or frozen), the throttle fails
open: the request goes on uncounted. The throttle is a soft limit, and the same
outage takes the channel layer down, so every request that needs a worker
answers 503 WORKER_UNAVAILABLE anyway; what still works (the list, a terminal's
record, the audit trail, health) reads only the database. Failing closed would
turn a cache outage into a whole-API outage and protect nothing. After a
failure the cache is skipped for CACHE_RETRY_SECONDS, so a frozen Redis costs
one socket timeout per web process and period, not one per request.
"""

from __future__ import annotations

import logging
import time
from types import SimpleNamespace

from django.conf import settings
from rest_framework.throttling import SimpleRateThrottle

from .exceptions import RateLimited

if settings.REDIS_URL:
    from redis.exceptions import RedisError
else:  # nothing raises Redis errors without Redis, and importing the client costs 5 MB of memory
    RedisError = OSError

logger = logging.getLogger(__name__)

CACHE_ERRORS = (RedisError, OSError)  # redis-py's ConnectionError and TimeoutError are RedisErrors
CACHE_RETRY_SECONDS = 5.0
_cache_skipped_until = 0.0


class ApiKeyRateThrottle(SimpleRateThrottle):
    """Counts every request of one API key."""

    scope = "api"

    def allow_request(self, request, view) -> bool:
        global _cache_skipped_until
        if time.monotonic() < _cache_skipped_until:
            return True
        try:
            return super().allow_request(request, view)
        except CACHE_ERRORS as error:
            _cache_skipped_until = time.monotonic() + CACHE_RETRY_SECONDS
            logger.warning("throttle cache unreachable (%s: %s): requests pass uncounted for %g s",
                           type(error).__name__, error, CACHE_RETRY_SECONDS)
            return True

    def get_rate(self) -> str:
        # Read on every request rather than once at import, so a settings change applies.
        return settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"][self.scope]

    def get_cache_key(self, request, view) -> str | None:
        api_key = getattr(request, "auth", None)
        if api_key is not None:
            return self.cache_format % {"scope": self.scope, "ident": api_key.pk}
        user = getattr(request, "user", None)
        if user is not None and user.is_authenticated:  # the dashboard: a logged-in user without a key
            return self.cache_format % {"scope": self.scope, "ident": f"user-{user.pk}"}
        return None  # unauthenticated requests are refused before throttling


class CreateRateThrottle(ApiKeyRateThrottle):
    """Counts terminal creations of one API key, which cost a process each."""

    scope = "create"

    def allow_request(self, request, view) -> bool:
        if getattr(view, "action", None) != "create":
            return True
        return self.allow_creation(request)

    def allow_creation(self, request) -> bool:
        """Counts one creation of the request's key, also for creations not made by the REST view (ACP)."""
        return super().allow_request(request, None)


def count_creation(actor) -> None:
    """Counts one terminal creation of the actor's key (or, in the dashboard, its user) against the creation
    rate, for the interfaces that create terminals outside the REST view; RateLimited when over it."""
    throttle = CreateRateThrottle()
    if not throttle.allow_creation(SimpleNamespace(user=actor.user, auth=actor.api_key)):
        wait = max(1, round(throttle.wait() or 1))
        raise RateLimited(f"Too many terminals created with this key; retry in {wait} s", {"retryAfter": wait})
