"""Per-key request throttles, counted in Django's cache (Redis in split mode, so every web process shares them).

A key's rate holds over a sliding window, as with DRF's SimpleRateThrottle,
which keeps the time of every request in the window and reads and writes
that list whole on every request: at a rate of 1,000,000 a minute, a quarter
of a megabyte pickled (and, in split mode, sent to Redis and back) per
request, and two requests at the same moment could both read the list
before either wrote it, and be counted once. Here the window is cut into
SLOTS slots and a key keeps a count per slot: at most SLOTS numbers,
whatever the rate. A request is counted and the counts read back in one
atomic step (shared_cache.py; one round trip to Redis), so requests at the
same moment through any web process are each counted, and no more than the
rate pass. One over the rate is refused and its count taken back; until
then it may refuse a request arriving at the same instant. A request leaves
the window when its slot's start is a whole window old, up to one slot
(0.6 s of a minute) earlier than its own time would. Hard limits (terminals
per user, bytes per buffer) are enforced by the worker, not here.

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
SLOTS = 100  # a key's window in slots, each counted as one number
_cache_skipped_until = 0.0


class ApiKeyRateThrottle(SimpleRateThrottle):
    """Counts every request of one API key."""

    scope = "api"
    cache_format = "throttle_%(scope)s_%(ident)s_slots"  # not the key of DRF's list of times a cache may hold
    _wait: float | None = None

    def allow_request(self, request, view) -> bool:
        global _cache_skipped_until
        if time.monotonic() < _cache_skipped_until:
            return True
        try:
            return self._counted(request, view)
        except CACHE_ERRORS as error:
            _cache_skipped_until = time.monotonic() + CACHE_RETRY_SECONDS
            logger.warning("throttle cache unreachable (%s: %s): requests pass uncounted for %g s",
                           type(error).__name__, error, CACHE_RETRY_SECONDS)
            return True

    def _counted(self, request, view) -> bool:
        if self.rate is None:
            return True
        key = self.get_cache_key(request, view)
        if key is None:
            return True
        now = self.timer()
        slot_seconds = self.duration / SLOTS
        slot = int(now // slot_seconds)
        oldest = slot - SLOTS + 1
        counts = self.cache.count_in_slot(key, slot, oldest, self.duration)
        if sum(counts.values()) <= self.num_requests:
            return True
        self.cache.count_in_slot(key, slot, oldest, self.duration, add=-1)  # a refused request is not counted
        counts[slot] -= 1
        self._wait = self._seconds_until_room(counts, now, slot_seconds)
        return False

    def _seconds_until_room(self, counts: dict[int, int], now: float, slot_seconds: float) -> float:
        """Until enough of the oldest slots have left the window to leave room for one more request."""
        held = sum(counts.values())
        for slot in sorted(counts):
            held -= counts[slot]
            if held < self.num_requests:
                return max(0.0, (slot + SLOTS) * slot_seconds - now)
        return float(self.duration)  # a rate of 0: never

    def wait(self) -> float | None:
        return self._wait

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
