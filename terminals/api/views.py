"""Thin DRF viewsets: parse the request, call one use case of sessions/, wrap the result in the envelope.

The terminals and everything under them are here; the audit trail in audit_views.py, health and metrics in
health_views.py."""

from __future__ import annotations

import weakref

from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, PolymorphicProxySerializer
from rest_framework import renderers, viewsets
from rest_framework.decorators import action

from .. import json_input, live_connections, recordings, sessions
from ..audit import Actor
from ..openapi import extend_schema
from ..throttling import ApiKeyRateThrottle, CreateRateThrottle
from . import responses as r
from . import serializers as s
from .envelope import ERRORS, ok
from .sse import server_sent_events
from .strict import StrictRequest, body_of, query_and_body, valid


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
        data = valid(s.TerminateSerializer, query_and_body(request))
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
        query = s.WaitQuerySerializer(data=query_and_body(request))
        query.is_valid(raise_exception=True)
        return ok(sessions.session_command_wait(
            actor=Actor.from_request(request), terminal_id=pk, command_id=command_id,
            timeout_ms=query.validated_data["timeoutMs"], read=query.read(),
        ))

    # Processes (seed 001's stop_process, seed 003's wait_for_exit and kill)

    @extend_schema(request=s.SignalSerializer, responses={200: r.enveloped(r.SignalResultSerializer), **ERRORS})
    @action(detail=True, methods=["post"])
    def signal(self, request, pk=None):
        data = valid(s.SignalSerializer, body_of(request))
        return ok(sessions.session_signal(actor=Actor.from_request(request), terminal_id=pk, signal=data["signal"]))

    @extend_schema(request=s.ResizeSerializer, responses={200: r.enveloped(s.ResizeSerializer), **ERRORS})
    @action(detail=True, methods=["post"])
    def resize(self, request, pk=None):
        data = valid(s.ResizeSerializer, body_of(request))
        return ok(sessions.session_resize(actor=Actor.from_request(request), terminal_id=pk, **data))

    @extend_schema(request=s.WaitQuerySerializer, parameters=[s.WaitQuerySerializer],
                   responses={200: r.enveloped(r.WaitResultSerializer), **ERRORS})
    @action(detail=True, methods=["post"])
    def wait(self, request, pk=None):
        data = valid(s.WaitQuerySerializer, query_and_body(request))
        return ok(sessions.session_wait_exit(actor=Actor.from_request(request), terminal_id=pk, timeout_ms=data["timeoutMs"]))

    @extend_schema(request=s.OutputWaitSerializer, responses={200: r.enveloped(r.OutputWaitResultSerializer), **ERRORS})
    @action(detail=True, methods=["post"], url_path="output/wait")
    def output_wait(self, request, pk=None):
        data = valid(s.OutputWaitSerializer, body_of(request))
        return ok(sessions.session_wait_output(
            actor=Actor.from_request(request), terminal_id=pk, pattern=data["pattern"], timeout_ms=data["timeoutMs"],
            from_byte=data.get("fromByte"), until_input=data["untilInput"]))

    @extend_schema(request=s.SignalSerializer, responses={200: r.enveloped(r.TerminalSerializer), **ERRORS})
    @action(detail=True, methods=["post"])
    def kill(self, request, pk=None):
        body = body_of(request)
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
