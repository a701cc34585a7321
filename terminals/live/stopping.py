"""A stopping web process closes its live connections cleanly: each client told the byte to resume from, then 4012."""

from __future__ import annotations

import asyncio

from ..plumbing import lifecycle

STOP_WAIT_SECONDS = 5.0  # how long a stopping server waits for its clients to take their close

open_connections: set = set()  # this process's attached connections (consumer.py's), which a stop closes


async def close_every_connection() -> None:
    """The server is stopping: tell each attached client the byte to resume from, close with 4012, and wait (a
    little) for the close frames to go out, so clients see a clean close and reconnect elsewhere instead of a 1006."""
    for consumer in list(open_connections):
        await consumer.server_stopping()
    deadline = asyncio.get_running_loop().time() + STOP_WAIT_SECONDS
    while open_connections and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.05)


lifecycle.on_shutdown(lifecycle.CONNECTIONS, "closing live connections", close_every_connection)
