"""Where a request goes: the worker that hosts a terminal (and whether it answers), or where a new one is created."""

from __future__ import annotations

from django.conf import settings
from django.db.models import Count, Q

from ..environment import invalid
from ..exceptions import TerminalNotFound, WorkerUnavailable, terminal_inactive
from ..models import TerminalSession, Worker
from ..remote import client as worker_client
from ..remote import protocol
from ..remote.here import current_worker

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
