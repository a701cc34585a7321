"""The client's logic without I/O: every operation is a generator that yields the HTTP requests it needs and gets
each answer's `data` back, so `Client` (httpx) and `AsyncClient` (httpx's async client) run the same code and
cannot differ. Long waits are made of requests of at most MAX_WAIT_PER_REQUEST each, so no HTTP request is held
open long enough for a proxy to cut it, and every wait has a deadline of its own."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Dict, Generator, Optional, Tuple

from .errors import TerminalInactive, Timeout
from .results import Chunk, CommandResult, ExitStatus, OutputMatch, exit_status

# Every REST operation the client sends, by name: (method, path as the OpenAPI schema spells it).
ROUTES: Dict[str, Tuple[str, str]] = {
    "list": ("GET", "/api/terminals"),
    "create": ("POST", "/api/terminals"),
    "get": ("GET", "/api/terminals/{id}"),
    "close": ("DELETE", "/api/terminals/{id}"),
    "commands": ("GET", "/api/terminals/{id}/commands"),
    "run": ("POST", "/api/terminals/{id}/commands"),
    "command": ("GET", "/api/terminals/{id}/commands/{command_id}"),
    "wait_command": ("POST", "/api/terminals/{id}/commands/{command_id}/wait"),
    "input": ("POST", "/api/terminals/{id}/input"),
    "kill": ("POST", "/api/terminals/{id}/kill"),
    "output": ("GET", "/api/terminals/{id}/output"),
    "wait_output": ("POST", "/api/terminals/{id}/output/wait"),
    "recording": ("GET", "/api/terminals/{id}/recording"),
    "resize": ("POST", "/api/terminals/{id}/resize"),
    "screen": ("GET", "/api/terminals/{id}/screen"),
    "signal": ("POST", "/api/terminals/{id}/signal"),
    "stats": ("GET", "/api/terminals/{id}/stats"),
    "wait": ("POST", "/api/terminals/{id}/wait"),
    "health": ("GET", "/api/health"),
}

# The operations of the served schema the client leaves out on purpose, and why (the conformance test holds the
# client to: every operation is in ROUTES or here).
NOT_COVERED: Dict[Tuple[str, str], str] = {
    ("POST", "/api/acp"): "the Agent Client Protocol is for ACP clients, which speak JSON-RPC themselves",
    ("GET", "/api/audit"): "reviewing the audit trail is an operator's task: the dashboard and docs/api.md",
    ("GET", "/api/metrics"): "Prometheus scrapes it; staff only",
    ("GET", "/api/health/live"): "a load balancer's liveness probe; Client.health() reads /api/health",
    ("GET", "/api/health/ready"): "a load balancer's readiness probe; Client.health() reads /api/health",
}

# The longest one request waits, in seconds; longer waits are several requests.
MAX_WAIT_PER_REQUEST = 60.0
# Time a request may take on top of the wait it asks for (the worker's timeout is 5 s by default).
REQUEST_MARGIN = 30.0


@dataclass
class Request:
    route: str
    ids: Dict[str, str] = field(default_factory=dict)
    params: Optional[Dict[str, Any]] = None
    body: Optional[Dict[str, Any]] = None
    wait: float = 0.0  # seconds the service may hold it, added to the HTTP read timeout
    raw: bool = False  # the answer's text instead of the envelope's data

    @property
    def method(self) -> str:
        return ROUTES[self.route][0]

    @property
    def path(self) -> str:
        return ROUTES[self.route][1].format(**self.ids)


# An operation yields Requests and is sent each answer's `data` (or text, for raw requests).
Op = Generator[Request, Any, Any]


def _ms(seconds: float) -> int:
    return max(0, int(seconds * 1000))


def _slice(deadline: float) -> float:
    return max(0.0, min(MAX_WAIT_PER_REQUEST, deadline - time.monotonic()))


def _no_none(values: Dict[str, Any]) -> Dict[str, Any]:
    return {name: value for name, value in values.items() if value is not None}


def create(body: Dict[str, Any]) -> Op:
    data = yield Request("create", body=_no_none(body))
    return data


def list_terminals(status: str, session_id: Optional[str]) -> Op:
    data = yield Request("list", params=_no_none({"status": status, "sessionId": session_id}))
    return list(data["terminals"])


def get(terminal_id: str) -> Op:
    data = yield Request("get", {"id": terminal_id})
    return data


def send(terminal_id: str, text: str, newline: bool, eof: bool) -> Op:
    body: Dict[str, Any] = {"input": text, "appendNewline": newline}
    if eof:
        body["eof"] = True
    data = yield Request("input", {"id": terminal_id}, body=body)
    return data


def run(terminal_id: str, command: str, timeout: float) -> Op:
    """Runs a command to its end, its own exit code and output. Waits past MAX_WAIT_PER_REQUEST in several
    requests; stops early (exit_code None, waiting_for_input) when the command asks for input."""
    deadline = time.monotonic() + timeout
    wait = _slice(deadline)
    data = yield Request("run", {"id": terminal_id}, body={"command": command, "timeoutMs": max(1, _ms(wait))},
                         wait=wait)
    result = yield from _until_done(terminal_id, data, deadline, "run", timeout)
    return result


def wait_command(terminal_id: str, command_id: str, timeout: float) -> Op:
    deadline = time.monotonic() + timeout
    wait = _slice(deadline)
    data = yield Request("wait_command", {"id": terminal_id, "command_id": command_id},
                         body={"timeoutMs": _ms(wait)}, wait=wait)
    result = yield from _until_done(terminal_id, data, deadline, "wait_command", timeout)
    return result


def _until_done(terminal_id: str, data: Dict[str, Any], deadline: float, which: str, timeout: float) -> Op:
    while data.get("status") != "completed" and not data.get("waitingForInput"):
        wait = _slice(deadline)
        if wait <= 0:
            raise Timeout(f"command {data.get('commandId')} still runs after {timeout:g} s ({which} timeout); "
                          f"wait again with wait_command({data.get('commandId')!r}) or signal it",
                          which=which, command_id=data.get("commandId"))
        data = yield Request("wait_command", {"id": terminal_id, "command_id": str(data["commandId"])},
                             body={"timeoutMs": _ms(wait)}, wait=wait)
    return CommandResult.from_data(data)


def wait_exit(terminal_id: str, timeout: float) -> Op:
    deadline = time.monotonic() + timeout
    while True:
        wait = _slice(deadline)
        data = yield Request("wait", {"id": terminal_id}, body={"timeoutMs": _ms(wait)}, wait=wait)
        if not data.get("timedOut"):
            return ExitStatus(exit_code=data.get("exitCode"), signal=data.get("signal"))
        if time.monotonic() >= deadline:
            raise Timeout(f"terminal {terminal_id} still runs after {timeout:g} s (wait timeout)", which="wait")


def wait_for(terminal_id: str, pattern: str, timeout: float, from_byte: Optional[int]) -> Op:
    """Waits until the output matches `pattern` (a regular expression, searched with escape sequences stripped),
    from `from_byte` (default: where the output stood at the last input)."""
    deadline = time.monotonic() + timeout
    while True:
        wait = _slice(deadline)
        body = _no_none({"pattern": pattern, "timeoutMs": _ms(wait), "untilInput": False, "fromByte": from_byte})
        data = yield Request("wait_output", {"id": terminal_id}, body=body, wait=wait)
        outcome = data.get("outcome")
        if outcome == "matched":
            return OutputMatch(match=str(data.get("match")), output=str(data.get("output", "")),
                               next_byte=int(data.get("nextByte", 0)))
        if outcome == "exited":
            raise TerminalInactive(f"terminal {terminal_id} ended without printing a match for {pattern!r}",
                                   code="TERMINAL_INACTIVE", details={"output": data.get("output", "")})
        from_byte = int(data.get("fromByte", from_byte or 0))  # search the same bytes again, and what came since
        if time.monotonic() >= deadline:
            raise Timeout(f"no output of terminal {terminal_id} matched {pattern!r} within {timeout:g} s "
                          "(wait_for timeout)", which="wait_for")


def read(terminal_id: str, from_byte: int, max_bytes: Optional[int]) -> Op:
    params = _no_none({"fromByte": from_byte, "maxBytes": max_bytes})
    data = yield Request("output", {"id": terminal_id}, params=params)
    return Chunk(text=str(data["chunk"]), start=int(data["fromByte"]), next=int(data["nextByte"]),
                 eof=bool(data["eof"]), truncated=bool(data["truncated"]),
                 exit_status=exit_status(data.get("exitStatus")))


def simple(route: str, terminal_id: str, body: Optional[Dict[str, Any]] = None,
           params: Optional[Dict[str, Any]] = None, command_id: Optional[str] = None, raw: bool = False) -> Op:
    ids = {"id": terminal_id}
    if command_id is not None:
        ids["command_id"] = command_id
    data = yield Request(route, ids, params=params, body=body, raw=raw)
    return data


def health() -> Op:
    data = yield Request("health")
    return data

