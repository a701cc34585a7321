"""Reading a request strictly: what DRF would silently ignore (an unknown query parameter, a body without a
Content-Type, a body that is not an object) is refused before a view acts, and a request is validated whole."""

from __future__ import annotations

import functools

from ..exceptions import NO_JSON, InvalidInput
from . import serializers as s


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


def body_of(request) -> dict:
    body = request.data if request.data else {}
    if not isinstance(body, dict):
        raise InvalidInput("body: must be a JSON object", {"fields": {"body": ["Must be a JSON object."]}})
    return body


def query_and_body(request) -> dict:
    return {**request.query_params.dict(), **body_of(request)}
