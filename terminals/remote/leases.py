"""Viewer leases: a worker streams to a live client's channel only while the web process behind it says it reads there.

A detach can be lost: sent while Redis is away (a 4503 close), or never sent at all (a web process SIGKILLed, or
stopped before its detaches went out). The worker would then push output to a channel nobody reads, for good (Redis
keeping the undelivered messages) and keep up to LAG_BYTES of output for it. So each web process renews, every
RENEW_SECONDS and in one message per worker, the lease of every subscriber channel it holds (a WebSocket, an SSE
follow); a worker drops a subscriber whose lease went LEASE_SECONDS unrenewed (streaming.py), and tells its channel
once, in case someone still reads there (a web process stalled that long): that client is closed, to reconnect.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict

from channels.layers import get_channel_layer

from ..plumbing import clock
from . import protocol

logger = logging.getLogger(__name__)

RENEW_SECONDS = 2.0  # how often a web process renews the leases of its live clients
LEASE_SECONDS = 10.0  # a subscriber not renewed for this long is dropped: five renewals missed in a row

_held: defaultdict[str, dict[tuple[str, str], int]] = defaultdict(dict)  # worker channel -> {(terminal, channel): n}
_task: asyncio.Task | None = None


def hold(worker_channel: str, terminal_id: str, subscriber: str) -> None:
    """The subscriber channel reads the terminal's output from that worker: renew its lease until release()."""
    global _task
    leases = _held[worker_channel]
    leases[(terminal_id, subscriber)] = leases.get((terminal_id, subscriber), 0) + 1
    loop = asyncio.get_running_loop()
    if _task is None or _task.done() or _task.get_loop() is not loop:
        _task = loop.create_task(_renew_while_held())


def release(worker_channel: str, terminal_id: str, subscriber: str) -> None:
    leases = _held.get(worker_channel)
    if leases is None or (terminal_id, subscriber) not in leases:
        return
    leases[(terminal_id, subscriber)] -= 1
    if not leases[(terminal_id, subscriber)]:
        del leases[(terminal_id, subscriber)]
    if not leases:
        del _held[worker_channel]


async def _renew_while_held() -> None:
    failed = False
    while _held:
        await asyncio.sleep(RENEW_SECONDS)
        layer = get_channel_layer()
        for worker_channel, leases in list(_held.items()):
            message = {"type": protocol.RENEW, "deadline": clock.now() + LEASE_SECONDS,
                       "subscribers": [list(lease) for lease in leases]}
            try:
                await asyncio.wait_for(layer.send(worker_channel, message), RENEW_SECONDS)
            except Exception as error:  # noqa: BLE001 - Redis away: the clients are closed (4503) on their own
                if not failed:
                    logger.warning("renewing live clients' leases failed: %s: %s", type(error).__name__, error)
                failed = True
            else:
                failed = False
