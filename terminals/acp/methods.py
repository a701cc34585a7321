"""The Agent Client Protocol's terminal methods as JSON-RPC 2.0: one request or a batch in, its responses out.

Decisions the protocol leaves open:

- Calls of a batch run one after another, in order; one failing call never affects the others.
  A batch holds at most MAX_BATCH calls, since the request throttle counts a batch once.
- params is an object (by name). Omitted or null params count as {}; an array is Invalid params.
  A parameter the method's schema does not name is Invalid params (-32602), its data naming it and the parameter
  probably meant: a misspelt option (cwdir) must not look obeyed. ACP reserves the root names for the protocol and
  puts an implementation's own in _meta, which every method takes. An optional parameter given as null is ignored.
- sessionId is a non-empty string of at most 200 characters. A terminal answers only to the
  sessionId it was created with; any other answers exactly like an unknown terminal.
- terminal/wait_for_exit waits at most settings.TERMINALS["MAX_WAIT_MS"]; after that it answers
  -32000 with data.code "TIMEOUT" and the terminal keeps running.
- Errors of the service answer -32000 "Server error" with data {code, message, details},
  code being the REST API's error code (TERMINAL_NOT_FOUND, TERMINAL_INACTIVE, LIMIT_REACHED, ...).
  Throttling is one of them: RATE_LIMITED, with details.retryAfter in seconds.
- terminal/output is plain text (escape sequences removed, redrawn lines in their final state, \n line
  ends): what an editor shows in its agent panel and a model reads, of the newest outputByteLimit bytes
  the terminal keeps, from the first whole line once older output was dropped.
- A body is refused whole, as a parse error, when it holds a value the service could not echo or record
  faithfully: a number that is not finite or an integer outside int64/uint64 (the widest the ACP schema
  uses), a string with a lone surrogate, or nesting deeper than json_input.MAX_DEPTH. An id must be what the ACP
  schema's RequestId allows: a string, an int64 integer or null; a float is refused even when whole.
- The audit row of every call, refused ones included, stores a safe rendering of the method and id
  (keys masked, at most AUDIT_TEXT characters, no NUL or lone surrogates), so it can always be written.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from django.conf import settings

from .. import field_names, json_input, sessions
from ..audit import Actor
from ..exceptions import ServiceError, TerminalNotFound, database_unavailable
from ..ids import parse_uuid
from ..models import LARGEST_OUTPUT_BYTE_LIMIT
from ..redaction import redact

logger = logging.getLogger(__name__)

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
MAX_BATCH = 100
SMALLEST_ID, LARGEST_ID = -(2**63), 2**63 - 1  # RequestId is an int64
AUDIT_TEXT = 200  # characters of a method or id kept in the audit row
MAX_SESSION_ID = 200
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


def _ignore(call: Call) -> None:
    pass


def _admit(method: str) -> None:
    pass


def handle(payload, *, actor: Actor, on_call: Callable[[Call], None] = _ignore,
           admit: Callable[[str], None] = _admit) -> dict | list | None:
    """The response to a request, the list of responses to a batch, or None when nothing is answered.

    on_call sees every call, notifications and refused ones included. admit sees the method of every
    well-formed call before it runs, and refuses it by raising a ServiceError (the creation throttle).
    """
    if not isinstance(payload, list):
        return handle_one(payload, actor, on_call, admit)
    if not payload or len(payload) > MAX_BATCH:
        message = "empty batch" if not payload else f"a batch holds at most {MAX_BATCH} calls"
        return _refuse(RpcError(INVALID_REQUEST, {"message": message}), on_call)
    responses = [handle_one(request, actor, on_call, admit) for request in payload]
    return [response for response in responses if response is not None] or None


def refuse(error: RpcError | ServiceError, *, on_call: Callable[[Call], None] = _ignore) -> dict:
    """The response to a body refused before any call in it could be read: unparsable, too large, throttled."""
    return _refuse(RpcError.from_service(error) if isinstance(error, ServiceError) else error, on_call)


def _refuse(error: RpcError, on_call: Callable[[Call], None]) -> dict:
    on_call(Call(method=None, id=None, outcome=error.outcome, terminal_id=None))
    return _response(None, error=error)


# Reading the body


def parse_body(body: bytes):
    """The JSON value of a request body; raises RpcError (PARSE_ERROR) saying what is wrong with it."""
    try:
        return json_input.loads(body)
    except json_input.UnkeepableJson as problem:
        raise RpcError(PARSE_ERROR, {"message": str(problem)}) from None


def handle_one(request, actor: Actor, on_call: Callable[[Call], None], admit: Callable[[str], None]) -> dict | None:
    """Runs one call; returns its response, or None for a notification."""
    request_id = _request_id(request)
    method = request.get("method") if isinstance(request, dict) else None
    terminal_id = None
    try:
        method, params = _parse(request, request_id)
        terminal_id = parse_uuid(params.get("terminalId"))
        admit(method)
        result = METHODS[method](actor, params)
        if method == "terminal/create":
            terminal_id = parse_uuid(result["terminalId"])
    except Exception as problem:  # noqa: BLE001 - every failure is answered as this call's error, never a 500
        error = _as_rpc_error(problem, method)
        on_call(Call(_audited(method), _audited_id(request_id), error.outcome, terminal_id))
        return None if _is_notification(request, error) else _response(request_id, error=error)
    on_call(Call(method, _audited_id(request_id), "ok", terminal_id))
    return None if request_id is NO_ID else _response(request_id, result=result)


def _as_rpc_error(problem: Exception, method) -> RpcError:
    if isinstance(problem, RpcError):
        return problem
    if isinstance(problem, ServiceError):
        return RpcError.from_service(problem)
    unavailable = database_unavailable(problem)  # the database away: logged once for the outage, not per call
    if unavailable is not None:
        return RpcError.from_service(unavailable)
    logger.exception("ACP call %r failed", method)
    return RpcError(INTERNAL_ERROR)


def _request_id(request):
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


def _is_notification(request, error: RpcError) -> bool:
    # A request too malformed to be a notification is answered even without an id.
    return isinstance(request, dict) and "id" not in request and error.code != INVALID_REQUEST


def _audited(method):
    return _safe_text(method) if isinstance(method, str) else None


def _audited_id(request_id):
    if request_id is NO_ID:
        return None
    return _safe_text(request_id) if isinstance(request_id, str) else request_id


def _safe_text(text: str) -> str:
    """Text any database's JSON column takes: keys masked, cut short, NUL and lone surrogates replaced."""
    text = redact(text[: AUDIT_TEXT * 2])[:AUDIT_TEXT]
    text = text.encode("utf-8", errors="replace").decode("utf-8").replace("\x00", "\ufffd")
    return text


def _response(request_id, *, result=None, error: RpcError | None = None) -> dict:
    response = {"jsonrpc": "2.0", "id": None if request_id is NO_ID else request_id}
    if error is not None:
        response["error"] = error.as_dict()
    else:
        response["result"] = result
    return response


def _parse(request, request_id) -> tuple[str, dict]:
    """The method and params of a well-formed request; raises RpcError otherwise."""
    if not isinstance(request, dict):
        raise RpcError(INVALID_REQUEST, {"message": "a request is a JSON object"})
    if request.get("jsonrpc") != "2.0":
        raise RpcError(INVALID_REQUEST, {"message": 'jsonrpc must be "2.0"'})
    if request_id is None and request.get("id") is not None:
        message = f"id must be a string, an integer from {SMALLEST_ID} to {LARGEST_ID}, or null"
        raise RpcError(INVALID_REQUEST, {"message": message})
    method = request.get("method")
    if not isinstance(method, str):
        raise RpcError(INVALID_REQUEST, {"message": "method must be a string"})
    params = request.get("params")
    if params is not None and not isinstance(params, (dict, list)):
        raise RpcError(INVALID_REQUEST, {"message": "params must be an object"})
    if method not in METHODS:
        raise RpcError(METHOD_NOT_FOUND, {"method": method})
    if isinstance(params, list):
        raise _invalid("params", "must be an object of named parameters")
    _refuse_unknown(method, params or {})
    return method, params or {}


def _refuse_unknown(method: str, params: dict) -> None:
    accepted = PARAMS[method]
    names = field_names.unknown(params, accepted)
    if names:
        raise RpcError(INVALID_PARAMS, {"field": field_names.shown(names[0]), "accepted": sorted(accepted),
                                        "message": field_names.problem(names[0], accepted, "parameter")})


# Parameters


def _invalid(field: str, message: str) -> RpcError:
    return RpcError(INVALID_PARAMS, {"field": field, "message": message})


def _string(params: dict, name: str, *, required: bool = True, max_length: int | None = None) -> str | None:
    value = params.get(name)
    if value is None:
        if required:
            raise _invalid(name, "is required")
        return None
    if not isinstance(value, str) or (required and not value):
        raise _invalid(name, "must be a non-empty string" if required else "must be a string")
    if max_length is not None and len(value) > max_length:
        raise _invalid(name, f"must be at most {max_length} characters")
    _refuse_nul(name, value)
    return value


def _refuse_nul(name: str, *texts: str) -> None:
    # A command line, an environment and a path end at NUL, and PostgreSQL text cannot hold it.
    if any("\x00" in text for text in texts):
        raise _invalid(name, "must not contain NUL (\\u0000)")


def _strings(params: dict, name: str) -> list[str]:
    value = params.get(name)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise _invalid(name, "must be a list of strings")
    _refuse_nul(name, *value)
    return value


def _env(params: dict) -> dict[str, str]:
    value = params.get("env")
    if value is None:
        return {}
    if not isinstance(value, list):
        raise _invalid("env", "must be a list of {name, value}")
    for item in value:
        if not isinstance(item, dict) or set(item) != {"name", "value"}:
            raise _invalid("env", "each item must be exactly {name, value}")
        if not isinstance(item["name"], str) or not isinstance(item["value"], str):
            raise _invalid("env", "name and value must be strings")
        _refuse_nul("env", item["name"], item["value"])
    # A name given twice keeps its last value, as a shell's assignments would.
    return {item["name"]: item["value"] for item in value}


def _cwd(params: dict) -> str | None:
    cwd = _string(params, "cwd", required=False)
    if cwd is not None and not cwd.startswith("/"):
        raise _invalid("cwd", "must be an absolute path")
    return cwd


def _output_byte_limit(params: dict) -> int | None:
    value = params.get("outputByteLimit")
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= LARGEST_OUTPUT_BYTE_LIMIT:
        raise _invalid("outputByteLimit", f"must be an integer from 1 to {LARGEST_OUTPUT_BYTE_LIMIT}")
    return value


def _record(params: dict) -> bool:
    """`_meta: {"record": true}` asks for the terminal to be recorded (ACP leaves _meta to implementations)."""
    meta = params.get("_meta")
    if meta is None:
        return False
    if not isinstance(meta, dict):
        raise _invalid("_meta", "must be an object")
    value = meta.get("record", False)
    if not isinstance(value, bool):
        raise _invalid("_meta.record", "must be true or false")
    return value


def _session_id(params: dict) -> str:
    return _string(params, "sessionId", max_length=MAX_SESSION_ID)


def _terminal(actor: Actor, params: dict) -> str:
    """The terminalId of a terminal the caller may address in this session; raises otherwise."""
    session_id = _session_id(params)
    terminal_id = _string(params, "terminalId")
    record = sessions.session_get_for(user=actor.user, terminal_id=terminal_id)
    if record.session_id != session_id:
        raise TerminalNotFound(f"Terminal {terminal_id} not found")
    return terminal_id


# Methods: each takes the actor and the params and returns the call's result.


def terminal_create(actor: Actor, params: dict) -> dict:
    session_id, command = _session_id(params), _string(params, "command")
    args, env, cwd, limit = _strings(params, "args"), _env(params), _cwd(params), _output_byte_limit(params)
    created = sessions.session_create(
        actor=actor, command=command, args=args, env=env, cwd=cwd, output_byte_limit=limit,
        session_id=session_id, pty=True, name="", record=_record(params),
    )
    return {"terminalId": created["terminalId"]}


def terminal_output(actor: Actor, params: dict) -> dict:
    data = sessions.session_newest_output(actor=actor, terminal_id=_terminal(actor, params))
    result = {"output": data["output"], "truncated": data["truncated"]}
    if data.get("exitStatus") is not None:
        result["exitStatus"] = {"exitCode": data["exitStatus"]["exitCode"], "signal": data["exitStatus"]["signal"]}
    return result


def terminal_wait_for_exit(actor: Actor, params: dict) -> dict:
    longest = settings.TERMINALS["MAX_WAIT_MS"]
    data = sessions.session_wait_exit(actor=actor, terminal_id=_terminal(actor, params), timeout_ms=longest)
    if data["timedOut"]:
        message = f"The command did not exit within the server's maximum wait of {longest} ms"
        raise RpcError(SERVER_ERROR, {"code": "TIMEOUT", "message": message, "details": {"timeoutMs": longest}},
                       "TIMEOUT")
    return {"exitCode": data["exitCode"], "signal": data["signal"]}


# The schema's KillTerminalResponse and ReleaseTerminalResponse are objects: a typed client cannot decode null.


def terminal_kill(actor: Actor, params: dict) -> dict:
    sessions.session_kill(actor=actor, terminal_id=_terminal(actor, params))
    return {}


def terminal_release(actor: Actor, params: dict) -> dict:
    sessions.session_terminate(actor=actor, terminal_id=_terminal(actor, params))
    return {}


# The params each method takes: the ACP schema's, _meta included (tests/acp-terminal-schema.json).
ADDRESSED = frozenset({"sessionId", "terminalId", "_meta"})
PARAMS: dict[str, frozenset[str]] = {
    "terminal/create": frozenset({"sessionId", "command", "args", "env", "cwd", "outputByteLimit", "_meta"}),
    "terminal/output": ADDRESSED,
    "terminal/wait_for_exit": ADDRESSED,
    "terminal/kill": ADDRESSED,
    "terminal/release": ADDRESSED,
}

METHODS: dict[str, Callable[[Actor, dict], object]] = {
    "terminal/create": terminal_create,
    "terminal/output": terminal_output,
    "terminal/wait_for_exit": terminal_wait_for_exit,
    "terminal/kill": terminal_kill,
    "terminal/release": terminal_release,
}
