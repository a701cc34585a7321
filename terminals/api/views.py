"""Thin DRF viewsets: parse the request, call one use case of sessions/, wrap the result in the envelope."""

from __future__ import annotations

import functools
import weakref

from django.http import HttpResponse, StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, PolymorphicProxySerializer
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest
from rest_framework import exceptions, mixins, pagination, permissions, renderers, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response
from rest_framework.views import APIView

from .. import json_input, live_connections, recordings, sessions
from ..audit import Actor
from ..audit_events import audit_events
from ..exceptions import NO_JSON, ErrorEnvelope, InvalidInput, NotFound
from ..openapi import extend_schema
from ..redaction import redact
from ..throttling import ApiKeyRateThrottle, CreateRateThrottle
from . import responses as r
from . import serializers as s
from .sse import server_sent_events

ERRORS = {code: ErrorEnvelope for code in (400, 401, 404, 409, 429, 500, 503)}


def ok(data=None, *, status: int = 200, message: str | None = None) -> Response:
    body = {"success": True}
    if message is not None:
        body["message"] = message
    if data is not None:
        body["data"] = data
    return Response(body, status=status)


def valid(serializer_class, data) -> dict:
    serializer = serializer_class(data=data)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


class StrictRequest:
    """What DRF would silently ignore is refused before the action runs, so a misspelt option never looks obeyed:
    a query parameter the action does not read (400 naming it and the one probably meant), and a body sent without
    a Content-Type (which DRF reads as no body at all). Bodies are checked by the serializers (RequestSerializer)."""

    # The serializer whose fields are the query parameters an action reads; an action not named here reads none.
    query_serializers: dict = {}
    extra_query_parameters: frozenset = frozenset()

    def initial(self, request, *args, **kwargs):
        super().initial(request, *args, **kwargs)
        if not request.content_type and _has_body(request):
            raise InvalidInput(f"the body has no Content-Type header; {NO_JSON}")
        reads = self.query_serializers.get(getattr(self, "action", None) or request.method.lower())
        if request.query_params:
            accepted = {*(_field_names(reads) if reads else ()), *self.extra_query_parameters}
            s.refuse_unknown(request.query_params.keys(), accepted, "query parameter")


@functools.cache
def _field_names(serializer_class) -> frozenset:
    # A serializer's fields are deep copies made per instance: asking for them on every poll cost a fifth of the
    # polls a web process serves (bench figure 10). Their names never change.
    return frozenset(serializer_class().fields)


def _has_body(request) -> bool:
    length = request.META.get("CONTENT_LENGTH") or "0"
    return (length.isdigit() and int(length) > 0) or "HTTP_TRANSFER_ENCODING" in request.META


class AsciicastRenderer(renderers.JSONRenderer):
    """Lets a client ask for the recording by its media type (Accept: application/x-asciicast); the file itself
    goes out as it is, and an error still as the JSON envelope."""

    media_type = recordings.CONTENT_TYPE
    format = "cast"


@extend_schema(tags=["terminals"])
class TerminalViewSet(StrictRequest, viewsets.ViewSet):
    """The seven endpoints of the REST contract, minus health."""

    lookup_value_regex = "[^/]+"
    throttle_classes = [ApiKeyRateThrottle, CreateRateThrottle]
    query_serializers = {
        "list": s.ListQuerySerializer, "destroy": s.TerminateSerializer, "output": s.OutputQuerySerializer,
        "command": s.ReadOptionsSerializer, "command_wait": s.WaitQuerySerializer, "wait": s.WaitQuerySerializer,
    }

    @extend_schema(parameters=[s.ListQuerySerializer], responses={200: r.enveloped(r.TerminalListSerializer), **ERRORS})
    def list(self, request):
        query = valid(s.ListQuerySerializer, request.query_params)
        session_filter = {"session_id": query["sessionId"]} if "sessionId" in query else None
        terminals = sessions.session_list(user=request.user, status=query["status"], session_filter=session_filter)
        return ok({"terminals": terminals, "count": len(terminals)})

    @extend_schema(request=s.TerminalCreateSerializer, responses={201: r.enveloped(r.TerminalCreatedSerializer), **ERRORS})
    def create(self, request):
        serializer = s.TerminalCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        created = sessions.session_create(actor=Actor.from_request(request), **serializer.use_case_arguments())
        return ok(created, status=201)

    @extend_schema(responses={200: r.enveloped(r.TerminalSerializer), **ERRORS})
    def retrieve(self, request, pk=None):
        return ok(sessions.session_detail(user=request.user, terminal_id=pk))

    @extend_schema(
        request=s.TerminateSerializer,
        parameters=[
            OpenApiParameter("signal", str, enum=s.SIGNALS, description="The first signal (default SIGTERM); also "
                             "accepted in the body"),
            OpenApiParameter("force", bool, description="SIGKILL at once, without the grace; also in the body"),
            OpenApiParameter("gracefulTimeoutMs", int, description="Milliseconds between the signal and SIGKILL; "
                             "also in the body"),
        ],
        responses={200: r.enveloped(r.TerminalSerializer, message=True), **ERRORS},
    )
    def destroy(self, request, pk=None):
        data = valid(s.TerminateSerializer, _query_and_body(request))
        ended = sessions.session_terminate(
            actor=Actor.from_request(request), terminal_id=pk, signal=data["signal"], force=data["force"],
            grace_ms=data.get("gracefulTimeoutMs"),
        )
        return ok(ended, message="Terminal terminated successfully")

    @extend_schema(request=s.TerminalInputSerializer, responses={200: r.enveloped(r.InputResultSerializer, message=True), **ERRORS})
    @action(detail=True, methods=["post"])
    def input(self, request, pk=None):
        data = valid(s.TerminalInputSerializer, request.data)
        sent = sessions.session_write(
            actor=Actor.from_request(request), terminal_id=pk, text=data["input"],
            append_newline=data["appendNewline"] and not data["eof"], close=data["eof"],
        )
        return ok(sent, message="Input sent successfully")

    @extend_schema(parameters=[s.OutputQuerySerializer],
                   responses={(200, "application/json"): PolymorphicProxySerializer(
                                  "OutputOrBytes", [r.enveloped(r.OutputSerializer), r.enveloped(r.BytesSerializer)], None),
                              (200, "text/event-stream"): OpenApiResponse(
                                  OpenApiTypes.STR, description="with follow=true: Server-Sent Events (output, gap, "
                                                                "exit), each with its byte offset as id"),
                              **ERRORS})
    @action(detail=True, methods=["get"])
    def output(self, request, pk=None):
        query = s.OutputQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        actor = Actor.from_request(request)
        if query.validated_data["follow"]:
            resume = json_input.byte_offset(request.headers.get("Last-Event-ID"))
            from_byte = resume if resume is not None else query.validated_data.get("fromByte")
            response = StreamingHttpResponse(_follow_events(actor, pk, from_byte), content_type="text/event-stream")
            response["Cache-Control"] = "no-cache"
            response["X-Accel-Buffering"] = "no"
            return response
        return ok(sessions.session_read(actor=actor, terminal_id=pk, options=query.options()))

    @extend_schema(responses={200: r.enveloped(r.StatsSerializer), **ERRORS})
    @action(detail=True, methods=["get"])
    def stats(self, request, pk=None):
        return ok(sessions.session_stats(actor=Actor.from_request(request), terminal_id=pk))


    # Commands (seed 001's execute_command / start_process, seed 002's Execute / GetOutput)

    @extend_schema(request=s.CommandRunSerializer, responses={200: r.enveloped(r.CommandSerializer), **ERRORS},
                   methods=["POST"])
    @extend_schema(responses={200: r.enveloped(r.CommandListSerializer), **ERRORS}, methods=["GET"])
    @action(detail=True, methods=["get", "post"])
    def commands(self, request, pk=None):
        actor = Actor.from_request(request)
        if request.method == "GET":
            return ok(sessions.session_command_list(actor=actor, terminal_id=pk))
        serializer = s.CommandRunSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        return ok(sessions.session_command_run(
            actor=actor, terminal_id=pk, command=data["command"], timeout_ms=data["timeoutMs"], wait=data["wait"],
            read=serializer.read(),
        ))

    @extend_schema(parameters=[s.ReadOptionsSerializer], responses={200: r.enveloped(r.CommandSerializer), **ERRORS},
                   operation_id="terminals_command_retrieve")
    @action(detail=True, methods=["get"], url_path=r"commands/(?P<command_id>[A-Za-z0-9_]+)")
    def command(self, request, pk=None, command_id=None):
        query = s.ReadOptionsSerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        return ok(sessions.session_command_get(
            actor=Actor.from_request(request), terminal_id=pk, command_id=command_id, read=query.read()
        ))

    @extend_schema(request=s.WaitQuerySerializer, parameters=[s.WaitQuerySerializer],
                   responses={200: r.enveloped(r.CommandSerializer), **ERRORS})
    @action(detail=True, methods=["post"], url_path=r"commands/(?P<command_id>[A-Za-z0-9_]+)/wait")
    def command_wait(self, request, pk=None, command_id=None):
        query = s.WaitQuerySerializer(data=_query_and_body(request))
        query.is_valid(raise_exception=True)
        return ok(sessions.session_command_wait(
            actor=Actor.from_request(request), terminal_id=pk, command_id=command_id,
            timeout_ms=query.validated_data["timeoutMs"], read=query.read(),
        ))

    # Processes (seed 001's stop_process, seed 003's wait_for_exit and kill)

    @extend_schema(request=s.SignalSerializer, responses={200: r.enveloped(r.SignalResultSerializer), **ERRORS})
    @action(detail=True, methods=["post"])
    def signal(self, request, pk=None):
        data = valid(s.SignalSerializer, _body(request))
        return ok(sessions.session_signal(actor=Actor.from_request(request), terminal_id=pk, signal=data["signal"]))

    @extend_schema(request=s.ResizeSerializer, responses={200: r.enveloped(s.ResizeSerializer), **ERRORS})
    @action(detail=True, methods=["post"])
    def resize(self, request, pk=None):
        data = valid(s.ResizeSerializer, _body(request))
        return ok(sessions.session_resize(actor=Actor.from_request(request), terminal_id=pk, **data))

    @extend_schema(request=s.WaitQuerySerializer, parameters=[s.WaitQuerySerializer],
                   responses={200: r.enveloped(r.WaitResultSerializer), **ERRORS})
    @action(detail=True, methods=["post"])
    def wait(self, request, pk=None):
        data = valid(s.WaitQuerySerializer, _query_and_body(request))
        return ok(sessions.session_wait_exit(actor=Actor.from_request(request), terminal_id=pk, timeout_ms=data["timeoutMs"]))

    @extend_schema(request=s.OutputWaitSerializer, responses={200: r.enveloped(r.OutputWaitResultSerializer), **ERRORS})
    @action(detail=True, methods=["post"], url_path="output/wait")
    def output_wait(self, request, pk=None):
        data = valid(s.OutputWaitSerializer, _body(request))
        return ok(sessions.session_wait_output(
            actor=Actor.from_request(request), terminal_id=pk, pattern=data["pattern"], timeout_ms=data["timeoutMs"],
            from_byte=data.get("fromByte"), until_input=data["untilInput"]))

    @extend_schema(request=s.SignalSerializer, responses={200: r.enveloped(r.TerminalSerializer), **ERRORS})
    @action(detail=True, methods=["post"])
    def kill(self, request, pk=None):
        body = _body(request)
        data = valid(s.SignalSerializer, {"signal": "SIGKILL", **body})
        return ok(sessions.session_kill(actor=Actor.from_request(request), terminal_id=pk, signal=data["signal"]))

    @extend_schema(responses={200: r.enveloped(r.ScreenSerializer), **ERRORS})
    @action(detail=True, methods=["get"])
    def screen(self, request, pk=None):
        return ok(sessions.session_screen(actor=Actor.from_request(request), terminal_id=pk))

    @extend_schema(summary="The terminal's recording, an asciicast v2 file (owner and staff; audited)",
                   responses={(200, recordings.CONTENT_TYPE): OpenApiResponse(
                                  OpenApiTypes.BINARY, description="asciicast v2: a JSON header line, then one JSON "
                                  "event per line ([seconds, \"o\" | \"i\" | \"r\" | \"m\", text]); plays with "
                                  "asciinema play, or in the dashboard"),
                              **ERRORS})
    @action(detail=True, methods=["get"], renderer_classes=[renderers.JSONRenderer, AsciicastRenderer])
    def recording(self, request, pk=None):
        playback = recordings.recording_open(actor=Actor.from_request(request), terminal_id=pk)
        response = StreamingHttpResponse(playback.chunks, content_type=recordings.CONTENT_TYPE)
        response["Content-Disposition"] = f'attachment; filename="{playback.filename}"'
        return response


def _body(request) -> dict:
    body = request.data if request.data else {}
    if not isinstance(body, dict):
        raise InvalidInput("body: must be a JSON object", {"fields": {"body": ["Must be a JSON object."]}})
    return body


def _query_and_body(request) -> dict:
    return {**request.query_params.dict(), **_body(request)}


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


class AuditPagination(pagination.PageNumberPagination):
    page_size = 100
    page_size_query_param = "pageSize"
    max_page_size = 1000

    def paginate_queryset(self, queryset, request, view=None):
        try:
            return super().paginate_queryset(queryset, request, view)
        except exceptions.NotFound:  # DRF's "Invalid page."
            size = self.get_page_size(request)
            pages = max(1, -(-queryset.count() // size))
            raise NotFound(f"page {redact(request.query_params.get('page', ''))[:20]!r} is past the end: there are "
                           f"{pages} pages of {size} events; ask for page 1 to {pages}", {"pages": pages}) from None

    def get_paginated_response(self, data):
        # The links repeat the query string: a key a client put there is not handed back.
        return ok({"count": self.page.paginator.count, "next": redact(self.get_next_link()),
                   "previous": redact(self.get_previous_link()), "events": data})

    def get_paginated_response_schema(self, schema):
        return {
            "type": "object",
            "properties": {
                "success": {"type": "boolean"},
                "data": {
                    "type": "object",
                    "properties": {
                        "count": {"type": "integer"},
                        "next": {"type": "string", "nullable": True},
                        "previous": {"type": "string", "nullable": True},
                        "events": schema,
                    },
                },
            },
        }


@extend_schema(tags=["audit"])
class AuditViewSet(StrictRequest, mixins.ListModelMixin, viewsets.GenericViewSet):
    """The audit trail: staff see every event, others their own. A misspelt filter is refused (StrictRequest), so it
    cannot look like a filter that matched everything."""

    serializer_class = s.AuditEventSerializer
    pagination_class = AuditPagination
    audit_action = "audit"
    query_serializers = {"list": s.AuditQuerySerializer}
    extra_query_parameters = frozenset({AuditPagination.page_query_param, AuditPagination.page_size_query_param})

    @extend_schema(parameters=[s.AuditQuerySerializer], responses={200: s.AuditEventSerializer(many=True), **ERRORS})
    def list(self, request, *args, **kwargs):
        return super().list(request, *args, **kwargs)

    def get_queryset(self):
        params = self.request.query_params
        query = valid(s.AuditQuerySerializer, {name: params[name] for name in params
                                               if name not in self.extra_query_parameters})
        return audit_events(
            user=self.request.user, terminal=query.get("terminal"), action=query.get("action"),
            outcome=query.get("outcome"), username=query.get("user"),
            since=query.get("sinceTime") or query.get("since"), until=query.get("untilTime") or query.get("until"),
            newest_first=query["ordering"] == "-at")


def _follow_events(actor: Actor, terminal_id, from_byte: int | None):
    """The follow stream's events, holding one of the user's live connection slots (429 LIMIT_REACHED past the cap)
    until the stream ends, or until it is dropped unstarted when its client left before the first byte."""
    slot = live_connections.take(actor.user)
    try:
        stream = sessions.session_follow(actor=actor, terminal_id=terminal_id, from_byte=from_byte)
    except BaseException:
        slot.release()
        raise
    events = server_sent_events(stream, on_end=slot.release)
    weakref.finalize(events, slot.release)
    return events
