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
from collections.abc import Callable

from django.conf import settings

from .. import field_names, sessions
from ..audit import Actor
from ..exceptions import ServiceError, TerminalNotFound, database_unavailable
from ..ids import parse_uuid
from . import parameters
from .rpc import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    LARGEST_ID,
    METHOD_NOT_FOUND,
    NO_ID,
    SERVER_ERROR,
    SMALLEST_ID,
    Call,
    RpcError,
    audited_id,
    audited_method,
    is_notification,
    request_id_of,
    response,
)

logger = logging.getLogger(__name__)

MAX_BATCH = 100


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
    return [answer for answer in responses if answer is not None] or None


def refuse(error: RpcError | ServiceError, *, on_call: Callable[[Call], None] = _ignore) -> dict:
    """The response to a body refused before any call in it could be read: unparsable, too large, throttled."""
    return _refuse(RpcError.from_service(error) if isinstance(error, ServiceError) else error, on_call)


def _refuse(error: RpcError, on_call: Callable[[Call], None]) -> dict:
    on_call(Call(method=None, id=None, outcome=error.outcome, terminal_id=None))
    return response(None, error=error)


def handle_one(request, actor: Actor, on_call: Callable[[Call], None], admit: Callable[[str], None]) -> dict | None:
    """Runs one call; returns its response, or None for a notification."""
    request_id = request_id_of(request)
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
        on_call(Call(audited_method(method), audited_id(request_id), error.outcome, terminal_id))
        return None if is_notification(request, error) else response(request_id, error=error)
    on_call(Call(method, audited_id(request_id), "ok", terminal_id))
    return None if request_id is NO_ID else response(request_id, result=result)


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
        raise parameters.invalid("params", "must be an object of named parameters")
    _refuse_unknown(method, params or {})
    return method, params or {}


def _refuse_unknown(method: str, params: dict) -> None:
    accepted = PARAMS[method]
    names = field_names.unknown(params, accepted)
    if names:
        raise RpcError(INVALID_PARAMS, {"field": field_names.shown(names[0]), "accepted": sorted(accepted),
                                        "message": field_names.problem(names[0], accepted, "parameter")})


def _terminal(actor: Actor, params: dict) -> str:
    """The terminalId of a terminal the caller may address in this session; raises otherwise."""
    session_id = parameters.session_id(params)
    terminal_id = parameters.string(params, "terminalId")
    record = sessions.session_get_for(user=actor.user, terminal_id=terminal_id)
    if record.session_id != session_id:
        raise TerminalNotFound(f"Terminal {terminal_id} not found")
    return terminal_id


# Methods: each takes the actor and the params and returns the call's result.


def terminal_create(actor: Actor, params: dict) -> dict:
    session_id, command = parameters.session_id(params), parameters.string(params, "command")
    args, env, cwd, limit = parameters.strings(params, "args"), parameters.env(params), parameters.cwd(params), parameters.output_byte_limit(params)
    created = sessions.session_create(
        actor=actor, command=command, args=args, env=env, cwd=cwd, output_byte_limit=limit,
        session_id=session_id, pty=True, name="", record=parameters.record(params),
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
