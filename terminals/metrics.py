"""Metrics in the Prometheus text format, kept with prometheus_client (docs/operations.md).

Each process counts what passes through it: a web process its requests, refusals, audit failures and live
clients, a worker the output its terminals wrote. Terminals by status and worker, and workers' liveness, come from
the database at each scrape, so any process gives the whole deployment's view of them. Staff read them at
GET /api/metrics; TERMINALS_METRICS_BIND (host:port) also serves them without authentication on a separate
address, one per process, for a scraper on a private network.
"""

from __future__ import annotations

import logging
import time

from django.conf import settings
from django.db import DatabaseError, connection
from django.db.models import Count
from prometheus_client import REGISTRY, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily

logger = logging.getLogger(__name__)

REQUESTS = Counter("terminals_http_requests", "HTTP requests answered, by endpoint, method and status",
                   ["endpoint", "method", "status"])
LATENCY = Histogram("terminals_http_request_duration_seconds", "Time to answer an HTTP request (a follow: to start it)",
                    ["endpoint", "method"],
                    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 600))
REFUSED = Counter("terminals_refused_requests", "Requests refused, by error code (RATE_LIMITED: throttled)", ["code"])
AUDIT_FAILURES = Counter("terminals_audit_write_failures", "Audit rows the database did not take (the action was refused)")
LIVE_CLIENTS = Gauge("terminals_live_clients", "Clients following a terminal live now, by interface", ["interface"])


class RequestMetrics:
    """Django middleware: counts each request and its time by endpoint (the route's name, never the raw path, so
    terminal ids do not make a series each)."""

    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request):
        started = time.perf_counter()
        response = self.get_response(request)
        match = getattr(request, "resolver_match", None)
        endpoint = (match.view_name or match.route) if match is not None else "unmatched"
        LATENCY.labels(endpoint, request.method).observe(time.perf_counter() - started)
        REQUESTS.labels(endpoint, request.method, str(response.status_code)).inc()
        return response


class DeploymentCollector:
    """Terminals by status and worker, and each worker's liveness, read from the database at scrape time."""

    def describe(self):  # what registering needs, without a query (there may be no database yet)
        return list(self._families())

    def _families(self):
        return (
            GaugeMetricFamily("terminals_terminals", "Terminals by status and hosting worker", labels=["status", "worker"]),
            GaugeMetricFamily("terminals_worker_up", "1 for a worker that beats, 0 for one gone silent",
                              labels=["worker", "hostname"]),
            GaugeMetricFamily("terminals_database_up", "1 when the database answered this scrape"),
        )

    def collect(self):
        from .models import TerminalSession, Worker

        terminals, workers, database = self._families()
        try:
            connection.close_if_unusable_or_obsolete()  # the scrape thread's connection, after a database restart
            rows = (TerminalSession.objects.filter(released__isnull=True).values("status", "worker_id")
                    .annotate(count=Count("id")))
            for row in rows:
                terminals.add_metric([row["status"], row["worker_id"] or ""], row["count"])
            live = set(Worker.objects.live().values_list("id", flat=True))
            for worker in Worker.objects.filter(stopped__isnull=True):
                workers.add_metric([worker.id, worker.hostname], 1 if worker.id in live else 0)
            database.add_metric([], 1)
        except DatabaseError as error:
            logger.warning("metrics: the database did not answer: %s", error)
            database.add_metric([], 0)
        yield from (terminals, workers, database)


REGISTRY.register(DeploymentCollector())


def serve_on_separate_bind() -> None:
    """Serves /metrics on TERMINALS_METRICS_BIND in a thread of this process, when it is set."""
    bind = settings.TERMINALS["METRICS_BIND"]
    if not bind:
        return
    host, _, port = bind.rpartition(":")
    server, _thread = start_http_server(int(port), addr=host.strip("[]") or "127.0.0.1")
    logger.info("metrics served on http://%s:%d/metrics", host or "127.0.0.1", server.server_port)
