"""Django's own error pages (unknown URL, server error, ...) in the API's error envelope."""

from django.core.exceptions import DisallowedHost
from django.http import JsonResponse
from django.urls import Resolver404, resolve

from ..exceptions import DatabaseUnavailable, envelope, retry_after
from ..log_filters import log_refusal


def _refused(request, status: int, code: str, message: str, details: dict | None = None) -> JsonResponse:
    log_refusal(request, status, code)
    return JsonResponse(envelope(code, message, details), status=status)


def bad_request(request, exception=None):
    if isinstance(exception, DisallowedHost):
        # The Host header is not one this service answers to: say which setting decides.
        # The names it does answer to are not listed: they are the operator's to know, not any client's.
        return _refused(request, 400, "INVALID_INPUT", "This service does not answer to that host name; its "
                        "operator can add it to ALLOWED_HOSTS (environment variable ALLOWED_HOSTS, comma-separated)")
    return _refused(request, 400, "INVALID_INPUT", "Bad request")


def forbidden(request, exception=None):
    return _refused(request, 403, "FORBIDDEN", "Not allowed")


def not_found(request, exception=None):
    return _refused(request, 404, "NOT_FOUND", f"No endpoint at {request.path}{_what_to_try(request.path)}")


def _what_to_try(path: str) -> str:
    """A hint for a near miss: the same path without its trailing slash, or where the endpoints are listed."""
    if path.endswith("/") and len(path) > 1 and _exists(path.rstrip("/")):
        return f"; use {path.rstrip('/')} (no trailing slash)"
    if path.startswith("/api/"):
        return "; the endpoints are listed at /api/docs/"
    return ""


def _exists(path: str) -> bool:
    try:
        resolve(path)
    except Resolver404:
        return False
    return True


def server_error(request):
    return JsonResponse(envelope("INTERNAL_ERROR", "Internal error"), status=500)


def database_unavailable(request, error: DatabaseUnavailable) -> JsonResponse:
    """A request that failed outside DRF's views because the database is away: 503 with Retry-After, not logged
    by django.request (the outage is logged once, terminals/outage.py)."""
    response = JsonResponse(envelope(error.default_code, error.message, error.details), status=error.status_code)
    response["Retry-After"] = retry_after(error.wait)
    response._has_been_logged = True
    return response
