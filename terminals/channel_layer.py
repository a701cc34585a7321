"""channels_redis's Redis layer, with one never-cancelled receiver for each process's own channels.

A process's specific channels (every worker reply it waits for, every live connection it serves) share one
Redis key. channels_redis pops that key inside whichever receive() call holds its lock. Cancelled (a live
connection closes, a request passes its deadline) while its pop is in flight, that call may go on (redis-py
retries the interrupted pop) and, cancelled again, drop what Redis had already handed it: a reply for another
request in the same process, which then waits its whole deadline (django/channels_redis#366). With
channels_redis's own layer, tests/test_channel_layer.py lost every one of its thirty replies that way.

Here one task per process and event loop does all the popping and is never cancelled by a caller: receive()
waits only on its channel's buffer, which a cancellation leaves intact. When the pop fails (Redis down or
frozen) every waiting receive() gets the error, as it would have from its own pop, and the next one starts
a new receiver.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict

from channels_redis import core



class _Failure:
    """Put in a waiting channel's buffer when the receiver failed: its receive() raises the error."""

    def __init__(self, error: BaseException) -> None:
        self.error = error


class RedisChannelLayer(core.RedisChannelLayer):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._receiver: asyncio.Task | None = None
        self._receiver_loop: asyncio.AbstractEventLoop | None = None
        self._waiting: defaultdict[str, int] = defaultdict(int)  # receive() calls waiting, by channel
        self._read: dict[str, float] = {}  # when each channel with buffered messages was last read
        self._pruned = time.monotonic()

    async def receive(self, channel):
        if "!" not in channel:
            return await super().receive(channel)  # a plain channel has a Redis key of its own: nothing is shared
        assert self.require_valid_channel_name(channel)
        self._start_receiver(self.non_local_name(channel))
        self._waiting[channel] += 1
        try:
            message = await self.receive_buffer[channel].get()
        finally:
            self._waiting[channel] -= 1
            if not self._waiting[channel]:
                del self._waiting[channel]
            if channel in self._waiting or not self.receive_buffer[channel].empty():
                self._read[channel] = time.monotonic()
            else:
                del self.receive_buffer[channel]
                self._read.pop(channel, None)
        if isinstance(message, _Failure):
            raise message.error
        return message

    def _start_receiver(self, real_channel: str) -> None:
        loop = asyncio.get_running_loop()
        running = self._receiver is not None and not self._receiver.done()
        if running and self._receiver_loop is loop:
            return
        if running and not self._receiver_loop.is_closed():
            raise RuntimeError("Two event loops are trying to receive() on one channel layer at once!")
        if self._receiver_loop is not loop:  # buffers belong to the loop that made them
            self.receive_buffer.clear()
            self._waiting.clear()
            self._read.clear()
        self._receiver_loop = loop
        self._receiver = loop.create_task(self._receive_forever(real_channel), name="channel layer receiver")

    async def _receive_forever(self, real_channel: str) -> None:
        this = asyncio.current_task()
        # redis-py may retry a blocking pop that a cancellation interrupted (its retry takes the interruption
        # for a timeout), so the cancellation is checked for here as well as caught.
        while not this.cancelling():
            try:
                message_channel, message = await self.receive_single(real_channel)
            except asyncio.CancelledError:
                raise  # its event loop is closing
            except Exception as error:  # noqa: BLE001 - each waiting receive() raises it, as it would have from its own pop
                for channel in list(self._waiting):
                    self.receive_buffer[channel].put_nowait(_Failure(error))
                return
            for channel in message_channel if isinstance(message_channel, list) else [message_channel]:
                self._buffer(channel, message)

    def _buffer(self, channel: str, message: dict) -> None:
        """Keeps a message for its channel's receive(), called yet or not. Messages of a channel nobody has read
        for the layer's expiry (a request that gave up, a closed connection) are dropped, as Redis would have
        dropped them unread."""
        now = time.monotonic()
        self._read.setdefault(channel, now)
        self.receive_buffer[channel].put_nowait(message)
        if now - self._pruned > self.expiry:
            self._pruned = now
            for stale in [name for name, read in self._read.items() if now - read > self.expiry]:
                if stale not in self._waiting:
                    del self._read[stale]
                    self.receive_buffer.pop(stale, None)

    async def close_pools(self):
        if self._receiver is not None and not self._receiver.done() and \
                self._receiver_loop is asyncio.get_running_loop():
            self._receiver.cancel()
            await asyncio.wait([self._receiver], timeout=self.brpop_timeout + 1)
        await super().close_pools()
