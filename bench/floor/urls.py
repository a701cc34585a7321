import hmac
import os

from django.urls import path
from rest_framework import authentication, exceptions
from rest_framework.response import Response
from rest_framework.views import APIView

from terminals.models import ApiKey, hash_key, key_prefix

# A body as large as a tail poll's answer (50 lines of a busy terminal, in the envelope): FLOOR_BODY_BYTES.
BODY = {"success": True, "data": {"output": "x" * int(os.environ.get("FLOOR_BODY_BYTES", "1500"))}}


class OneQueryKey(authentication.BaseAuthentication):
    def authenticate(self, request):
        key = request.META.get("HTTP_X_API_KEY", "")
        prefix = key_prefix(key)
        record = ApiKey.objects.filter(prefix=prefix).select_related("user").first() if prefix else None
        if record is None or not hmac.compare_digest(record.hashed_key, hash_key(key)):
            raise exceptions.AuthenticationFailed("Unknown API key")
        return record.user, record


class Floor(APIView):
    authentication_classes = [OneQueryKey]
    permission_classes = []
    throttle_classes = []

    def get(self, request, terminal_id):
        return Response(BODY)


urlpatterns = [path("api/terminals/<str:terminal_id>/output", Floor.as_view())]
