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

Fewer round trips to Redis, too. channels_redis sends in four commands (drop expired messages, count against
the capacity, add, set the expiry) and receives in four (a clean-up script, the pop, a copy kept in a backup
queue against a cancelled pop, its removal), each a round trip and a system call on both sides, and holds a
lock across them, so one process's pops queue behind each other's clean-ups: a split poll, a request and its
reply, took sixteen. Here a send is one script doing the same four steps atomically, and the receiver pops up
to POP_BATCH messages in one blocking command. The backup queue only guarded callers that cancel a pop; no
caller cancels this one. Only cancelling the receiver itself, when its event loop closes, can drop what a pop
in flight had taken, and those messages were for this process, which is then going away.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from urllib.parse import urlsplit

from channels.exceptions import ChannelFull
from channels_redis import core
from redis.exceptions import ResponseError

POP_BATCH = 64  # messages one pop may take


class RedisTooOld(RuntimeError):
    """The Redis server lacks BZMPOP (Redis 7.0 brought it), which every receive of this layer uses."""

    def __init__(self, host: str) -> None:
        super().__init__(f"the Redis server at {host} has no BZMPOP command: the channel layer needs Redis 7.0 or "
                         "newer. Upgrade Redis (docs/deployment.md)")


# KEYS[1] the channel's key; ARGV: expired-before score, capacity, score, message, expiry in seconds.
SEND = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], 0, ARGV[1])
if redis.call('ZCOUNT', KEYS[1], '-inf', '+inf') >= tonumber(ARGV[2]) then
    return 0
end
redis.call('ZADD', KEYS[1], ARGV[3], ARGV[4])
redis.call('EXPIRE', KEYS[1], ARGV[5])
return 1
"""


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
        self._send_script = None

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
                popped = await self._pop(real_channel)
            except asyncio.CancelledError:
                raise  # its event loop is closing
            except Exception as error:  # noqa: BLE001 - each waiting receive() raises it, as it would have from its own pop
                for channel in list(self._waiting):
                    self.receive_buffer[channel].put_nowait(_Failure(error))
                return
            for content in popped:
                message = self.deserialize(content)
                self._buffer(message.pop("__asgi_channel__", real_channel), message)

    async def _pop(self, real_channel: str) -> list[bytes]:
        """Up to POP_BATCH messages of the process's channels, oldest first; none when brpop_timeout passes."""
        key = self.prefix + real_channel
        popped = await self._bzmpop(self.consistent_hash(real_channel), self.brpop_timeout, key, POP_BATCH)
        return [member for member, _ in popped[1]] if popped else []

    async def check_server(self) -> None:
        """Raises RedisTooOld unless every Redis server of the layer has BZMPOP; a worker checks before it starts."""
        for index in range(self.ring_size):
            await self._bzmpop(index, 0.01, f"{self.prefix}check-server", 1)  # a key nobody uses, for 10 ms

    async def _bzmpop(self, index: int, timeout: float, key: str, count: int):
        try:
            return await self.connection(index).bzmpop(timeout, 1, [key], min=True, count=count)
        except ResponseError as error:
            if "unknown command" in str(error).lower():
                raise RedisTooOld(self._host_name(index)) from error
            raise

    def _host_name(self, index: int) -> str:
        """host:port, never the URL's password."""
        host = self.hosts[index]
        if host.get("address"):
            url = urlsplit(host["address"])
            return f"{url.hostname}:{url.port or 6379}"
        return f"{host.get('host', 'localhost')}:{host.get('port', 6379)}"

    async def send(self, channel, message, *, first: bool = False):
        """channels_redis's send (expired messages dropped, ChannelFull at capacity, the key's expiry renewed) in
        one round trip. first: ahead of every message sent since (a worker handing over puts back what it took)."""
        assert isinstance(message, dict), "message is not a dict"
        assert self.require_valid_channel_name(channel), "Channel name not valid"
        assert "__asgi_channel__" not in message
        if "!" in channel:
            message = {**message, "__asgi_channel__": channel}
            key, index = self.prefix + self.non_local_name(channel), self.consistent_hash(channel)
        else:
            key, index = self.prefix + channel, next(self._send_index_generator)
        now = time.time()
        score = now - self.expiry / 2 if first else now  # popped lowest first; older than expiry is dropped
        arguments = (int(now) - int(self.expiry), self.get_capacity(channel), score, self.serialize(message),
                     int(self.expiry))
        connection = self.connection(index)
        if self._send_script is None:
            self._send_script = connection.register_script(SEND)  # loads it into Redis when Redis lacks it
        if not await self._send_script(keys=[key], args=arguments, client=connection):
            raise ChannelFull()

    async def send_first(self, channel, message):
        await self.send(channel, message, first=True)

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
