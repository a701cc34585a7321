"""Health and readiness reports: whether the database, the channel layer and the workers answer; how terminals are
kept apart."""

from __future__ import annotations

import time
from datetime import timedelta

from django.conf import settings
from django.db import connection
from django.db.models import Count, Q
from django.utils import timezone

from ..plumbing import lifecycle
from ..environment import isolation
from ..exceptions import ServiceError
from ..models import TerminalSession, Worker
from ..remote import client as worker_client
from ..remote import protocol

STARTED = time.monotonic()


def health() -> dict:
    """Whether the database and a worker answer; never raises."""
    database_ok = _database_answers()
    try:
        ping = worker_client.request_sync(protocol.CREATE_CHANNEL, protocol.PING, reply_within=2.0)
        worker = {"ok": True, "id": ping["worker"], "uptime": ping.get("uptime"), "isolation": ping.get("isolation"),
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
    """Every worker that has not stopped (and those stopped in the last hour): its host, pid, when its process
    started (a worker restarted under its keeper keeps its id and gets a new start), heartbeat age,
    whether it is alive (beating, and not judged gone by another worker: a killed one is dead as soon as its
    terminals are marked lost), since when it is judged gone, and how many active terminals it holds."""
    now = timezone.now()
    recent = Q(stopped__isnull=True) | Q(stopped__gte=now - timedelta(hours=1))
    live = set(Worker.objects.live().values_list("id", flat=True))
    rows = (Worker.objects.filter(recent)
            .annotate(active_terminals=Count("terminals", filter=Q(terminals__status="active")))
            .order_by("hostname", "started"))
    return [{"id": worker.id, "hostname": worker.hostname, "pid": worker.pid, "alive": worker.id in live,
             "started": worker.started.isoformat(),
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
