"""Per-key request throttles, counted in Django's cache (Redis in split mode, so every web process shares them).

DRF throttling is approximate under concurrency; hard limits (terminals per
user, bytes per buffer) are enforced by the worker, not here.
"""

from __future__ import annotations

from django.conf import settings
from rest_framework.throttling import SimpleRateThrottle


class ApiKeyRateThrottle(SimpleRateThrottle):
    """Counts every request of one API key."""

    scope = "api"

    def get_rate(self) -> str:
        # Read on every request rather than once at import, so a settings change applies.
        return settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"][self.scope]

    def get_cache_key(self, request, view) -> str | None:
        api_key = getattr(request, "auth", None)
        if api_key is None:
            return None  # unauthenticated requests are refused before throttling
        return self.cache_format % {"scope": self.scope, "ident": api_key.pk}


class CreateRateThrottle(ApiKeyRateThrottle):
    """Counts terminal creations of one API key, which cost a process each."""

    scope = "create"

    def allow_request(self, request, view) -> bool:
        if getattr(view, "action", None) != "create":
            return True
        return super().allow_request(request, view)
