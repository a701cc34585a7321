"""The audit trail over REST: staff see every event, others their own; paged, filtered, misspelt filters refused."""

from __future__ import annotations

from rest_framework import exceptions, mixins, pagination, viewsets

from ..audit_events import audit_events
from ..exceptions import NotFound
from ..openapi import extend_schema
from ..redaction import redact
from . import serializers as s
from .envelope import ERRORS, ok
from .strict import StrictRequest, valid


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
