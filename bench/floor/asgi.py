"""daphne bench.floor.asgi:application (DJANGO_SETTINGS_MODULE=bench.floor.settings): the service's own Django
handler (terminals/plumbing/request_threads.py, threads reused as in config/asgi.py), without the service's other routes;
for WebSockets the echo floor (bench/floor/echo.py) on the service's WebSocket path, and the create floor's attach
(bench/floor/create.py) on /ws/floor/."""

import django

django.setup(set_prefix=False)

from terminals.plumbing.request_threads import ReusedThreadsASGIHandler  # noqa: E402 - Django must be set up first

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.urls import path  # noqa: E402

from .create import AttachFloor  # noqa: E402
from .echo import EchoFloor  # noqa: E402

application = ProtocolTypeRouter({
    "http": ReusedThreadsASGIHandler(),
    "websocket": URLRouter([path("ws/terminals/<str:terminal_id>/", EchoFloor.as_asgi()),
                            path("ws/floor/<str:terminal_id>/", AttachFloor.as_asgi())]),
})
