"""The live interface's route: one WebSocket per client and terminal."""

from django.urls import path

from .consumer import TerminalConsumer

websocket_urlpatterns = [path("ws/terminals/<str:terminal_id>/", TerminalConsumer.as_asgi())]
