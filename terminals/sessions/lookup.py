"""Looking terminals up: the one access rule, the compiled lookup, the read cache of the hot read paths, listing."""

from __future__ import annotations

import copy
import time
import uuid

from django.db.models import Exists, OuterRef

from ..exceptions import Forbidden, ServiceError, TerminalNotFound
from ..ids import parse_uuid
from ..models import Recording, TerminalSession, Worker
from ..plumbing.prepared import PreparedLookup
from ..record_shapes import recording_data, session_data
from ..remote import protocol
from .routing import _ask_worker, _hosted_here

def session_get_for(*, user, terminal_id, with_owner: bool = False) -> TerminalSession:
    """The only way to fetch a terminal: another user's id answers exactly like an unknown one.

    with_owner joins the owner's user row too, for showing the record; requests that only reach the
    terminal do without it (a user row is a dozen columns to fetch and convert on every read)."""
    key = _terminal_key(terminal_id)
    if not with_owner:
        record = _terminal_and_worker(key)
        # visible_to()'s rule, applied to the row: staff see every terminal, others only their own.
        if record is None or not (user.is_staff or record.owner_id == user.pk):
            raise TerminalNotFound(f"Terminal {terminal_id} not found")
        return record
    try:
        return TerminalSession.objects.visible_to(user).select_related("worker", "owner").get(pk=key)
    except TerminalSession.DoesNotExist:
        raise TerminalNotFound(f"Terminal {terminal_id} not found") from None


def _terminal_key(terminal_id) -> uuid.UUID:
    """The terminal id a client sent, as a key (ids.py); anything that is no terminal id answers like an unknown one."""
    key = parse_uuid(terminal_id)
    if key is None:
        raise TerminalNotFound(f"Terminal {terminal_id} not found")
    return key


def session_get_for_typing(*, user, terminal_id) -> TerminalSession:
    """A terminal the user may act on as its user does: type into (input, commands, an interactive attach), resize
    or signal. Their own only. Staff find every terminal (session_get_for) and may read, watch and end it, but keys
    typed into another user's terminal run as that user, under that user's account: staff watch it read-only
    (the WebSocket's mode=view) on every interface, whatever credential they come with."""
    record = session_get_for(user=user, terminal_id=terminal_id)
    if record.owner_id != user.pk:
        raise Forbidden(f"Terminal {record.id} is another user's: staff may read it, watch it (a WebSocket with "
                        f"?mode=view) and end it, but only its owner types into, resizes or signals it")
    return record


# Every request that reaches a terminal looks it up, with its worker, by a statement compiled once (prepared.py):
# the ORM compiled the query and its converters anew each time, half of the lookup's time, and the lookup was the
# largest step of a WebSocket attach (bench/ANALYSIS.md). The rows become model instances as the ORM makes them.
_TERMINAL_COLUMNS = [field.attname for field in TerminalSession._meta.concrete_fields]
_WORKER_COLUMNS = [field.attname for field in Worker._meta.concrete_fields]
_TERMINAL_AND_WORKER = PreparedLookup(lambda key: TerminalSession.objects.filter(pk=key).values_list(
    *_TERMINAL_COLUMNS, *(f"worker__{name}" for name in _WORKER_COLUMNS)))


def _terminal_and_worker(key: uuid.UUID) -> TerminalSession | None:
    rows = _TERMINAL_AND_WORKER.rows(key)
    if not rows:
        return None
    values, split = rows[0], len(_TERMINAL_COLUMNS)
    record = TerminalSession.from_db("default", _TERMINAL_COLUMNS, values[:split])
    worker = Worker.from_db("default", _WORKER_COLUMNS, values[split:]) if record.worker_id is not None else None
    TerminalSession.worker.field.set_cached_value(record, worker)
    return record


# The hot read paths (a poll of the output or the stats) take the terminal's record from a short-lived cache of this
# process: its owner and worker never change, and what does change (its status, its release, its worker's
# heartbeat) is read again every READ_RECORD_SECONDS by one statement compiled once (_REFRESH). The access rule is
# applied afresh on every request, to the caller as authenticated now. Compiling the lookup was 29% of a poll's
# CPU (py-spy, bench/ANALYSIS.md), and with 50 terminals polled, its renewals every half second were 23%.
READ_RECORD_SECONDS = 0.5
# A terminal this process's own (embedded) worker hosts is renewed less often: that worker answers for its state
# on the same request (one it has freed answers TERMINAL_INACTIVE), and its liveness needs no heartbeat. Renewing
# 50 polled terminals every half second was a quarter of the request threads' busy samples, in SQLite's reads.
HOSTED_RECORD_SECONDS = 5.0
_READ_RECORDS_MAX = 10_000
_read_records: dict[uuid.UUID, tuple[float, TerminalSession]] = {}
_REFRESH = PreparedLookup(lambda key: TerminalSession.objects.filter(pk=key).annotate(
    worker_live=Exists(Worker.objects.live().filter(pk=OuterRef("worker_id")))).values_list(
    "status", "released", "worker_live"))


def _record_for_reading(*, user, terminal_id) -> TerminalSession:
    """session_get_for, for requests that only read through the worker; never for a request that changes the
    terminal or its record."""
    key = _terminal_key(terminal_id)
    cached = _read_records.get(key)
    if cached is None:
        record = session_get_for(user=user, terminal_id=key)
        if len(_read_records) >= _READ_RECORDS_MAX:
            _read_records.clear()
        _read_records[key] = (time.monotonic(), record)
        return record
    read_at, record = cached
    if not (user.is_staff or record.owner_id == user.pk):
        raise TerminalNotFound(f"Terminal {terminal_id} not found")
    age = time.monotonic() - read_at
    if age >= READ_RECORD_SECONDS and (age >= HOSTED_RECORD_SECONDS or not _hosted_here(record)):
        record = _refreshed(record)
    return record


def _refreshed(record: TerminalSession) -> TerminalSession:
    """A copy of the cached record with what can change read again; the record gone, TerminalNotFound."""
    read_at = time.monotonic()
    rows = _REFRESH.rows(record.pk)
    if not rows:
        forget_record(record.pk)
        raise TerminalNotFound(f"Terminal {record.pk} not found")
    fresh = copy.copy(record)  # requests on other threads may be using the cached one
    fresh.status, fresh.released, live = rows[0]
    fresh.worker_live = bool(live)
    _read_records[record.pk] = (read_at, fresh)
    return fresh


def forget_record(terminal_id) -> None:
    """Drops a terminal's cached record at once (this process ended it or changed it)."""
    key = parse_uuid(terminal_id)
    if key is not None:
        _read_records.pop(key, None)


def session_get_for_viewing(*, user, terminal_id, with_owner: bool = False) -> TerminalSession:
    """A terminal the user may watch read-only: one session_get_for finds, or one its owner shared with them.
    Anything else answers exactly like an unknown terminal."""
    try:
        return session_get_for(user=user, terminal_id=terminal_id, with_owner=with_owner)
    except TerminalNotFound:
        related = ("worker", "owner") if with_owner else ("worker",)
        # A malformed id is unknown here too: the query would raise Django's ValidationError on it (a 1011 close).
        key = parse_uuid(terminal_id)
        record = None if key is None else (TerminalSession.objects.filter(pk=key, view_grants__user=user)
                                           .select_related(*related).first())
        if record is None:
            raise
        return record


def session_list(*, user, status: str = "active", session_filter: dict | None = None) -> list[dict]:
    records = TerminalSession.objects.visible_to(user).select_related("owner")
    if status == "active":
        records = records.active()
    elif status != "all":
        records = records.filter(status=status)
    return [session_data(record) for record in records.filter(**(session_filter or {}))]


def session_detail(*, user, terminal_id, reply_within: float | None = None, shared: bool = False) -> dict:
    """The record, and for a live terminal what it is doing now (busy, foreground process, running command),
    asked of its worker within reply_within seconds (default: the worker timeout). shared: also a terminal
    shared with the user (session_get_for_viewing)."""
    find = session_get_for_viewing if shared else session_get_for
    record = find(user=user, terminal_id=terminal_id, with_owner=True)
    data = session_data(record)
    if record.recorded:
        data["recording"] = recording_data(Recording.objects.filter(terminal=record).first())
    if record.is_active:
        try:
            data.update(_ask_worker(record, protocol.INFO, reply_within))
        except ServiceError:
            pass  # the record alone still answers; the live part is best effort
    return data


def session_live(*, user, terminal_id, reply_within: float | None = None) -> dict:
    """What a live terminal is doing now (busy, foreground process, viewers), without its record; reply_within
    bounds the wait for its worker (a page listing many terminals must not wait on each)."""
    record = session_get_for(user=user, terminal_id=terminal_id)
    return _ask_worker(record, protocol.INFO, reply_within)
