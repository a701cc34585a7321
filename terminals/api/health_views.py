"""The service's own endpoints: health, liveness and readiness for probes (no key), and Prometheus metrics (staff)."""

from __future__ import annotations

from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest
from rest_framework import permissions
from rest_framework.views import APIView

from .. import sessions
from ..exceptions import ErrorEnvelope
from ..openapi import extend_schema
from . import responses as r
from .envelope import ERRORS, ok
from .strict import StrictRequest

HEALTH = r.enveloped(r.HealthSerializer)


class HealthView(StrictRequest, APIView):
    """Liveness of the service, its database and its worker; needs no key."""

    authentication_classes: list = []
    permission_classes = [permissions.AllowAny]
    throttle_classes: list = []
    audit_action = "health"

    @extend_schema(tags=["health"], responses={200: HEALTH, 503: HEALTH})
    def get(self, request):
        report = sessions.health()
        return ok(report, status=200 if report["status"] == "healthy" else 503)


class LivenessView(HealthView):
    """That the process answers, for a load balancer's liveness probe: asks nothing of the database or Redis."""

    audit_action = "health_live"

    @extend_schema(tags=["health"], summary="Liveness: the process answers",
                   responses={200: r.enveloped(r.LivenessSerializer)})
    def get(self, request):
        return ok(sessions.liveness())


class ReadinessView(HealthView):
    """Whether this process can serve now, for a load balancer's readiness probe: 503 with what failed."""

    audit_action = "health_ready"

    @extend_schema(tags=["health"], summary="Readiness: database, channel layer and a live worker",
                   responses={200: r.enveloped(r.ReadinessSerializer), 503: r.enveloped(r.ReadinessSerializer)})
    def get(self, request):
        report = sessions.readiness()
        return ok(report, status=200 if report["status"] == "ready" else 503)


class MetricsView(StrictRequest, APIView):
    """Prometheus metrics of this process and of the deployment (docs/operations.md); staff only."""

    permission_classes = [permissions.IsAdminUser]
    audit_action = "metrics"

    @extend_schema(tags=["health"], summary="Metrics in the Prometheus text format (staff)",
                   description="Requests and latencies by endpoint, refusals by code, audit write failures and live "
                               "clients of the process that answers; terminals by status and worker, and workers' "
                               "liveness, from the database. TERMINALS_METRICS_BIND serves the same on a separate "
                               "address without authentication.",
                   responses={(200, "text/plain"): OpenApiResponse(OpenApiTypes.STR, description="The Prometheus "
                                                                                                 "text format"),
                              **ERRORS, 403: ErrorEnvelope})
    def get(self, request):
        return HttpResponse(generate_latest(REGISTRY), content_type=CONTENT_TYPE_LATEST)
