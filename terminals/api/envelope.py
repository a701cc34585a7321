"""The envelope every REST answer comes in: {"success": true, "data": ...} here, errors in errors.py; and the error
statuses every operation documents."""

from __future__ import annotations

from rest_framework.response import Response

from ..exceptions import ErrorEnvelope

ERRORS = {code: ErrorEnvelope for code in (400, 401, 404, 409, 429, 500, 503)}


def ok(data=None, *, status: int = 200, message: str | None = None) -> Response:
    body = {"success": True}
    if message is not None:
        body["message"] = message
    if data is not None:
        body["data"] = data
    return Response(body, status=status)

