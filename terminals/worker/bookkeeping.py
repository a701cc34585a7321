"""Database work of the terminal worker (synchronous; the worker runs it off its event loop, in order)."""

from __future__ import annotations

import logging
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone as dt_timezone
from typing import NamedTuple

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import DatabaseError, connection, transaction
from django.db.models.functions import Now
from django.utils import timezone

from ..plumbing import clock
from ..ids import uuid_keys
from ..audit import SYSTEM, audit, audit_carried
from ..exceptions import AuditUnavailable
from ..models import AuditEvent, Recording, TerminalSession, Worker
from ..runtime.errors import SessionLimitReached
from ..runtime.keeping import holder_pid
from ..runtime.processes import process_alive
from ..runtime.pty import ExitStatus

logger = logging.getLogger(__name__)
Status = TerminalSession.Status
EXITED, KILLED, TIMED_OUT, LOST = Status.EXITED, Status.KILLED, Status.TIMED_OUT, Status.LOST


def worker_register(worker_id: str, channel: str, hostname: str, pid: int, space: str = "") -> Worker:
    # Heartbeats carry the database's time, never this host's: liveness is judged by that one clock.
    clock.measure()
    # A worker restarted by its keeper comes back under the same id (runtime/keeper.py): its row is renewed.
    worker, _ = Worker.objects.update_or_create(id=worker_id, defaults={
        "channel": channel, "hostname": hostname, "pid": pid, "process_space": space, "started": Now(),
        "last_seen": Now(), "stopped": None})
    return worker


def terminals_adopted(worker_id: str, adopted: dict[str, int], failed: dict[str, str]) -> None:
    """Audits a worker's restart under its keeper, and each terminal it took back (terminal id -> pid) or could
    not (terminal id -> why: it runs on, held by the keeper)."""
    audit(SYSTEM, "worker_restart", worker=worker_id, adopted=len(adopted), notAdopted=len(failed))
    for terminal_id, pid in adopted.items():
        audit(SYSTEM, "adopt", terminal_id=terminal_id, worker=worker_id, pid=pid,
              reason="its worker restarted; the keeper held it meanwhile")
    for terminal_id, why in failed.items():
        audit(SYSTEM, "adopt", outcome="ADOPTION_FAILED", terminal_id=terminal_id, worker=worker_id, reason=why)


def worker_alive(worker_id: str) -> None:
    """Refreshes the worker's heartbeat alone, and its view of the database's clock, from the heartbeat's own
    thread (Upkeep.keep_alive), which keeps its connection between beats: with every connection the database
    allows taken by others, a new one could not be opened and the worker would look gone. A connection that
    failed is dropped, and the next beat opens another."""
    try:
        Worker.objects.filter(pk=worker_id).update(last_seen=Now())
        clock.measure()  # the database's clock, in which the worker judges request deadlines
    except BaseException:
        connection.close()
        raise


class Beat(NamedTuple):
    vanished: list[str]  # hosted terminals whose record was deleted
    disowned: list[str]  # hosted terminals given a final state while this worker was judged gone, not taken back
    readopted: list[str]  # hosted terminals marked lost while this worker was judged gone, active again
    revived: bool  # this worker had been judged gone (Worker.lost), and is live again
    heartbeats: dict[str, datetime]  # the heartbeat of every other worker not stopped or judged gone


def worker_beat(worker_id: str, activity: dict[str, float], running: frozenset[str] = frozenset()) -> Beat:
    """Refreshes the worker's heartbeat and the last activity of its terminals (activity: every hosted one;
    running: those whose process still runs).

    A worker judged gone while it was only cut off (from the database, or frozen) re-registers here and takes back
    its terminals that were marked lost meanwhile and still run: terminals never move to another worker, so
    nothing else can have taken them over, and ending them would lose what only this worker holds. It returns
    the hosted terminals that have no record any more (deleted under the running terminal), and those given a
    final state it cannot take back (released, or lost and no longer running here).
    """
    revived = bool(Worker.objects.filter(pk=worker_id, lost__isnull=False).update(lost=None))
    Worker.objects.filter(pk=worker_id).update(last_seen=Now())
    heartbeats = dict(Worker.objects.filter(stopped__isnull=True, lost__isnull=True).exclude(pk=worker_id)
                      .values_list("id", "last_seen"))
    if not activity:
        return Beat(vanished=[], disowned=[], readopted=[], revived=revived, heartbeats=heartbeats)
    rows = list(TerminalSession.objects.filter(pk__in=list(activity))
                .only("id", "last_activity", "worker_id", "status", "released"))
    recorded = {str(row.id) for row in rows}
    changed, disowned, readopted = [], [], []
    for row in rows:
        if str(row.worker_id) != str(worker_id):
            continue  # its worker was taken away from the record; the record is still there
        if row.status == LOST and str(row.id) in running and _readopt(row.id, worker_id):
            readopted.append(str(row.id))
            continue
        if row.status == LOST or row.released is not None:
            disowned.append(str(row.id))
            continue
        seen = datetime.fromtimestamp(activity[str(row.id)], tz=dt_timezone.utc)
        if seen > row.last_activity:
            row.last_activity = seen
            changed.append(row)
    TerminalSession.objects.bulk_update(changed, ["last_activity"])
    return Beat(vanished=[terminal_id for terminal_id in activity if terminal_id not in recorded], disowned=disowned,
                readopted=readopted, revived=revived, heartbeats=heartbeats)


def _readopt(terminal_id, worker_id: str) -> bool:
    """A lost terminal its worker still runs is active again, audited once; only `lost` is undone (it is the
    only final state another worker gives), and only on this worker's record."""
    with transaction.atomic():
        if not TerminalSession.objects.filter(pk=terminal_id, worker_id=worker_id, status=LOST).update(
                status=Status.ACTIVE, ended=None, released=None):
            return False
        audit(SYSTEM, "readopt", terminal_id=terminal_id, reason="it was marked lost while its worker could not "
              "be seen; the worker still runs it and took it back")
    return True


def vanished_end(terminal_id: str, status: ExitStatus | None) -> None:
    """Audits the end of a terminal whose record was deleted while it ran (the worker ended its processes)."""
    status = status or ExitStatus(None, "SIGKILL")
    audit(SYSTEM, "vanished", terminal_id=terminal_id, reason="its record was deleted while it ran; its processes "
          "were ended", exitCode=status.exit_code, signal=status.signal)


LEASE_EXPIRED = "LEASE_EXPIRED"  # the outcome of a detach its worker audited: no web process renewed the client


def lease_expired(terminal_id: str, connection: str, actor: dict) -> None:
    """Audits the detach of a WebSocket whose web process stopped renewing it (remote/leases.py), unless that
    process wrote the detach itself (its detach to the worker was what got lost): one detach row per connection."""
    if AuditEvent.objects.filter(terminal_id=terminal_id, action="detach", details__connection=connection).exists():
        return
    audit_carried(actor, "detach", outcome=LEASE_EXPIRED, terminal_id=terminal_id, connection=connection,
                  closeCode=None, reason="its web process stopped renewing the connection (it was killed, or lost "
                  "the channel layer) and the worker stopped streaming to it")


def worker_channels_except(worker_ids: list[str], space: str, hostname: str = "") -> list[str]:
    """The channels of the live workers other than these (of that host only, when given), leaving out those of this
    host whose process is gone."""
    workers = Worker.objects.live().exclude(pk__in=worker_ids)
    if hostname:
        workers = workers.filter(hostname=hostname)
    return [worker.channel for worker in workers if not _process_gone(worker, space)]


def worker_stop(worker_id: str, statuses: dict[str, ExitStatus | None]) -> None:
    """Closes the records of every terminal the worker ended on its way out (those that still have one)."""
    for session_id, status in statuses.items():
        session_end(session_id, status or ExitStatus(None, "SIGKILL"), KILLED, release=True, audit_action="shutdown")
    Worker.objects.filter(pk=worker_id).update(stopped=timezone.now())


def sessions_mark_lost(space: str, own_worker_id: str = "", silent: dict[str, datetime] | None = None) -> dict[str, bool]:
    """Judges gone the workers that are, gives a final state to every terminal of a gone worker, and returns
    those terminals, each with whether the caller may end its processes (its worker's process is known gone).

    A worker is gone when it stopped; at once when it ran in this process space and its process no longer runs (a
    crash and a quick restart; a zombie has stopped running); or when the caller saw its heartbeat unchanged over
    three heartbeats of its own (silent: worker id to that heartbeat, worker/liveness.py), and it still is. Never
    because its heartbeat is old by the clock: after a database outage every heartbeat is. A worker judged gone
    is marked so (Worker.lost: /api/health shows it dead) until it beats again.
    Its active terminals become lost; its ended ones whose output it still held (exited or killed, not
    released) are released and keep their status and exit code: that output was in the dead worker's memory.
    Either way every request for them then answers like any ended terminal (409 TERMINAL_INACTIVE), instead of
    waiting forever for a worker that will not come back. A worker that was only silent takes its terminals back
    when it beats again (worker_beat), so their processes are left alone.
    A worker never marks its own terminals lost, however late its own heartbeat.
    """
    candidates = Worker.objects.filter(stopped__isnull=True, lost__isnull=True).exclude(pk=own_worker_id)
    for worker in candidates:
        if _process_gone(worker, space):
            Worker.objects.filter(pk=worker.pk, lost__isnull=True).update(lost=Now())
    for worker_id, heartbeat in (silent or {}).items():
        # Unless it beat since: then it is not silent. (Not equality: SQLite writes Now() in milliseconds, and
        # compares the microseconds of the value read back as text.)
        candidates.filter(pk=worker_id, last_seen__lte=heartbeat).update(lost=Now())
    live = [*Worker.objects.filter(stopped__isnull=True, lost__isnull=True).values_list("id", flat=True), own_worker_id]
    orphans = list(
        TerminalSession.objects.filter(released__isnull=True).exclude(worker_id__in=live).select_related("worker")
        .only("id", "status", "worker__process_space", "worker__pid")
    )
    for orphan in orphans:
        _end_orphan(orphan.id, orphan.status)
    return {str(orphan.id): orphan.worker is not None and _process_gone(orphan.worker, space) for orphan in orphans}


def _end_orphan(session_id, status: str) -> None:
    """Lost if it was active, released either way; audited once, by whichever worker got there first."""
    unreleased = TerminalSession.objects.filter(pk=session_id, released__isnull=True)
    if status == Status.ACTIVE:
        if unreleased.filter(status=Status.ACTIVE).update(status=LOST, ended=Now(), released=Now()):
            audit(SYSTEM, "lost", terminal_id=session_id, reason="its worker stopped answering")
    elif unreleased.update(released=Now()) and status != LOST:
        audit(SYSTEM, "lost", terminal_id=session_id, status=status,
              reason="its worker stopped answering; the output it held is gone")


def sessions_lost_among(terminal_ids, space: str = "") -> list[str]:
    """Which of these terminal ids (strings; anything that is not a terminal id is skipped) are lost, leaving out
    those of a worker whose process still runs in this process space: one frozen while judged gone takes its
    terminals back when it resumes (worker_beat)."""
    keys = uuid_keys(terminal_ids)
    lost = []
    for start in range(0, len(keys), 500):  # a host may carry thousands: stay under SQLite's parameter limit
        batch = keys[start : start + 500]
        rows = (TerminalSession.objects.filter(pk__in=batch, status=LOST).select_related("worker")
                .only("id", "worker__process_space", "worker__pid"))
        lost += [str(row.id) for row in rows if not _still_running_here(row.worker, space)]
    return lost


def _still_running_here(worker: Worker | None, space: str) -> bool:
    return worker is not None and bool(space) and worker.process_space == space and process_alive(worker.pid)


def _process_gone(worker: Worker, space: str) -> bool:
    """Whether the worker's process is known to be gone: only when its pid belongs to the processes this one sees.
    Hostnames do not say that (two hosts may share one; containers share a kernel but not their pids)."""
    if not space or worker.process_space != space or worker.pid == holder_pid():
        return False
    return not process_alive(worker.pid)


def session_reserve(message: dict, *, worker_id: str) -> TerminalSession:
    """Counts the owner's active terminals and inserts this one's row (no pid yet) in one transaction, before
    anything starts. Concurrent creates of one user, on one worker or several, are counted one after another,
    so none gets past the limit, and a refused one has started nothing. A database that refuses the row raises
    AuditUnavailable: nothing starts off the record."""
    limit = settings.TERMINALS["MAX_PER_USER"]
    owner_id = message["owner_id"]  # the web process authenticated this user
    with _creation_on_record(message["id"], "its record"), transaction.atomic():
        # The owner's row is the lock on PostgreSQL. SQLite's IMMEDIATE transactions already run one at a time, and
        # it has no row locks to take: the statement would only cost time.
        if connection.features.has_select_for_update:
            get_user_model().objects.select_for_update().filter(pk=owner_id).first()
        if _active_terminals_of(owner_id) >= limit:
            raise SessionLimitReached(f"you already have {limit} active terminals; end one with "
                                      "DELETE /api/terminals/{id} first", limit=limit)
        return _session_insert(message, worker_id=worker_id)


def _active_terminals_of(owner_id: int) -> int:
    """TerminalSession.objects.active().filter(owner_id=...).count(), by a statement written once: the ORM compiled
    it anew for every create, most of the count's time (bench/ANALYSIS.md). The same SQL on SQLite and PostgreSQL,
    served by the (owner, status) index."""
    quote, meta = connection.ops.quote_name, TerminalSession._meta
    sql = (f"SELECT COUNT(*) FROM {quote(meta.db_table)} WHERE {quote(meta.get_field('owner').column)} = %s "
           f"AND {quote(meta.get_field('status').column)} = %s")
    with connection.cursor() as cursor:
        cursor.execute(sql, [owner_id, TerminalSession.Status.ACTIVE.value])
        return cursor.fetchone()[0]


def session_started(record: TerminalSession, pid: int, creation: dict | None = None) -> TerminalSession:
    """The reserved record, now with its pid, and the creation's audit row (creation: the actor, as
    Actor.as_dict(), and the details) in the same transaction. Raises AuditUnavailable when the database refuses
    either: the caller ends the terminal, so none runs off the record. Not read back: nothing but this worker,
    which started it a moment ago and records its end after this (its database work runs in order), changes it
    meanwhile."""
    with _creation_on_record(record.pk, "its pid"), transaction.atomic():
        TerminalSession.objects.filter(pk=record.pk).update(pid=pid)
        if creation is not None:
            audit_carried(creation["actor"], "create", terminal_id=record.pk, **creation["details"], pid=pid)
    record.pid = pid
    return record


@contextmanager
def _creation_on_record(terminal_id, what: str):
    """A database that refuses a create's writes refuses the create: 503 AUDIT_UNAVAILABLE, as a refused audit row
    (which raises it itself) does."""
    try:
        yield
    except DatabaseError as error:
        logger.error("terminal %s: %s cannot be written, the create is refused: %s", terminal_id, what, error)
        raise AuditUnavailable(details={"action": "create"}) from error


def session_abandon(session_id: str) -> None:
    """Removes the row of a terminal that was reserved but never started."""
    TerminalSession.objects.filter(pk=session_id, pid__isnull=True).delete()


def _session_insert(message: dict, *, worker_id: str) -> TerminalSession:
    record = TerminalSession.objects.create(
        id=message["id"],
        owner_id=message["owner_id"],
        api_key_id=message.get("api_key_id"),
        name=message.get("name", ""),
        pid=None,
        shell=message.get("shell", ""),
        command=message.get("command", ""),
        args=message.get("args", []),
        pty=message.get("pty", True),
        output_byte_limit=message.get("output_byte_limit"),
        session_id=message.get("session_id", ""),
        cwd=message["cwd"],
        cols=message["cols"],
        rows=message["rows"],
        worker_id=worker_id,
        recorded=bool(message.get("recording")),
    )
    plan = message.get("recording")
    if plan:
        Recording.objects.create(terminal=record, host=plan["host"], path=plan["path"],
                                 record_input=plan["record_input"])
    return record


def session_end(
    session_id: str, status: ExitStatus, ended_as: str | None, *, release: bool, audit_action: str | None = None
) -> TerminalSession | None:
    """Records how a terminal ended (when ended_as is given and it was still active) and whether it was released.

    audit_action names the system's audit event for an end nobody requested (exit, timeout, shutdown).
    Returns None, recording nothing, when the terminal has no record any more.
    """
    with transaction.atomic():
        record = TerminalSession.objects.select_related("owner").filter(pk=session_id).first()
        if record is None:
            logger.warning("terminal %s ended but has no record any more; nothing to update", session_id)
            return None
        recorded = ended_as is not None and record.mark_ended(
            ended_as, exit_code=status.exit_code, signal=status.signal, release=release
        )
        if recorded and audit_action:
            audit(SYSTEM, audit_action, terminal_id=record.id, exitCode=status.exit_code, signal=status.signal)
        elif release and record.released is None:
            TerminalSession.objects.filter(pk=session_id).update(released=timezone.now())
            record.refresh_from_db()
    return record


def session_resize(session_id: str, cols: int, rows: int) -> None:
    TerminalSession.objects.filter(pk=session_id).update(cols=cols, rows=rows)


def command_audit(terminal_id: str, command: dict, actor: dict) -> None:
    """Records how an API command ended, under the user who ran it."""
    audit_carried(actor, "command_end", terminal_id=terminal_id, **command)


def recording_finished(terminal_id: str, size: int, sha256: str, capped: bool) -> None:
    """Seals a finished recording: its size and SHA-256 on its row and in the hash-chained audit trail."""
    with transaction.atomic():
        recording = Recording.objects.filter(pk=terminal_id).first()
        if recording is None:
            return  # the terminal's record was deleted meanwhile
        Recording.objects.filter(pk=terminal_id).update(finished=timezone.now(), size=size, sha256=sha256,
                                                        capped=capped)
        audit(SYSTEM, "recording_seal", terminal_id=terminal_id, host=recording.host, path=recording.path, size=size,
              sha256=sha256, capped=capped)


def recordings_expired(hostname: str, days: int) -> list[tuple[str, str]]:
    """(terminal id, path) of this host's finished recordings older than days, not yet deleted."""
    before = timezone.now() - timedelta(days=days)
    rows = Recording.objects.filter(host=hostname, finished__lt=before, deleted__isnull=True)
    return [(str(terminal_id), path) for terminal_id, path in rows.values_list("terminal_id", "path")[:1000]]


def recording_deleted(terminal_id: str, days: int) -> None:
    with transaction.atomic():
        recording = Recording.objects.filter(pk=terminal_id, deleted__isnull=True).first()
        if recording is None:
            return
        Recording.objects.filter(pk=terminal_id).update(deleted=timezone.now())
        audit(SYSTEM, "recording_delete", terminal_id=terminal_id, host=recording.host, path=recording.path,
              sha256=recording.sha256, reason=f"older than the retention period of {days} days")
