"""daphne bench.floor.asgi:application (DJANGO_SETTINGS_MODULE=bench.floor.settings): the service's own Django
handler (terminals/request_threads.py, threads reused as in config/asgi.py), without the service's other routes;
and for WebSockets the echo floor (bench/floor/echo.py) on the service's WebSocket path."""

import django

django.setup(set_prefix=False)

from terminals.request_threads import ReusedThreadsASGIHandler  # noqa: E402 - Django must be set up first

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.urls import path  # noqa: E402

from .echo import EchoFloor  # noqa: E402

application = ProtocolTypeRouter({
    "http": ReusedThreadsASGIHandler(),
    "websocket": URLRouter([path("ws/terminals/<str:terminal_id>/", EchoFloor.as_asgi())]),
})
