"""Typed errors, one base: each carries the service's error code, its message and details (docs/api.md#error-codes)."""

from __future__ import annotations

from typing import Any, Dict, Optional


class TerminalsError(Exception):
    """Any refusal or failure of the service, or of reaching it. `code` is the service's error code."""

    def __init__(self, message: str, *, code: str = "ERROR", status: Optional[int] = None,
                 details: Optional[Dict[str, Any]] = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.status = status
        self.details: Dict[str, Any] = details or {}

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


class AuthError(TerminalsError):
    """UNAUTHORIZED (no usable key) or FORBIDDEN (a valid key that may not do this)."""


class NotFound(TerminalsError):
    """TERMINAL_NOT_FOUND (unknown, or another user's), COMMAND_NOT_FOUND, RECORDING_NOT_FOUND, NOT_FOUND."""


class InvalidInput(TerminalsError):
    """INVALID_INPUT: `details` names the fields and their problems."""


class Busy(TerminalsError):
    """TERMINAL_BUSY: another command runs, or a program holds the foreground; nothing was typed."""


class TerminalInactive(TerminalsError):
    """TERMINAL_INACTIVE: the terminal has ended (its output may still be readable)."""


class LimitReached(TerminalsError):
    """LIMIT_REACHED: too many active terminals or live connections; end some first."""


class RateLimited(TerminalsError):
    """RATE_LIMITED: the key went over its rate. `retry_after` is the seconds the service said to wait."""

    def __init__(self, message: str, *, retry_after: Optional[float] = None, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.retry_after = retry_after


class ServiceUnavailable(TerminalsError):
    """The service could not be reached, or answered 503 (WORKER_UNAVAILABLE, DATABASE_UNAVAILABLE,
    AUDIT_UNAVAILABLE). `retry_after` is the service's Retry-After in seconds, when it gave one."""

    def __init__(self, message: str, *, retry_after: Optional[float] = None, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.retry_after = retry_after


class ServerError(TerminalsError):
    """Another failure of the service: INTERNAL_ERROR, WRITE_FAILED, KILL_FAILED, READ_FAILED."""


class Timeout(TerminalsError):
    """A wait ran out. `which` names the timeout: "run", "wait", "wait_for", "wait_command" or "request"."""

    def __init__(self, message: str, *, which: str, command_id: Optional[str] = None, **kwargs: Any) -> None:
        kwargs.setdefault("code", "TIMEOUT")
        super().__init__(message, **kwargs)
        self.which = which
        self.command_id = command_id


class CommandFailed(TerminalsError):
    """Raised by `CommandResult.check()` for a non-zero exit; `result` is the command's whole result."""

    def __init__(self, message: str, *, result: Any, **kwargs: Any) -> None:
        kwargs.setdefault("code", "COMMAND_FAILED")
        super().__init__(message, **kwargs)
        self.result = result


_BY_CODE = {
    "UNAUTHORIZED": AuthError,
    "FORBIDDEN": AuthError,
    "TERMINAL_NOT_FOUND": NotFound,
    "COMMAND_NOT_FOUND": NotFound,
    "RECORDING_NOT_FOUND": NotFound,
    "NOT_FOUND": NotFound,
    "INVALID_INPUT": InvalidInput,
    "METHOD_NOT_ALLOWED": InvalidInput,
    "TERMINAL_BUSY": Busy,
    "TERMINAL_INACTIVE": TerminalInactive,
    "LIMIT_REACHED": LimitReached,
}


def _seconds(value: Any) -> Optional[float]:
    try:
        return float(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def from_response(status: int, body: Any, retry_after_header: Optional[str]) -> TerminalsError:
    """The typed error for a failed answer: by the envelope's code when there is one, else by HTTP status."""
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        error = {"code": f"HTTP_{status}", "message": f"the service answered HTTP {status} without an error envelope"}
    code = str(error.get("code") or f"HTTP_{status}")
    message = str(error.get("message") or code)
    found = error.get("details")
    details: Dict[str, Any] = found if isinstance(found, dict) else {}
    common: Dict[str, Any] = {"code": code, "status": status, "details": details}
    retry_after = _seconds(retry_after_header)
    if retry_after is None:
        retry_after = _seconds(details.get("retryAfter"))
    if code == "RATE_LIMITED":
        return RateLimited(message, retry_after=retry_after, **common)
    if status == 503:
        return ServiceUnavailable(message, retry_after=retry_after, **common)
    if code in _BY_CODE:
        return _BY_CODE[code](message, **common)
    if status == 401 or status == 403:
        return AuthError(message, **common)
    if status == 404:
        return NotFound(message, **common)
    if status in (400, 413):
        return InvalidInput(message, **common)
    return ServerError(message, **common)
