"""JSON-RPC 2.0 itself, for the ACP endpoint: error codes and objects, a request's id, a response, and the safe
rendering of a method or id that the audit row of every call stores."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from .. import json_input
from ..exceptions import ServiceError
from ..redaction import redact

PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS, INTERNAL_ERROR = -32700, -32600, -32601, -32602, -32603
SERVER_ERROR = -32000
MESSAGES = {
    PARSE_ERROR: "Parse error",
    INVALID_REQUEST: "Invalid Request",
    METHOD_NOT_FOUND: "Method not found",
    INVALID_PARAMS: "Invalid params",
    INTERNAL_ERROR: "Internal error",
    SERVER_ERROR: "Server error",
}
# What the audit trail records as the outcome of a call refused before it reached the service.
OUTCOMES = {
    PARSE_ERROR: "PARSE_ERROR",
    INVALID_REQUEST: "INVALID_REQUEST",
    METHOD_NOT_FOUND: "METHOD_NOT_FOUND",
    INVALID_PARAMS: "INVALID_PARAMS",
    INTERNAL_ERROR: "INTERNAL_ERROR",
    SERVER_ERROR: "SERVER_ERROR",
}
SMALLEST_ID, LARGEST_ID = -(2**63), 2**63 - 1  # RequestId is an int64
AUDIT_TEXT = 200  # characters of a method or id kept in the audit row
NO_ID = object()  # a request without "id" is a notification and gets no response


class RpcError(Exception):
    """A JSON-RPC error object for the call being answered."""

    def __init__(self, code: int, data: dict | None = None, outcome: str | None = None) -> None:
        super().__init__(MESSAGES[code])
        self.code = code
        self.data = data
        self.outcome = outcome or OUTCOMES[code]

    @classmethod
    def from_service(cls, error: ServiceError) -> RpcError:
        """The service's error as a JSON-RPC server error carrying the REST API's code."""
        data = {"code": error.default_code, "message": error.message, "details": error.details}
        return cls(SERVER_ERROR, data, error.default_code)

    def as_dict(self) -> dict:
        error = {"code": self.code, "message": MESSAGES[self.code]}
        if self.data is not None:
            error["data"] = self.data
        return error


@dataclass(frozen=True)
class Call:
    """One call as the audit trail records it: its method, id, outcome and the terminal it named."""

    method: str | None
    id: str | int | float | None
    outcome: str
    terminal_id: uuid.UUID | None


def parse_body(body: bytes):
    """The JSON value of a request body; raises RpcError (PARSE_ERROR) saying what is wrong with it."""
    try:
        return json_input.loads(body)
    except json_input.UnkeepableJson as problem:
        raise RpcError(PARSE_ERROR, {"message": str(problem)}) from None


def request_id_of(request):
    """The request's id, NO_ID for a notification, or None when the id itself is unusable."""
    if not isinstance(request, dict) or "id" not in request:
        return NO_ID
    request_id = request["id"]
    return request_id if _is_request_id(request_id) else None


def _is_request_id(value) -> bool:
    """What the ACP schema's RequestId allows: null, a string or an int64 (never a float, nor a bool)."""
    if value is None or isinstance(value, str):
        return True
    return isinstance(value, int) and not isinstance(value, bool) and SMALLEST_ID <= value <= LARGEST_ID


def is_notification(request, error: RpcError) -> bool:
    # A request too malformed to be a notification is answered even without an id.
    return isinstance(request, dict) and "id" not in request and error.code != INVALID_REQUEST


def audited_method(method):
    return _safe_text(method) if isinstance(method, str) else None


def audited_id(request_id):
    if request_id is NO_ID:
        return None
    return _safe_text(request_id) if isinstance(request_id, str) else request_id


def _safe_text(text: str) -> str:
    """Text any database's JSON column takes: keys masked, cut short, NUL and lone surrogates replaced."""
    text = redact(text[: AUDIT_TEXT * 2])[:AUDIT_TEXT]
    text = text.encode("utf-8", errors="replace").decode("utf-8").replace("\x00", "\ufffd")
    return text


def response(request_id, *, result=None, error: RpcError | None = None) -> dict:
    response = {"jsonrpc": "2.0", "id": None if request_id is NO_ID else request_id}
    if error is not None:
        response["error"] = error.as_dict()
    else:
        response["result"] = result
    return response

