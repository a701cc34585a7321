"""The service's errors and the one handler that renders every error in the success/error envelope."""

from __future__ import annotations

import logging

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import Http404
from drf_spectacular.utils import inline_serializer
from rest_framework import exceptions, serializers, status

from .plumbing import outage
from .redaction import redact, redact_data

logger = logging.getLogger(__name__)
# What a client that sent a body in another form (or with no Content-Type at all) should do instead.
NO_JSON = 'send the body as JSON with the header "Content-Type: application/json"'


class ServiceError(exceptions.APIException):
    """Base of every error the API reports; its default_code is the error code clients see."""

    status_code = status.HTTP_500_INTERNAL_SERVER_ERROR
    default_code = "INTERNAL_ERROR"
    default_detail = "Internal error"

    def __init__(self, message: str | None = None, details: dict | None = None) -> None:
        # A message can quote what the client sent (a terminal id, say); a key sent in its place is masked.
        message = redact(message or self.default_detail)
        super().__init__(message, self.default_code)
        self.message = message
        self.details = redact_data(details or {})


class TerminalNotFound(ServiceError):
    """No terminal with that id is visible to the caller."""

    status_code = status.HTTP_404_NOT_FOUND
    default_code = "TERMINAL_NOT_FOUND"
    default_detail = "Terminal not found"


class TerminalInactive(ServiceError):
    """The terminal has ended or was released."""

    status_code = status.HTTP_409_CONFLICT
    default_code = "TERMINAL_INACTIVE"
    default_detail = "Terminal is not active"


def terminal_inactive(terminal_id, status: str | None = None, *, released: bool) -> TerminalInactive:
    """The one 409 for a terminal that runs no more, whichever request or interface found it: its status (None when
    only its worker's answer told), and whether its output can still be read."""
    head = f"Terminal {terminal_id} is {status}" if status and status != "active" else f"Terminal {terminal_id} has ended"
    held = "its output is no longer held" if released else "its output can still be read"
    return TerminalInactive(f"{head} and runs no more; {held}. Create a new terminal to run more.",
                            {"status": status} if status else {})


class RequestTooLarge(ServiceError):
    """The request body is larger than the service accepts."""

    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_code = "INVALID_INPUT"
    default_detail = "Request body too large"


# The errors about a terminal that its worker reports, each defined once, without Django, in runtime/errors.py; the
# API answers each code with this status. 409 where the terminal's state refuses the request and the service is fine.
REFUSAL_STATUS = {
    "TERMINAL_BUSY": status.HTTP_409_CONFLICT,  # a command already holds the foreground
    "COMMAND_NOT_FOUND": status.HTTP_404_NOT_FOUND,
    "RECORDING_NOT_FOUND": status.HTTP_404_NOT_FOUND,  # not recorded, or its recording is gone
    "WRITE_FAILED": status.HTTP_409_CONFLICT,  # its input queue is full, or nothing reads it any more
    "READ_FAILED": status.HTTP_500_INTERNAL_SERVER_ERROR,  # part of the contract; nothing raises it at present
    "KILL_FAILED": status.HTTP_500_INTERNAL_SERVER_ERROR,  # its processes could not be signalled
}


class TerminalRefusal(ServiceError):
    """A refusal about a terminal whose code runtime/errors.py defines (a worker reported it, or the web side found
    the same), answered with the status REFUSAL_STATUS gives that code."""

    def __init__(self, code: str, message: str, details: dict | None = None) -> None:
        self.default_code = code
        self.status_code = REFUSAL_STATUS[code]
        super().__init__(message, details)


def recording_not_found(message: str, details: dict | None = None) -> TerminalRefusal:
    return TerminalRefusal("RECORDING_NOT_FOUND", message, details)


class InvalidInput(ServiceError):
    """A parameter is missing, malformed or out of bounds."""

    status_code = status.HTTP_400_BAD_REQUEST
    default_code = "INVALID_INPUT"
    default_detail = "Invalid input"


class InternalError(ServiceError):
    """Something broke that the caller cannot fix."""


class Unauthorized(ServiceError):
    """No API key, or one that is unknown, revoked or expired."""

    status_code = status.HTTP_401_UNAUTHORIZED
    default_code = "UNAUTHORIZED"
    default_detail = "A valid API key is required"


class Forbidden(ServiceError):
    """The key is good but may not do this."""

    status_code = status.HTTP_403_FORBIDDEN
    default_code = "FORBIDDEN"
    default_detail = "Not allowed"


class RateLimited(ServiceError):
    """Too many requests for this key; Retry-After says when to come back."""

    status_code = status.HTTP_429_TOO_MANY_REQUESTS
    default_code = "RATE_LIMITED"
    default_detail = "Too many requests"


class LimitReached(ServiceError):
    """A hard limit on terminals was reached."""

    status_code = status.HTTP_429_TOO_MANY_REQUESTS
    default_code = "LIMIT_REACHED"
    default_detail = "Terminal limit reached"


class WorkerUnavailable(ServiceError):
    """No terminal worker answered in time."""

    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_code = "WORKER_UNAVAILABLE"
    default_detail = "The terminal worker did not answer in time"
    wait = 1.0  # Retry-After: a worker restarting under its keeper answers again within about a second


class AuditUnavailable(ServiceError):
    """The audit trail could not be written (database locked past its busy timeout, disk error...): nothing was done."""

    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_code = "AUDIT_UNAVAILABLE"
    default_detail = "The audit trail cannot be written at the moment; the request was not carried out"


class DatabaseUnavailable(AuditUnavailable):
    """The database cannot be reached (stopped, restarting, failing over, the network to it down): nothing that
    needs it was done. Retry-After says when to try again (outage.py logs the outage, once). One way the audit
    trail cannot be written, so whatever refuses an action when its row cannot be written refuses it too."""

    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_code = "DATABASE_UNAVAILABLE"
    default_detail = ("The database cannot be reached at the moment; nothing was done. Retry after the seconds "
                      "Retry-After says: the service answers again as soon as its database is back")
    RETRY_SECONDS = 5  # about a PostgreSQL restart's length: sooner would mostly be answered the same

    def __init__(self, message: str | None = None, details: dict | None = None) -> None:
        super().__init__(message, {"retryAfter": self.RETRY_SECONDS, **(details or {})})
        self.wait = self.RETRY_SECONDS


class NotFound(ServiceError):
    """No such endpoint."""

    status_code = status.HTTP_404_NOT_FOUND
    default_code = "NOT_FOUND"
    default_detail = "Not found"


class MethodNotAllowed(ServiceError):
    """The endpoint exists but not with that HTTP method."""

    status_code = status.HTTP_405_METHOD_NOT_ALLOWED
    default_code = "METHOD_NOT_ALLOWED"
    default_detail = "Method not allowed"


BY_CODE: dict[str, type[ServiceError]] = {
    cls.default_code: cls for cls in ServiceError.__subclasses__() + [ServiceError, DatabaseUnavailable]
    if cls is not TerminalRefusal  # its codes are REFUSAL_STATUS's
}


def from_code(code: str, message: str, details: dict | None = None) -> ServiceError:
    """Rebuilds the error a worker reported by its code."""
    if code in REFUSAL_STATUS:
        return TerminalRefusal(code, message, details)
    return BY_CODE.get(code, InternalError)(message, details)


def envelope(code: str, message: str, details: dict | None = None) -> dict:
    # An error can quote what the client sent (a path, a field); a key sent in the wrong place is not echoed.
    details = redact_data(details or {})
    return {"success": False, "error": {"code": code, "message": redact(message), "details": details}}


def as_service_error(exc: Exception) -> ServiceError:
    """Translates DRF's and Django's exceptions into the service's own."""
    if isinstance(exc, ServiceError):
        return exc
    unavailable = database_unavailable(exc)
    if unavailable is not None:
        return unavailable
    if isinstance(exc, exceptions.ValidationError):
        return InvalidInput(_validation_message(exc.detail), {"fields": exc.detail})
    if isinstance(exc, exceptions.ParseError):
        return InvalidInput(f"Malformed request body: {exc.detail}")
    if isinstance(exc, RecursionError):
        return InvalidInput("Malformed request body: nested too deeply")
    if isinstance(exc, RequestDataTooBig):
        return RequestTooLarge(f"Request body larger than {settings.DATA_UPLOAD_MAX_MEMORY_SIZE} bytes")
    if isinstance(exc, exceptions.UnsupportedMediaType):
        # DRF's detail is 'Unsupported media type "text/plain" in request.': keep what was sent, add what to send.
        return InvalidInput(f"{str(exc.detail).removesuffix(' in request.')}; {NO_JSON}")
    if isinstance(exc, (exceptions.NotAuthenticated, exceptions.AuthenticationFailed)):
        return Unauthorized(str(exc.detail))
    if isinstance(exc, exceptions.PermissionDenied):
        return Forbidden(str(exc.detail))
    if isinstance(exc, exceptions.Throttled):
        error = RateLimited(f"Too many requests; retry in {exc.wait or 1:.0f} seconds", {"retryAfter": exc.wait})
        error.wait = exc.wait
        return error
    if isinstance(exc, exceptions.MethodNotAllowed):
        return MethodNotAllowed(str(exc.detail))
    if isinstance(exc, (exceptions.NotFound, Http404)):
        return NotFound()
    logger.exception("unhandled error", exc_info=exc)
    return InternalError()


def database_unavailable(exc: BaseException) -> DatabaseUnavailable | None:
    """DATABASE_UNAVAILABLE for a database out of reach (noted, so the outage is logged once), else None. Every
    interface's error mapping comes through here (as_service_error), and so do the places that catch a
    DatabaseError to say something of their own (audit rows, the up-front write check)."""
    if not outage.is_unavailable(exc):
        return None
    outage.noticed(exc)
    return DatabaseUnavailable()


def _validation_message(detail) -> str:
    """ "field: first problem; other: ..." from DRF's nested error details."""
    if isinstance(detail, dict):
        parts = [f"{field}: {_first_problem(problems)}" for field, problems in detail.items()]
        return "; ".join(parts) or "Invalid input"
    return _first_problem(detail) or "Invalid input"


def _first_problem(problems) -> str:
    while isinstance(problems, (list, dict)) and problems:
        problems = problems[0] if isinstance(problems, list) else next(iter(problems.values()))
    return str(problems)


def retry_after(wait: float) -> str:
    """A Retry-After header's whole seconds for a throttle's wait, never less than one."""
    return str(max(1, int(wait + 0.999)))


class ErrorSerializer(serializers.Serializer):
    """The error envelope's error, for the OpenAPI schema of every interface that answers with it."""

    code = serializers.CharField()
    message = serializers.CharField()
    details = serializers.DictField()


ErrorEnvelope = inline_serializer(
    name="ErrorEnvelope", fields={"success": serializers.BooleanField(default=False), "error": ErrorSerializer()}
)
