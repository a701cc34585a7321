"""Sending a request to a terminal worker over the channel layer and waiting, with a deadline, for its reply."""

from __future__ import annotations

import asyncio
import logging

from asgiref.sync import async_to_sync
from channels.db import DatabaseSyncToAsync
from channels.exceptions import ChannelFull
from channels.layers import get_channel_layer
from django.conf import settings

from ..plumbing import clock, database_threads
from . import lost
from ..exceptions import ServiceError, WorkerUnavailable, from_code, terminal_inactive
from . import protocol

logger = logging.getLogger(__name__)

if settings.REDIS_URL:
    from redis.exceptions import RedisError
else:  # nothing raises Redis errors without Redis, and importing the client costs 5 MB of memory
    RedisError = OSError

# What a channel layer raises when its transport is down, frozen (the deadline passes) or full.
TRANSPORT_ERRORS = (TimeoutError, ChannelFull, OSError, RedisError)


# How often a request waiting on a terminal's worker checks whether the terminal was marked lost meanwhile (its
# worker was killed: no reply will come), so it answers 409 then rather than at its deadline.
LOST_CHECK_SECONDS = 1.0
UNWATCHED = frozenset({protocol.CREATE, protocol.DETACH})  # no terminal on record to check (yet), or no reply


def default_timeout() -> float:
    return settings.TERMINALS["WORKER_TIMEOUT_MS"] / 1000


async def request(channel: str, message_type: str, reply_within: float | None = None, **fields) -> dict:
    """Returns the worker's reply data; raises the error it reported, or WorkerUnavailable after reply_within seconds."""
    timeout = default_timeout() if reply_within is None else reply_within
    await _measure_clock()
    exchange = _exchange(get_channel_layer(), channel, message_type, timeout, fields)
    if "id" in fields and message_type not in UNWATCHED and not settings.TERMINALS["EMBEDDED_WORKER"]:
        exchange = _unless_lost(exchange, fields["id"])
    try:
        return await asyncio.wait_for(exchange, timeout)
    except ServiceError:
        raise  # the worker answered, with an error of its own
    except TimeoutError:
        logger.warning("worker request %s to %s got no reply within %g s", message_type, channel, timeout)
        message = f"No terminal worker answered within {timeout:g} s"
    except TRANSPORT_ERRORS as error:
        logger.warning("worker request %s to %s failed: %s: %s", message_type, channel, type(error).__name__, error)
        message = f"The terminal workers cannot be reached ({type(error).__name__} on the channel layer)"
    except Exception as error:  # noqa: BLE001 - whatever else the channel layer raises: a 503, never a 500
        logger.exception("worker request %s to %s failed", message_type, channel)
        message = f"The terminal workers cannot be reached ({type(error).__name__} on the channel layer)"
    raise WorkerUnavailable(message, {"request": message_type})


async def _unless_lost(exchange, terminal_id: str) -> dict:
    """The exchange's reply; raises the 409 as soon as a check every LOST_CHECK_SECONDS finds the terminal marked
    lost, instead of waiting out the deadline for a worker that is gone (an embedded worker never is)."""
    reply = asyncio.ensure_future(exchange)
    try:
        while True:
            done, _ = await asyncio.wait({reply}, timeout=LOST_CHECK_SECONDS)
            if done:
                return reply.result()
            if await _marked_lost(terminal_id):
                raise terminal_inactive(terminal_id, "lost", released=True)
    finally:
        reply.cancel()  # the channel layer keeps a cancelled receive's reply from any other (channel_layer.py)


async def _marked_lost(terminal_id: str) -> bool:
    try:
        return await database_threads.run(lost.terminal_lost, terminal_id)
    except Exception as error:  # noqa: BLE001 - the database away: the deadline still ends the wait
        logger.warning("checking whether terminal %s was lost failed: %s: %s", terminal_id, type(error).__name__, error)
        return False


async def tell(channel: str, message_type: str, **fields) -> bool:
    """Sends a request nothing answers (a detach), within the worker timeout; returns whether it went out. A lost
    one is made up for by the worker (a detach: the subscriber's lease expires, leases.py)."""
    try:
        message = {"type": message_type, "deadline": clock.now() + default_timeout(), **fields}
        await asyncio.wait_for(get_channel_layer().send(channel, message), default_timeout())
    except Exception as error:  # noqa: BLE001 - whatever the channel layer raises
        logger.warning("worker message %s to %s not sent: %s: %s", message_type, channel, type(error).__name__, error)
        return False
    return True


async def _measure_clock() -> None:
    """Keeps this process's view of the database's clock fresh, in which deadlines are set (clock.py)."""
    if settings.TERMINALS["EMBEDDED_WORKER"] or not clock.needs_measuring():
        return  # an embedded worker judges deadlines with this very process's clock
    try:
        await DatabaseSyncToAsync(clock.measure, thread_sensitive=False)()
    except Exception as error:  # noqa: BLE001 - the last offset (or none) still serves
        logger.warning("reading the database's clock failed: %s: %s", type(error).__name__, error)


async def _exchange(layer, channel: str, message_type: str, timeout: float, fields: dict) -> dict:
    reply_to = await layer.new_channel()
    message = {"type": message_type, "reply_to": reply_to, "deadline": clock.now() + timeout, **fields}
    await layer.send(channel, message)
    reply = await layer.receive(reply_to)
    if reply.get("ok"):
        return reply["data"]
    error = reply.get("error") or {}
    raise from_code(error.get("code", "INTERNAL_ERROR"), error.get("message", "Worker error"), error.get("details"))


def request_sync(channel: str, message_type: str, reply_within: float | None = None, **fields) -> dict:
    """request() for synchronous code such as DRF views."""
    return async_to_sync(request)(channel, message_type, reply_within, **fields)
