"""Use cases shared by the REST views (and later the live consumers): every one checks access, audits and talks to the worker."""

from __future__ import annotations

import asyncio
import copy
import logging
import time
import uuid
from datetime import timedelta

from asgiref.sync import async_to_sync
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import DatabaseError, connection, transaction
from django.db.models import Count, Exists, OuterRef, Q
from django.utils import timezone

from . import access, database_threads, lifecycle, live_connections
from .audit import Actor, audit
from .environment import (
    AccountMissing,
    build_env,
    invalid,
    isolation,
    resolve_cwd,
    resolve_program,
    resolve_shell,
    run_as_account,
    shell_argv,
    validate_env,
)
from .exceptions import (
    AuditUnavailable,
    Forbidden,
    InvalidInput,
    ServiceError,
    TerminalNotFound,
    WorkerUnavailable,
    database_unavailable,
    terminal_inactive,
)
from .models import Recording, TerminalSession, ViewGrant, Worker
from .prepared import PreparedLookup
from .record_shapes import recording_data, session_data
from .remote import client as worker_client
from .remote import protocol
from .remote.here import current_worker

# The signals a client may send by name (seed 000's list, and the job-control and user signals).
SIGNALS = ("SIGTERM", "SIGINT", "SIGKILL", "SIGHUP", "SIGQUIT", "SIGTSTP", "SIGCONT", "SIGUSR1", "SIGUSR2")

STARTED = time.monotonic()
logger = logging.getLogger(__name__)


# Looking terminals up


def session_get_for(*, user, terminal_id, with_owner: bool = False) -> TerminalSession:
    """The only way to fetch a terminal: another user's id answers exactly like an unknown one.

    with_owner joins the owner's user row too, for showing the record; requests that only reach the
    terminal do without it (a user row is a dozen columns to fetch and convert on every read)."""
    try:
        key = uuid.UUID(str(terminal_id))
    except ValueError:
        raise TerminalNotFound(f"Terminal {terminal_id} not found") from None
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
    try:
        key = uuid.UUID(str(terminal_id))
    except ValueError:
        raise TerminalNotFound(f"Terminal {terminal_id} not found") from None
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
    try:
        _read_records.pop(uuid.UUID(str(terminal_id)), None)
    except ValueError:
        pass


def session_get_for_viewing(*, user, terminal_id, with_owner: bool = False) -> TerminalSession:
    """A terminal the user may watch read-only: one session_get_for finds, or one its owner shared with them.
    Anything else answers exactly like an unknown terminal."""
    try:
        return session_get_for(user=user, terminal_id=terminal_id, with_owner=with_owner)
    except TerminalNotFound:
        related = ("worker", "owner") if with_owner else ("worker",)
        # A malformed id is unknown here too: the query would raise Django's ValidationError on it (a 1011 close).
        key = _uuid_or_none(terminal_id)
        record = None if key is None else (TerminalSession.objects.filter(pk=key, view_grants__user=user)
                                           .select_related(*related).first())
        if record is None:
            raise
        return record


def _uuid_or_none(terminal_id) -> uuid.UUID | None:
    try:
        return uuid.UUID(str(terminal_id))
    except ValueError:
        return None


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


# Read-only looks that owners give (the dashboard's sharing)


def session_share(*, actor: Actor, terminal_id, username: str) -> list[str]:
    """Lets another user watch the terminal read-only; the owner (or staff) may. Returns who may watch now."""
    record = session_get_for(user=actor.user, terminal_id=terminal_id)
    user = get_user_model().objects.filter(username=username, is_active=True).first()
    if user is None or user.pk == record.owner_id:
        # One answer for a name nobody has, the owner's and a disabled user's: sharing must not tell who exists.
        raise InvalidInput(f"cannot share with {username!r}: give the user name of an active user other than the "
                           "terminal's owner")
    ViewGrant.objects.get_or_create(terminal=record, user=user, defaults={"granted_by": actor.user})
    audit(actor, "share", terminal_id=record.id, subject=user.get_username())
    return session_shares(user=actor.user, terminal_id=record.id)


def session_unshare(*, actor: Actor, terminal_id, username: str) -> list[str]:
    record = session_get_for(user=actor.user, terminal_id=terminal_id)
    removed, _ = ViewGrant.objects.filter(terminal=record, user__username=username).delete()
    if removed:
        audit(actor, "unshare", terminal_id=record.id, subject=username)
    return session_shares(user=actor.user, terminal_id=record.id)


def session_shares(*, user, terminal_id) -> list[str]:
    record = session_get_for(user=user, terminal_id=terminal_id)
    return list(ViewGrant.objects.filter(terminal=record).order_by("user__username")
                .values_list("user__username", flat=True))


def session_shared_with(*, user) -> list[dict]:
    """Terminals other users shared with this one."""
    records = TerminalSession.objects.filter(view_grants__user=user).select_related("owner").order_by("-created")
    return [session_data(record) for record in records]


# Talking to the terminal's worker


def hosting_channel(record: TerminalSession) -> str:
    """The channel of the worker that holds the terminal's output; raises TerminalInactive or WorkerUnavailable."""
    return _hosting_channel(record)


def _hosting_channel(record: TerminalSession) -> str:
    if not record.holds_output:
        raise terminal_inactive(record.id, record.status, released=True)
    if record.worker is None or not (_hosted_here(record) or _worker_live(record)):
        raise WorkerUnavailable(f"The worker hosting terminal {record.id} is not answering", {"terminalId": str(record.id)})
    return record.worker.channel


def _worker_live(record: TerminalSession) -> bool:
    """Judged by the database's clock (Worker.stale_before), and only for a terminal not hosted in this process: as
    an annotation of every lookup, compiling it was half of the lookup's time (bench/ANALYSIS.md), and the embedded
    server, whose terminals are all hosted here, never needs it. Kept on the record, so a record the read cache
    holds (_record_for_reading) is judged once while it is held."""
    live = getattr(record, "worker_live", None)
    if live is None:
        live = record.worker_live = record.worker.is_live()
    return live


def _hosted_here(record: TerminalSession) -> bool:
    """Whether the terminal lives in this process's embedded worker, which is alive whatever its heartbeat says:
    under load the heartbeat waits behind the worker's other database writes and can be late."""
    worker = current_worker()
    return worker is not None and worker.id == record.worker_id


def _ask_worker(record: TerminalSession, message_type: str, reply_within: float | None = None, **fields) -> dict:
    try:
        return worker_client.request_sync(_hosting_channel(record), message_type, reply_within, id=str(record.id), **fields)
    except TerminalNotFound:
        # The record exists but its worker no longer holds it: it ended and was freed.
        raise terminal_inactive(record.id, released=True) from None


def require_audit_writable() -> None:
    """Refuses up front (503 AUDIT_UNAVAILABLE) an action whose audit row can only be written after it.

    Takes the database's write lock and lets it go: when the database is locked past its busy timeout,
    or down, the request stops here, before a process is started, ended or signalled.
    """
    try:
        with transaction.atomic():
            pass
    except DatabaseError as error:
        unavailable = database_unavailable(error)
        if unavailable is not None:
            raise unavailable from error
        logger.error("the audit trail cannot be written, request refused: %s", error)
        raise AuditUnavailable() from error


# Use cases


def session_create(
    *,
    actor: Actor,
    shell=None,
    command=None,
    args=None,
    cwd=None,
    env=None,
    cols=80,
    rows=24,
    name="",
    pty=True,
    output_byte_limit=None,
    session_id="",
    login=False,
    host=None,
    record=False,
) -> dict:
    """Starts a shell (with login, as a login shell), or with command a program run directly (no shell in between).
    With record (or by the recording policy), what it shows is recorded (recordings.py)."""
    cols, rows = checked_window_size(cols, rows)
    username = actor.user.get_username()
    record = should_record(username, record)
    account = _run_as(username)
    directory = resolve_cwd(cwd, account, username=username)
    requested_env = validate_env(env or {})
    if command:
        environment = build_env(requested_env, shell="", account=account)
        program = resolve_program(command, environment["PATH"], directory)
        fields = {"kind": "command", "shell": "", "command": program, "args": list(args or []),
                  "argv": [program, *(args or [])], "pty": pty}
    else:
        if not pty:
            raise invalid("pty", "a shell needs a PTY; pty: false is for commands")
        shell_path = resolve_shell(shell)
        environment = build_env(requested_env, shell=shell_path, account=account)
        fields = {"kind": "shell", "shell": shell_path, "argv": shell_argv(shell_path) + (["-l"] if login else [])}
    terminal_id = str(uuid.uuid4())
    run_as = account.name if account is not None else ""
    # The worker writes the terminal's record before it starts anything (a database that cannot take it refuses
    # the create, 503 AUDIT_UNAVAILABLE, with nothing started), and this audit row with the pid in the same
    # transaction, or ends the terminal: none runs off the record.
    creation = {"actor": actor.as_dict(), "details": {
        "shell": fields["shell"], "command": fields.get("command", ""), "run_as": run_as,
        "args": fields.get("args", []), "cwd": directory, "name": name or "", "env": sorted(requested_env),
        "recorded": record,
    }}
    # A locked database is told as what it is, within its busy timeout: asked first, the worker would still be
    # waiting for the lock when this process stops waiting for it (WORKER_TIMEOUT_MS), a 503 WORKER_UNAVAILABLE.
    require_audit_writable()
    return worker_client.request_sync(
        _creation_channel(host),
        protocol.CREATE,
        host=host or "",
        id=terminal_id,
        owner_id=actor.user.pk,
        api_key_id=actor.api_key.pk if actor.api_key is not None else None,
        name=name or "",
        cwd=directory,
        env=environment,
        cols=cols,
        rows=rows,
        output_byte_limit=output_byte_limit,
        session_id=session_id or "",
        run_as=run_as,
        username=username,
        record=record,
        creation=creation,
        **fields,
    )


def checked_window_size(cols, rows) -> tuple[int, int]:
    """The one check of a window size, whatever the interface asked (REST, WebSocket, MCP, ACP, the dashboard):
    whole numbers from 1 to MAX_COLS and MAX_ROWS. A larger screen is what every screen read renders, on the process
    that serves everyone (65535 x 65535 took a server to 100% CPU for minutes); past 65535 the PTY cannot hold it."""
    config = settings.TERMINALS
    for field, value, limit in (("cols", cols, config["MAX_COLS"]), ("rows", rows, config["MAX_ROWS"])):
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= limit:
            raise invalid(field, f"must be a whole number from 1 to {limit} (TERMINALS_MAX_{field.upper()}); "
                                 f"got {str(value)[:20]}")
    return cols, rows


def checked_input(text: str) -> str:
    """The one check of input's size, whatever the interface typed it (REST, the WebSocket, MCP, ACP): at most
    MAX_INPUT_BYTES of what the client sent (an Enter key the service adds does not count)."""
    limit = settings.TERMINALS["MAX_INPUT_BYTES"]
    if len(text.encode("utf-8", errors="surrogatepass")) > limit:
        raise invalid("input", f"longer than {limit} bytes (TERMINALS_MAX_INPUT_BYTES)")
    return text


def should_record(username: str, requested: bool) -> bool:
    """A terminal is recorded when its creation asks, or when the policy records all, or all of its user's."""
    config = settings.TERMINALS
    return bool(requested) or config["RECORD_ALL"] or username in config["RECORD_USERS"]


def _creation_channel(host: str | None) -> str:
    """The shared creation queue, or with host the channel of that host's live worker with the fewest terminals
    (which passes the creation on only to workers of the same host when it is full)."""
    if not host:
        return protocol.CREATE_CHANNEL
    if settings.TERMINALS["EMBEDDED_WORKER"]:
        # One host: this process's own worker, which alone takes from the in-memory creation queue. (Other
        # deployments' workers in the same database are no way to reach it.)
        worker = current_worker()
        if worker is None or worker.hostname != host:
            here = worker.hostname if worker is not None else "none yet"
            raise invalid("server_id", f"no live worker on host {host!r}; the hosts are: {here}")
        return protocol.CREATE_CHANNEL
    workers = list(Worker.objects.live().filter(hostname=host)
                   .annotate(active=Count("terminals", filter=Q(terminals__status="active"))).order_by("active"))
    if not workers:
        raise invalid("server_id", f"no live worker on host {host!r}; the hosts are: {', '.join(worker_hosts()) or 'none'}")
    return workers[0].channel


def worker_hosts() -> list[str]:
    """The hostnames of the live workers: where a terminal can be asked to run."""
    return sorted(set(Worker.objects.live().values_list("hostname", flat=True)))


def _run_as(username: str):
    """The user's account; on a user's first terminal, a worker (which runs as root) makes it."""
    try:
        return run_as_account(username)
    except AccountMissing:
        worker_client.request_sync(protocol.CREATE_CHANNEL, protocol.ACCOUNT, username=username)
        return run_as_account(username)


def normalize_input(text: str, *, append_newline: bool = True) -> str:
    """Adds the Enter key, as the contract asks, unless the input already ends a line or is a control key."""
    if not append_newline:
        return text
    if text.endswith(("\n", "\r")) or (text and _is_control_key(text)):
        return text
    return text + "\n"


def _is_control_key(text: str) -> bool:
    # "\x03" (Ctrl-C), "\x04", "\x1b[A" (an arrow key): keystrokes, not commands to run.
    first = ord(text[0])
    return (first < 0x20 and text[0] not in "\t") or first == 0x7F


def session_write(*, actor: Actor, terminal_id, text: str, append_newline: bool = True, close: bool = False) -> dict:
    record = session_get_for_typing(user=actor.user, terminal_id=terminal_id)
    if not record.is_active:
        raise terminal_inactive(record.id, record.status, released=not record.holds_output)
    data = normalize_input(checked_input(text), append_newline=append_newline)
    # The audit row is written before the bytes reach the terminal; when it cannot be, audit() raises
    # AuditUnavailable (503) and nothing is sent.
    audit(actor, "input", terminal_id=record.id, outcome="sent", input=data, **({"close": True} if close else {}))
    reply = _ask_worker(record, protocol.INPUT, data=data, close=close)
    try:
        TerminalSession.objects.filter(pk=record.pk).update(last_activity=timezone.now())
    except DatabaseError as error:  # the input went through; the worker's heartbeat records the activity too
        logger.warning("last activity of terminal %s not recorded: %s", record.id, error)
    return {"terminalId": str(record.id), **reply}


def session_read(*, actor: Actor, terminal_id, options: dict) -> dict:
    """Output by line (since, sinceTime, mode) or, with from_byte, by byte offset."""
    record = _record_for_reading(user=actor.user, terminal_id=terminal_id)
    if options.get("from_byte") is not None:
        data = _ask_worker(record, protocol.BYTES, **options)
    else:
        data = _ask_worker(record, protocol.OUTPUT, **options)
    return {"terminalId": str(record.id), **data}


def session_stats(*, actor: Actor, terminal_id) -> dict:
    record = _record_for_reading(user=actor.user, terminal_id=terminal_id)
    return _ask_worker(record, protocol.STATS)


def session_terminate(
    *, actor: Actor, terminal_id, signal: str = "SIGTERM", force: bool = False, grace_ms: int | None = None
) -> dict:
    """Ends the terminal's processes and frees it (the Agent Client Protocol's release); the record stays."""
    record = session_get_for(user=actor.user, terminal_id=terminal_id)
    signal = "SIGKILL" if force else signal
    grace = 0.0 if force else (None if grace_ms is None else grace_ms / 1000)
    kill_grace = settings.TERMINALS["KILL_GRACE_MS"] / 1000 if grace is None else grace
    require_audit_writable()
    # The worker may take the whole grace period and then a few seconds to reap.
    data = _ask_worker(record, protocol.TERMINATE, worker_client.default_timeout() + kill_grace + 5,
                       signal=signal, grace=grace)
    forget_record(record.id)
    audit(actor, "delete", terminal_id=record.id, signal=signal, exitCode=data["exitCode"], endSignal=data["signal"])
    return data


def _require_active(record: TerminalSession) -> None:
    if not record.is_active:
        raise terminal_inactive(record.id, record.status, released=not record.holds_output)


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


def session_newest_output(*, actor: Actor, terminal_id) -> dict:
    """The output as a terminal shows it, plain text: the newest outputByteLimit bytes (or the whole buffer)."""
    record = session_get_for(user=actor.user, terminal_id=terminal_id)
    limit = record.output_byte_limit or settings.TERMINALS["MAX_BUFFER_BYTES"]
    return _ask_worker(record, protocol.NEWEST, limit=limit)


def session_follow(*, actor: Actor, terminal_id, from_byte: int | None):
    """The terminal's output from from_byte, live: an async stream of worker.follow.Event, which ends with an error
    event once the actor's access to the terminal is taken away (access.py)."""
    from .remote.follow import follow

    record = session_get_for(user=actor.user, terminal_id=terminal_id)
    channel = _hosting_channel(record)
    audit(actor, "follow", terminal_id=record.id, fromByte=from_byte)
    return follow(str(record.id), channel, from_byte, actor)


WAIT_POLL_SECONDS = 0.1
PATTERN_SECONDS = 0.2  # the longest one search may take: a pattern that backtracks for ever is cut off
MAX_PATTERN = 1000


def session_wait_output(*, actor: Actor, terminal_id, pattern: str = "", timeout_ms: int, from_byte: int | None = None,
                        until_input: bool = True) -> dict:
    """Waits until the output from from_byte (default: where it stood at the last input, so nothing printed since is
    missed) matches pattern (a regular expression, escape sequences stripped), or the foreground program waits for
    input (until_input), or the process ends, or timeout_ms passes. Answers the outcome and what was printed."""
    import regex

    record = session_get_for(user=actor.user, terminal_id=terminal_id)
    if len(pattern) > MAX_PATTERN:
        raise invalid("pattern", f"longer than {MAX_PATTERN} characters")
    try:
        compiled = regex.compile(pattern) if pattern else None
    except regex.error as problem:
        raise invalid("pattern", f"not a regular expression: {problem}") from None
    start = from_byte if from_byte is not None else _ask_worker(record, protocol.STATS).get("lastInputByte", 0)
    timeout_ms = wait_bound_ms(actor, timeout_ms)
    audit(actor, "wait_output", terminal_id=record.id, pattern=pattern, fromByte=start, timeoutMs=timeout_ms)
    deadline = time.monotonic() + timeout_ms / 1000
    limit = settings.TERMINALS["MAX_READ_BYTES"]
    text, position, first, truncated = "", start, None, False
    hold, checked = access.hold_of(actor, record.id), time.monotonic()
    read_after_waiting = False
    with live_connections.holding(actor.user):  # a wait is a live connection of its user, under the same cap
        while True:
            if time.monotonic() - checked >= access.CHECK_SECONDS:  # access taken away meanwhile ends the wait
                access.require(hold)
                checked = time.monotonic()
            # Only what is new each round; what was read stays, up to the last MAX_READ_BYTES characters.
            # What programs printed: the echo of typed input is no answer to it (runtime/echo.py).
            read = _ask_worker(record, protocol.BYTES, from_byte=position, max_bytes=limit, strip_ansi=True,
                               stream=None, without_echo=True)
            first = read["fromByte"] if first is None else first
            truncated = truncated or read["truncated"] or len(text) + len(read["chunk"]) > limit
            text = (text + read["chunk"])[-limit:]
            position = read["nextByte"]
            outcome, matched = _wait_outcome(record, compiled, text, read, until_input, deadline)
            if outcome == "waiting_for_input" and not read_after_waiting:
                # Seen waiting after the output was read: what it printed just before (its prompt) may have come
                # between the two. Read once more, and search it, before answering.
                read_after_waiting = True
                continue
            if outcome is not None:
                return {"terminalId": str(record.id), "outcome": outcome, "match": matched, "output": text,
                        "fromByte": first, "nextByte": position, "truncated": truncated,
                        "exitStatus": read["exitStatus"]}
            time.sleep(WAIT_POLL_SECONDS)


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


def session_screen(*, actor: Actor, terminal_id) -> dict:
    record = session_get_for(user=actor.user, terminal_id=terminal_id)
    return _ask_worker(record, protocol.SCREEN)


def session_resize(*, actor: Actor, terminal_id, cols: int, rows: int) -> dict:
    record = session_get_for_typing(user=actor.user, terminal_id=terminal_id)
    cols, rows = checked_window_size(cols, rows)
    _require_active(record)
    require_audit_writable()
    data = _ask_worker(record, protocol.RESIZE, cols=cols, rows=rows)
    audit(actor, "resize", terminal_id=record.id, cols=cols, rows=rows)
    return data


def session_signal(*, actor: Actor, terminal_id, signal: str) -> dict:
    """Sends a signal to the terminal's foreground process group, as Ctrl-C does."""
    record = session_get_for_typing(user=actor.user, terminal_id=terminal_id)
    _require_active(record)
    require_audit_writable()
    data = _ask_worker(record, protocol.SIGNAL, signal=signal)
    audit(actor, "signal", terminal_id=record.id, signal=signal, processGroup=data["processGroup"])
    return data


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


def session_kill(*, actor: Actor, terminal_id, signal: str = "SIGKILL") -> dict:
    """Ends the terminal's processes but keeps its output readable (the Agent Client Protocol's kill)."""
    record = session_get_for(user=actor.user, terminal_id=terminal_id)
    kill_grace = settings.TERMINALS["KILL_GRACE_MS"] / 1000
    require_audit_writable()
    data = _ask_worker(record, protocol.KILL, worker_client.default_timeout() + kill_grace + 5, signal=signal)
    forget_record(record.id)
    audit(actor, "kill", terminal_id=record.id, signal=signal, exitCode=data["exitCode"], endSignal=data["signal"])
    return data


def session_command_run(*, actor: Actor, terminal_id, command: str, timeout_ms: int, wait: bool, read: dict) -> dict:
    """Runs one command in a shell terminal; with wait, answers when it ends, stops at a prompt, or times out."""
    record = session_get_for_typing(user=actor.user, terminal_id=terminal_id)
    _require_active(record)
    # Like input, the command is on record before it reaches the terminal.
    audit(actor, "command", terminal_id=record.id, outcome="sent", command=command)
    return worker_client_wait(record, protocol.COMMAND_RUN, _wait_seconds(actor, timeout_ms) if wait else 0,
                              {"command": command, "wait": wait, "read": read, "actor": actor.as_dict()}, actor)


def session_command_get(*, actor: Actor, terminal_id, command_id: str, read: dict) -> dict:
    record = session_get_for(user=actor.user, terminal_id=terminal_id)
    return _ask_worker(record, protocol.COMMAND_GET, command_id=command_id, read=read)


def session_command_wait(*, actor: Actor, terminal_id, command_id: str, timeout_ms: int, read: dict) -> dict:
    record = session_get_for(user=actor.user, terminal_id=terminal_id)
    return worker_client_wait(record, protocol.COMMAND_WAIT, _wait_seconds(actor, timeout_ms),
                              {"command_id": command_id, "read": read}, actor)


def session_command_list(*, actor: Actor, terminal_id) -> dict:
    record = session_get_for(user=actor.user, terminal_id=terminal_id)
    return _ask_worker(record, protocol.COMMAND_LIST)


def health() -> dict:
    """Whether the database and a worker answer; never raises."""
    database_ok = _database_answers()
    try:
        ping = worker_client.request_sync(protocol.CREATE_CHANNEL, protocol.PING, reply_within=2.0)
        worker = {"ok": True, "id": ping["worker"], "isolation": ping.get("isolation"),
                  "commandIntegrity": ping.get("commandIntegrity")}
    except ServiceError as error:
        worker = {"ok": False, "error": error.default_code}
    active = TerminalSession.objects.active().count() if database_ok else None
    return {
        "status": "healthy" if database_ok and worker["ok"] else "degraded",
        "uptime": round(time.monotonic() - STARTED, 3),
        "activeTerminals": active,
        "version": settings.VERSION,
        "worker": worker,
        "workers": workers_report() if database_ok else None,
        "database": {"ok": database_ok},
        "isolation": isolation(),
    }


def liveness() -> dict:
    """That this process answers: nothing else is asked (no database, no channel layer)."""
    return {"status": "alive", "uptime": round(time.monotonic() - STARTED, 3), "version": settings.VERSION}


def readiness() -> dict:
    """Whether this process can serve requests now: its database answers, the channel layer carries a ping to a
    worker and back, and at least one worker beats. Each check is reported, with what failed."""
    # A server that is stopping reports not ready, so a load balancer sends nothing new its way.
    checks = {"accepting": not lifecycle.stopping(), "database": _database_answers()}
    try:
        worker_client.request_sync(protocol.CREATE_CHANNEL, protocol.PING, reply_within=2.0)
        checks["channelLayer"] = True
    except ServiceError:
        checks["channelLayer"] = False
    workers = workers_report() if checks["database"] else []
    checks["liveWorker"] = any(worker["alive"] for worker in workers)
    return {"status": "ready" if all(checks.values()) else "not_ready", "checks": checks, "workers": workers}


def workers_report() -> list[dict]:
    """Every worker that has not stopped (and those stopped in the last hour): its host, pid, heartbeat age,
    whether it is alive (beating, and not judged gone by another worker: a killed one is dead as soon as its
    terminals are marked lost), since when it is judged gone, and how many active terminals it holds."""
    now = timezone.now()
    recent = Q(stopped__isnull=True) | Q(stopped__gte=now - timedelta(hours=1))
    live = set(Worker.objects.live().values_list("id", flat=True))
    rows = (Worker.objects.filter(recent)
            .annotate(active_terminals=Count("terminals", filter=Q(terminals__status="active")))
            .order_by("hostname", "started"))
    return [{"id": worker.id, "hostname": worker.hostname, "pid": worker.pid, "alive": worker.id in live,
             "heartbeatAgeMs": max(0, round((now - worker.last_seen).total_seconds() * 1000)),
             "stopped": worker.stopped.isoformat() if worker.stopped else None,
             "lost": worker.lost.isoformat() if worker.lost else None, "activeTerminals": worker.active_terminals}
            for worker in rows]


def confinement_report() -> dict:
    """How terminals are kept apart here: who they run as, whether users are separated, and the per-terminal
    limits (enforced by cgroups where the worker can write them)."""
    config = settings.TERMINALS
    return {**isolation(), "cgroups": config["CGROUPS"], "limits": {
        "processes": config["LIMIT_PROCESSES"], "openFiles": config["LIMIT_OPEN_FILES"],
        "memoryMb": config["LIMIT_MEMORY_MB"], "cpuCores": config["LIMIT_CPU_CORES"]}}


def _database_answers() -> bool:
    try:
        connection.ensure_connection()
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        return True
    except Exception:  # noqa: BLE001 - health reports, it does not fail
        return False

