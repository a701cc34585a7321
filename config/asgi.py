"""ASGI entry point: HTTP to Django, WebSockets to the live interface, the embedded worker unless in split mode,
and the shutdown hooks (terminals/plumbing/lifecycle.py) that close live connections cleanly when the server stops."""

import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
django.setup(set_prefix=False)  # what get_asgi_application() does, before the handler below is built

from terminals.plumbing.request_threads import ReusedThreadsASGIHandler  # noqa: E402

django_application = ReusedThreadsASGIHandler()

from channels.routing import ProtocolTypeRouter  # noqa: E402 - Django must be set up first

from terminals import metrics  # noqa: E402
from terminals.plumbing.lifecycle import WithShutdownHooks  # noqa: E402
from terminals.live.routing import live_application  # noqa: E402
from terminals.mcp.transport import McpEndpoint  # noqa: E402
from terminals.redaction import redact_access_log  # noqa: E402
from terminals.plumbing.static_files import with_static_files  # noqa: E402
from terminals.worker.embedded import WithEmbeddedWorker  # noqa: E402

# daphne's access log writes each request's URL; a key a client put in one is masked there.
redact_access_log()
metrics.serve_on_separate_bind()

mcp_endpoint = McpEndpoint()
http_application = with_static_files(django_application)


async def http(scope, receive, send):
    """/mcp and its profiles go to the MCP endpoint (its own authentication, before any message is read); the rest
    to Django, static files first."""
    if McpEndpoint.handles(scope["path"]):
        return await mcp_endpoint(scope, receive, send)
    return await http_application(scope, receive, send)


application = WithShutdownHooks(WithEmbeddedWorker(
    ProtocolTypeRouter({"http": http,
                        "websocket": live_application()})
))
