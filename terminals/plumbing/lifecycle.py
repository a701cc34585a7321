"""Stopping a server process cleanly: what runs between SIGTERM and the exit.

A web process that is stopped (a rolling restart, a deploy) tells its live clients where to resume before it goes,
instead of dropping their connections; the embedded worker ends its terminals first, so their clients get the
exit. Each part registers a hook with on_shutdown; hooks run one after another, in their order, each within its
own time limit. Under daphne (directly or through `manage.py serve`) they run before daphne cancels what is left of
the application (_before_daphne_cancels); an ASGI server that speaks the lifespan protocol runs them on its lifespan
shutdown.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Awaitable, Callable

logger = logging.getLogger(__name__)

# Orders: the terminals end first (their clients get the exit), then the live connections close.
WORKER, CONNECTIONS = 0, 10

_hooks: list[tuple[int, str, Callable[[], Awaitable[None]], float]] = []
_stopping = False
_shutting_down: asyncio.Future | None = None  # the one run of the hooks, however many callers ask for it


def on_shutdown(order: int, name: str, hook: Callable[[], Awaitable[None]], *, timeout: float = 10.0) -> None:
    if not any(registered is hook for _, _, registered, _ in _hooks):
        _hooks.append((order, name, hook, timeout))


def stopping() -> bool:
    """Whether this process is shutting down: from then on, live connections are being closed."""
    return _stopping


async def shut_down() -> None:
    """Runs the hooks, once: a second call waits for the first run to end."""
    global _shutting_down
    if _shutting_down is None:
        _shutting_down = asyncio.ensure_future(_run_hooks())
    await asyncio.shield(_shutting_down)


async def _run_hooks() -> None:
    global _stopping
    _stopping = True
    for _, name, hook, timeout in sorted(_hooks, key=lambda entry: entry[0]):
        try:
            await asyncio.wait_for(hook(), timeout)
        except TimeoutError:
            logger.warning("shutting down: %s took longer than %.0f s; going on", name, timeout)
        except Exception:  # noqa: BLE001 - one failing hook must not keep the others from running
            logger.exception("shutting down: %s failed", name)


class WithShutdownHooks:
    """ASGI middleware: runs the shutdown hooks when the server stops, under daphne or any lifespan server."""

    def __init__(self, application) -> None:
        self.application = application
        if sys.modules.get("twisted.internet.reactor") is not None:
            _before_daphne_cancels()  # daphne installed its asyncio reactor before it loaded this application

    async def __call__(self, scope, receive, send):
        if scope["type"] == "lifespan":
            return await self._lifespan(receive, send)
        return await self.application(scope, receive, send)

    async def _lifespan(self, receive, send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await shut_down()
                await send({"type": "lifespan.shutdown.complete"})
                return


def _before_daphne_cancels() -> None:
    """Runs the hooks when daphne stops, before it cancels what is left of the application.

    daphne cancels every application instance in a "before shutdown" trigger of its own, in the same phase as a
    trigger of ours would run, so the hooks found their live connections cancelled mid-close: a WebSocket whose
    client closed at once never had its disconnect (no detach, and the stop waited out the connections' grace
    period, 5 s), and an event stream's request was cancelled after its last event (the response ended only with
    the process, and asyncio logged "Task exception was never retrieved ... RequestAborted"). So daphne's own
    step waits for the hooks first."""
    from daphne.server import Server
    from twisted.internet import defer

    cancel_applications = Server.kill_all_applications
    if getattr(cancel_applications, "after_hooks", False):
        return

    async def hooks_then_cancel(server: Server) -> None:
        await shut_down()
        await cancel_applications(server).asFuture(asyncio.get_running_loop())

    def kill_all_applications(server: Server):
        return defer.Deferred.fromFuture(asyncio.ensure_future(hooks_then_cancel(server)))

    kill_all_applications.after_hooks = True
    Server.kill_all_applications = kill_all_applications
