"""Sending a request to a terminal worker over the channel layer and waiting, with a deadline, for its reply."""

from __future__ import annotations

import asyncio
import logging

from asgiref.sync import async_to_sync
from channels.db import DatabaseSyncToAsync
from channels.exceptions import ChannelFull
from channels.layers import get_channel_layer
from django.conf import settings

from .. import clock
from ..exceptions import ServiceError, WorkerUnavailable, from_code

logger = logging.getLogger(__name__)

if settings.REDIS_URL:
    from redis.exceptions import RedisError
else:  # nothing raises Redis errors without Redis, and importing the client costs 5 MB of memory
    RedisError = OSError

# What a channel layer raises when its transport is down, frozen (the deadline passes) or full.
TRANSPORT_ERRORS = (TimeoutError, ChannelFull, OSError, RedisError)


def default_timeout() -> float:
    return settings.TERMINALS["WORKER_TIMEOUT_MS"] / 1000


async def request(channel: str, message_type: str, reply_within: float | None = None, **fields) -> dict:
    """Returns the worker's reply data; raises the error it reported, or WorkerUnavailable after reply_within seconds."""
    timeout = default_timeout() if reply_within is None else reply_within
    await _measure_clock()
    layer = get_channel_layer()
    try:
        return await asyncio.wait_for(_exchange(layer, channel, message_type, timeout, fields), timeout)
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
