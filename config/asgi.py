"""ASGI entry point: HTTP to Django, WebSockets to the terminal consumer (and the embedded worker unless in split mode)."""

import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
django.setup(set_prefix=False)  # what get_asgi_application() does, before the handler below is built

from terminals.request_threads import ReusedThreadsASGIHandler  # noqa: E402

django_application = ReusedThreadsASGIHandler()

from channels.auth import AuthMiddlewareStack  # noqa: E402 - Django must be set up first
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.urls import path  # noqa: E402

from terminals.live.consumer import TerminalConsumer  # noqa: E402
from terminals.redaction import redact_access_log  # noqa: E402
from terminals.static_files import with_static_files  # noqa: E402
from terminals.worker.embedded import WithEmbeddedWorker  # noqa: E402

# daphne's access log writes each request's URL; a key a client put in one is masked there.
redact_access_log()

websocket_routes = URLRouter([path("ws/terminals/<str:terminal_id>/", TerminalConsumer.as_asgi())])

application = WithEmbeddedWorker(
    ProtocolTypeRouter({"http": with_static_files(django_application), "websocket": AuthMiddlewareStack(websocket_routes)})
)
