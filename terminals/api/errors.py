"""Errors in the API's error envelope: DRF's exception handler (every refusal of a DRF view, audited) and Django's
own error pages (unknown URL, server error, ...)."""

import logging

from django.core.exceptions import DisallowedHost
from django.http import JsonResponse
from django.urls import Resolver404, resolve
from rest_framework import exceptions
from rest_framework.response import Response

from ..audit import audit_refusal
from ..auth import missing_key_message
from ..exceptions import (
    AuditUnavailable,
    DatabaseUnavailable,
    RateLimited,
    Unauthorized,
    WorkerUnavailable,
    as_service_error,
    envelope,
    retry_after,
)
from ..plumbing.log_filters import log_refusal

logger = logging.getLogger(__name__)


def exception_handler(exc: Exception, context: dict) -> Response:
    """DRF's EXCEPTION_HANDLER: renders the envelope and records the refusal in the audit trail."""
    error = as_service_error(exc)
    request = context.get("request")
    if isinstance(exc, exceptions.NotAuthenticated) and request is not None:
        error = Unauthorized(missing_key_message(request))
    headers = {}
    wait = getattr(error, "wait", None)
    if isinstance(error, (RateLimited, DatabaseUnavailable, WorkerUnavailable)) and wait is not None:
        headers["Retry-After"] = retry_after(wait)
    if isinstance(error, Unauthorized):
        headers["WWW-Authenticate"] = "Api-Key"
    if request is not None and error.status_code < 500:  # a server error is logged with its traceback instead
        log_refusal(request, error.status_code, error.default_code)
    # Its refusal could not be written either.
    if request is not None and not isinstance(error, AuditUnavailable):
        try:
            audit_refusal(request, context.get("view"), error)
        except Exception:  # noqa: BLE001 - the refusal is still answered when the audit cannot be written
            logger.exception("auditing a refused request failed")
    response = Response(envelope(error.default_code, error.message, error.details), status=error.status_code,
                        headers=headers)
    if isinstance(error, DatabaseUnavailable):
        response._has_been_logged = True  # the outage is logged once (outage.py), not each request by django.request
    return response



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
    by django.request (the outage is logged once, terminals/plumbing/outage.py)."""
    response = JsonResponse(envelope(error.default_code, error.message, error.details), status=error.status_code)
    response["Retry-After"] = retry_after(error.wait)
    response._has_been_logged = True
    return response
