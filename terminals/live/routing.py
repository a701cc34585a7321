"""The live interface's route: one WebSocket per client and terminal."""

from channels.auth import AuthMiddlewareStack
from channels.routing import URLRouter
from django.contrib.auth.models import AnonymousUser
from django.urls import path

from .consumer import TerminalConsumer, presented_key

websocket_urlpatterns = [path("ws/terminals/<str:terminal_id>/", TerminalConsumer.as_asgi())]


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
