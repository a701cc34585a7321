"""Waits: every wait bounded in one place, for output, for an exit, or for the worker, ended when access is taken away."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

from asgiref.sync import async_to_sync
from django.conf import settings
from django.db import DatabaseError

from .. import access, live_connections
from ..plumbing import database_threads
from ..audit import Actor, audit
from ..environment import invalid
from ..exceptions import TerminalNotFound, database_unavailable, terminal_inactive
from ..models import TerminalSession
from ..remote import client as worker_client
from ..remote import protocol
from .lookup import session_get_for
from .routing import _ask_worker, _hosting_channel

logger = logging.getLogger(__name__)


def wait_bound_ms(actor: Actor, timeout_ms: int) -> int:
    """How long a use case waits for what it was asked: timeout_ms, at most MAX_WAIT_MS and at most the actor's own
    bound (an MCP call's MCP_MAX_WAIT_MS, as agents' clients give up on a call after about a minute). Every wait
    of every interface is bounded here, so one past the bound answers as for any timeout."""
    bound = settings.TERMINALS["MAX_WAIT_MS"]
    if actor.max_wait_ms is not None:
        bound = min(bound, actor.max_wait_ms)
    return int(min(timeout_ms, bound))


def _wait_seconds(actor: Actor, timeout_ms: int) -> float:
    return wait_bound_ms(actor, timeout_ms) / 1000


WAIT_POLL_SECONDS = 0.1
PATTERN_SECONDS = 0.2  # the longest one search may take: a pattern that backtracks for ever is cut off
MAX_PATTERN = 1000


def session_wait_output(*, actor: Actor, terminal_id, pattern: str = "", timeout_ms: int, from_byte: int | None = None,
                        until_input: bool = True) -> dict:
    """Waits until the output from from_byte (default: where it stood at the last input, so nothing printed since is
    missed) matches pattern (a regular expression, escape sequences stripped), or the foreground program waits for
    input (until_input), or the process ends, or timeout_ms passes. Answers the outcome and what was printed."""
    record = session_get_for(user=actor.user, terminal_id=terminal_id)
    compiled = _compiled_pattern(pattern)
    start = from_byte if from_byte is not None else _ask_worker(record, protocol.STATS).get("lastInputByte", 0)
    timeout_ms = wait_bound_ms(actor, timeout_ms)
    audit(actor, "wait_output", terminal_id=record.id, pattern=pattern, fromByte=start, timeoutMs=timeout_ms)
    deadline = time.monotonic() + timeout_ms / 1000
    printed = _Printed(position=start, limit=settings.TERMINALS["MAX_READ_BYTES"])
    hold = access.hold_of(actor, record.id)
    with live_connections.holding(actor.user):  # a wait is a live connection of its user, under the same cap
        outcome, matched, read = _until_an_outcome(record, printed, hold, compiled, until_input, deadline)
    return {"terminalId": str(record.id), "outcome": outcome, "match": matched, "output": printed.text,
            "fromByte": printed.first, "nextByte": printed.position, "truncated": printed.truncated,
            "exitStatus": read["exitStatus"]}


def _compiled_pattern(pattern: str):
    """The wait's pattern compiled, None for no pattern; one too long, or no regular expression, is refused."""
    import regex

    if len(pattern) > MAX_PATTERN:
        raise invalid("pattern", f"longer than {MAX_PATTERN} characters")
    try:
        return regex.compile(pattern) if pattern else None
    except regex.error as problem:
        raise invalid("pattern", f"not a regular expression: {problem}") from None


@dataclass
class _Printed:
    """What a wait has read: the last limit characters of it, from where it began (first) to where it stands."""

    position: int
    limit: int
    text: str = ""
    first: int | None = None
    truncated: bool = False

    def add(self, read: dict) -> None:
        self.first = read["fromByte"] if self.first is None else self.first
        self.truncated = self.truncated or read["truncated"] or len(self.text) + len(read["chunk"]) > self.limit
        self.text = (self.text + read["chunk"])[-self.limit:]
        self.position = read["nextByte"]


def _until_an_outcome(record: TerminalSession, printed: _Printed, hold: access.Hold, compiled, until_input: bool,
                      deadline: float) -> tuple[str, str | None, dict]:
    """Reads each round what is new until the wait has an outcome: (the outcome, what matched, the last read)."""
    checked, read_after_waiting = time.monotonic(), False
    while True:
        checked = _check_access(hold, checked)
        read = _read_more(record, printed)
        outcome, matched = _wait_outcome(record, compiled, printed.text, read, until_input, deadline)
        if outcome == "waiting_for_input" and not read_after_waiting:
            # Seen waiting after the output was read: what it printed just before (its prompt) may have come
            # between the two. Read once more, and search it, before answering.
            read_after_waiting = True
            continue
        if outcome is not None:
            return outcome, matched, read
        time.sleep(WAIT_POLL_SECONDS)


def _check_access(hold: access.Hold, checked: float) -> float:
    """Access taken away meanwhile ends the wait (access.require raises), checked every access.CHECK_SECONDS since
    checked; answers when it was last checked."""
    if time.monotonic() - checked >= access.CHECK_SECONDS:
        access.require(hold)
        checked = time.monotonic()
    return checked


def _read_more(record: TerminalSession, printed: _Printed) -> dict:
    """One round's read, added to what was printed: only what is new, up to the last MAX_READ_BYTES characters.
    What programs printed: the echo of typed input is no answer to it (runtime/echo.py)."""
    read = _ask_worker(record, protocol.BYTES, from_byte=printed.position, max_bytes=printed.limit, strip_ansi=True,
                       stream=None, without_echo=True)
    printed.add(read)
    return read


def _wait_outcome(record: TerminalSession, compiled, text: str, read: dict, until_input: bool,
                  deadline: float) -> tuple[str | None, str | None]:
    """(how a wait ends after this round, what its pattern matched), or (None, None) to wait on."""
    if compiled is not None:
        try:
            # concurrent: the search lets go of the GIL, so the event loop that serves everyone runs meanwhile.
            found = compiled.search(text, timeout=PATTERN_SECONDS, concurrent=True)
        except TimeoutError:
            raise invalid("pattern", f"took longer than {PATTERN_SECONDS} s to search the output; simplify it") from None
        if found:
            return "matched", found.group(0)
    if read["exitStatus"] is not None and read["eof"]:
        return "exited", None
    if until_input and record.pty:
        info = _ask_worker(record, protocol.INFO)
        if info["busy"] and info["waitingForInput"]:
            return "waiting_for_input", None
    if time.monotonic() >= deadline:
        return "timeout", None
    return None, None


def session_wait_exit(*, actor: Actor, terminal_id, timeout_ms: int) -> dict:
    record = session_get_for(user=actor.user, terminal_id=terminal_id)
    return worker_client_wait(record, protocol.WAIT, _wait_seconds(actor, timeout_ms), {}, actor=actor)


def worker_client_wait(record: TerminalSession, message_type: str, seconds: float, fields: dict,
                       actor: Actor | None = None) -> dict:
    """Asks the worker to wait up to seconds; the request itself may take that long plus the usual deadline.
    For an actor, the wait is given up (UNAUTHORIZED, or TERMINAL_NOT_FOUND) as soon as a check finds its access
    to the terminal taken away (access.py); what it waited for goes on in the terminal."""
    reply_within, channel = worker_client.default_timeout() + seconds, _hosting_channel(record)
    fields = {"id": str(record.id), "timeout": seconds, **fields}
    try:
        if actor is None or seconds <= access.CHECK_SECONDS:
            return worker_client.request_sync(channel, message_type, reply_within, **fields)
        hold = access.hold_of(actor, record.id)
        with live_connections.holding(actor.user):  # a wait is a live connection of its user, under the same cap
            reply, reason = async_to_sync(_request_while_held)(hold, channel, message_type, reply_within, fields)
    except TerminalNotFound:
        raise terminal_inactive(record.id, released=True) from None
    if reason is not None:
        raise access.refusal(reason, record.id)
    return reply


async def _request_while_held(hold: access.Hold, channel: str, message_type: str, reply_within: float,
                              fields: dict) -> tuple[dict | None, str | None]:
    """(the worker's reply, None), or (None, why) when a check every access.CHECK_SECONDS finds the hold lost first."""
    request = asyncio.ensure_future(worker_client.request(channel, message_type, reply_within, **fields))
    try:
        while True:
            done, _ = await asyncio.wait({request}, timeout=access.CHECK_SECONDS)
            if done:
                return request.result(), None
            try:
                reason = (await database_threads.run(access.lost, [hold])).get(hold)
            except DatabaseError as error:  # a locked database: the wait goes on, the next check asks again
                if database_unavailable(error) is None:  # an outage is logged once, not every check of every wait
                    logger.warning("checking the access of a wait on %s failed: %s", hold.terminal, error)
                continue
            if reason is not None:
                return None, reason
    finally:
        request.cancel()
