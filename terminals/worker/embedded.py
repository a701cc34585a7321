"""The embedded mode: one terminal worker inside the web process, on its event loop and in-memory channel layer."""

from __future__ import annotations

import asyncio

from django.conf import settings

from ..plumbing import lifecycle
from ..remote import here
from .server import TerminalWorker

_worker: TerminalWorker | None = None


def ensure_worker(loop: asyncio.AbstractEventLoop | None = None) -> TerminalWorker | None:
    """Starts the embedded worker on the loop once; does nothing in split mode."""
    global _worker
    if not settings.TERMINALS["EMBEDDED_WORKER"]:
        return None
    if _worker is None:
        loop = loop or asyncio.get_running_loop()
        _worker = TerminalWorker()
        here.register(_worker)
        loop.create_task(_worker.start())
        # Stopping the server ends the terminals first, so their live clients get the exit before they close;
        # unless its keeper restarts it (SIGHUP): then they are handed over and go on.
        lifecycle.on_shutdown(lifecycle.WORKER, "ending the embedded worker's terminals", _stop_worker,
                              timeout=120.0)
    return _worker


handing_over = False  # set by `manage.py serve` on the keeper's hand-over signal, before it stops the server


async def _stop_worker() -> None:
    if handing_over:
        await _worker.hand_over()
    else:
        await _worker.shutdown()


class WithEmbeddedWorker:
    """ASGI middleware that makes sure the embedded worker runs before the first request is served."""

    def __init__(self, application) -> None:
        self.application = application

    async def __call__(self, scope, receive, send):
        worker = ensure_worker()
        if worker is not None and not worker.ready.is_set() and scope["type"] in ("http", "websocket"):
            # A server that just started (a restart under the keeper: connections waited in the listening
            # socket's backlog) answers once its worker has taken its terminals back and listens, not with
            # requests sent to the previous process's worker, unanswered for WORKER_TIMEOUT_MS. Bounded by it.
            try:
                await asyncio.wait_for(worker.ready.wait(), settings.TERMINALS["WORKER_TIMEOUT_MS"] / 1000)
            except TimeoutError:
                pass  # served anyway: the request says what it finds
        return await self.application(scope, receive, send)
