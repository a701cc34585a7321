"""The Agent Client Protocol endpoint: JSON-RPC 2.0 over POST, answered by terminals.acp.methods."""

from __future__ import annotations

import functools

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse
from rest_framework import exceptions
from rest_framework.parsers import JSONParser
from rest_framework.response import Response
from rest_framework.views import APIView

from ..audit import Actor, audit
from ..exceptions import ErrorEnvelope, ServiceError, as_service_error, retry_after
from ..openapi import extend_schema
from ..throttling import ApiKeyRateThrottle, CreateRateThrottle
from . import methods as acp
from . import rpc

DESCRIPTION = """\
JSON-RPC 2.0: one request object or a batch (an array) of them. Methods: terminal/create,
terminal/output, terminal/wait_for_exit, terminal/kill, terminal/release, with the Agent Client
Protocol's params (sessionId, terminalId, command, args, env, cwd, outputByteLimit).

Every JSON-RPC answer, errors included, comes with HTTP 200; notifications only get 204.
Errors: -32700 body not JSON, or holding a value the service cannot keep (a number that is not a finite
64-bit float, an integer outside int64/uint64, a lone surrogate, nesting over 64 levels); -32600 not a
request, an id other than a string, an int64 or null, an empty batch, more than 100 calls or a body
over the upload limit; -32601 unknown method; -32602 invalid params (data.field names the
parameter); -32603 internal error; -32000 service error (data.code is the REST API's error code,
or TIMEOUT when terminal/wait_for_exit outlasts the server's maximum wait, MAX_WAIT_MS).
Too many requests, or a terminal/create past the key's creation rate (shared with POST /api/terminals),
answer -32000 with data.code RATE_LIMITED and data.details.retryAfter in seconds; a request refused
whole this way also carries a Retry-After header. A missing or bad API key gets the REST API's 401 envelope.
"""


def _audit_call(actor: Actor, call: rpc.Call) -> None:
    audit(actor, "acp", outcome=call.outcome, terminal_id=call.terminal_id, method=call.method, id=call.id)


def _admit(request, method: str) -> None:
    """terminal/create counts against the key's creation rate, the very count POST /api/terminals uses."""
    if method != "terminal/create":
        return
    throttle = CreateRateThrottle()
    if not throttle.allow_creation(request):
        raise as_service_error(exceptions.Throttled(throttle.wait()))


class AcpView(APIView):
    """The Agent Client Protocol's terminal methods; one audit row per call."""

    parser_classes = [JSONParser]
    throttle_classes = [ApiKeyRateThrottle]
    audit_action = "acp"

    @extend_schema(
        tags=["acp"],
        operation_id="acp_call",
        summary="Call Agent Client Protocol terminal methods (JSON-RPC 2.0)",
        description=DESCRIPTION,
        request=OpenApiTypes.OBJECT,
        responses={
            200: OpenApiResponse(
                {"oneOf": [{"type": "object", "additionalProperties": {}},
                           {"type": "array", "items": {"type": "object", "additionalProperties": {}}}]},
                description="A JSON-RPC response, or a batch's array of them",
            ),
            204: OpenApiResponse(description="The batch held only notifications"),
            401: ErrorEnvelope,
        },
    )
    def post(self, request):
        actor = Actor.from_request(request)
        on_call = functools.partial(_audit_call, actor)
        # The body is read here, not by the parser, so malformed JSON is answered in JSON-RPC, not the REST envelope.
        try:
            payload = rpc.parse_body(request.body)
        except RequestDataTooBig:
            message = f"the body is larger than {settings.DATA_UPLOAD_MAX_MEMORY_SIZE} bytes"
            return Response(acp.refuse(rpc.RpcError(rpc.INVALID_REQUEST, {"message": message}), on_call=on_call))
        except rpc.RpcError as error:
            return Response(acp.refuse(error, on_call=on_call))
        answer = acp.handle(payload, actor=actor, on_call=on_call, admit=functools.partial(_admit, request))
        return Response(status=204) if answer is None else Response(answer)

    def handle_exception(self, exc):
        # Past the request rate the body goes unread; the refusal is still a JSON-RPC answer an agent can parse.
        if isinstance(exc, exceptions.Throttled):
            error = as_service_error(exc)
            on_call = functools.partial(_audit_call, Actor.from_request(self.request))
            headers = {"Retry-After": retry_after(error.wait)} if error.wait is not None else {}
            try:
                return Response(acp.refuse(error, on_call=on_call), headers=headers)
            except ServiceError as unaudited:  # AUDIT_UNAVAILABLE: answered like any request the audit refuses
                exc = unaudited
        return super().handle_exception(exc)
