import os

from django.urls import path
from rest_framework.response import Response
from rest_framework.views import APIView

from .create import CreateFloor
from .keys import OneQueryKey

# A body as large as a tail poll's answer (50 lines of a busy terminal, in the envelope): FLOOR_BODY_BYTES.
BODY = {"success": True, "data": {"output": "x" * int(os.environ.get("FLOOR_BODY_BYTES", "1500"))}}


class Floor(APIView):
    authentication_classes = [OneQueryKey]
    permission_classes = []
    throttle_classes = []

    def get(self, request, terminal_id):
        return Response(BODY)


urlpatterns = [
    path("api/terminals/<str:terminal_id>/output", Floor.as_view()),
    path("api/terminals", CreateFloor.as_view()),
]
