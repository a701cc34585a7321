"""The live interface's routes: one WebSocket per client and terminal, and a refusal for any other path."""

import logging

from channels.auth import AuthMiddlewareStack
from channels.generic.websocket import AsyncWebsocketConsumer
from channels.routing import URLRouter
from django.contrib.auth.models import AnonymousUser
from django.urls import re_path

from .close_codes import CLOSE_NOT_FOUND
from .consumer import TerminalConsumer
from .handshake import presented_key

logger = logging.getLogger(__name__)


class UnknownPath(AsyncWebsocketConsumer):
    """A WebSocket to a path no route serves: accepted, then closed 4404, as an unknown terminal is (an unknown REST
    path answers 404). Without this, channels' router raised and daphne answered the upgrade with a 500."""

    async def connect(self) -> None:
        logger.info("refused a WebSocket to %s: no such endpoint (4404)", self.scope["path"])
        await self.accept()
        await self.close(code=CLOSE_NOT_FOUND, reason="No WebSocket endpoint here; use /ws/terminals/<id>/")


# The trailing slash is optional: a client that leaves it off reaches its terminal instead of an unknown path.
websocket_urlpatterns = [re_path(r"^ws/terminals/(?P<terminal_id>[^/]+)/?$", TerminalConsumer.as_asgi()),
                         re_path(r"", UnknownPath.as_asgi())]


def live_application():
    """The WebSocket routes, with the dashboard's session login. A client that presents an API key is authenticated
    by its key alone (the consumer never falls back to the session then), so the session and user lookup of
    channels' AuthMiddlewareStack, a database thread trip on the create-to-first-prompt path, is skipped for it."""
    router = URLRouter(websocket_urlpatterns)
    with_session = AuthMiddlewareStack(router)

    async def application(scope, receive, send):
        if presented_key(scope) is not None:
            return await router({**scope, "user": AnonymousUser()}, receive, send)
        return await with_session(scope, receive, send)

    return application
