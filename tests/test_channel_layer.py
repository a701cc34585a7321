"""The split deployment's channel layer on a real redis-server: a receive() that is cancelled (a live connection
closing, a request past its deadline) never costs another channel of the same process its message."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time

import pytest
import redis.asyncio as redis_client
from channels.exceptions import ChannelFull
from redis.exceptions import ConnectionError as RedisConnectionError

from terminals.plumbing.channel_layer import RedisChannelLayer, RedisTooOld

from .runtime_support import wait_until
from .servers import ROOT, service_env, start_redis

ROUNDS = 30
DEADLINE = 10.0  # a reply that has not come by then is lost


@pytest.fixture
def redis():
    process, url = start_redis()
    yield process, url
    process.stop()


def layer_for(url: str, **config) -> RedisChannelLayer:
    # The settings' own options: a read timeout that outlasts the 5 s blocking pop.
    return RedisChannelLayer(hosts=[{"address": url, "socket_timeout": 15}], **config)


async def pops_blocked(sender, count: int = 1) -> None:
    """Returns once Redis shows count clients blocked in a pop: a receive() under way. Each check is a round trip
    to Redis, which lets the receivers run meanwhile."""
    deadline = time.monotonic() + DEADLINE
    while sum("b" in client["flags"] for client in await sender.client_list()) < count:
        assert time.monotonic() < deadline, f"fewer than {count} receive() got as far as a pop on Redis"


async def arrive(sender, layer: RedisChannelLayer, channel: str, message: dict) -> None:
    """What another process's send() ends with: the message added to this process's Redis key."""
    message = {**message, "__asgi_channel__": channel}
    await sender.zadd(layer.prefix + layer.non_local_name(channel), {layer.serialize(message): time.time()})


def test_a_cancelled_receive_never_takes_another_channels_reply(redis):
    _, redis_url = redis
    """Each round one receive() waits (it is the one popping the process's Redis key), a reply for another channel
    of the process arrives, and the waiting receive() is cancelled at once. channels_redis's own receive() may
    not end when cancelled (redis-py retries the interrupted pop), and cancelled again it loses the reply it had
    popped: replies went missing within a few rounds. Here every cancelled receive() ends at once and every
    reply reaches its channel."""

    async def rounds():
        layer = layer_for(redis_url)
        sender = redis_client.Redis.from_url(redis_url)
        replies, unfinished = [], 0
        for number in range(ROUNDS):
            leaving, asking = await layer.new_channel(), await layer.new_channel()
            waiting = asyncio.ensure_future(layer.receive(leaving))
            await pops_blocked(sender)
            await arrive(sender, layer, asking, {"type": "reply", "number": number})
            waiting.cancel()
            done, _ = await asyncio.wait([waiting], timeout=0.5)
            if not done:  # as daphne cancels again an application that outlives its close timeout
                waiting.cancel()
                done, _ = await asyncio.wait([waiting], timeout=DEADLINE)
                unfinished += 1
            try:
                replies.append((await asyncio.wait_for(layer.receive(asking), DEADLINE))["number"])
            except TimeoutError:
                replies.append(None)
        await sender.aclose()
        await layer.close_pools()
        return replies, unfinished

    replies, unfinished = asyncio.run(rounds())
    assert replies == list(range(ROUNDS))
    assert unfinished == 0


def test_every_waiting_receive_gets_the_error_when_redis_dies_and_the_next_one_works_again(redis):
    """Redis killed under three waiting receive() calls: each raises the connection error (as channels_redis's
    own would), promptly; with Redis back on its port, a new receive() gets its message."""
    process, redis_url = redis
    port = int(redis_url.rsplit(":", 1)[1].split("/")[0])

    async def outage():
        layer = layer_for(redis_url)
        channels = [await layer.new_channel() for _ in range(3)]
        waiting = [asyncio.ensure_future(layer.receive(channel)) for channel in channels]
        watcher = redis_client.Redis.from_url(redis_url)
        await pops_blocked(watcher)
        await watcher.aclose()
        process.stop(signal.SIGKILL)
        results = await asyncio.wait_for(asyncio.gather(*waiting, return_exceptions=True), DEADLINE)
        back, _ = start_redis(port)
        try:
            await layer.send(channels[0], {"type": "hello"})
            message = await asyncio.wait_for(layer.receive(channels[0]), DEADLINE)
            await layer.close_pools()
        finally:
            back.stop()
        return results, message

    results, message = asyncio.run(outage())
    assert [type(result) for result in results] == [RedisConnectionError] * 3, results
    assert message == {"type": "hello"}


def test_messages_nobody_reads_for_the_expiry_are_dropped(redis):
    """A channel whose reader has gone (a request that gave up) keeps its late reply no longer than the layer's
    expiry, as Redis would have: the process's memory does not grow with replies nobody will read."""
    _, redis_url = redis

    async def late_reply():
        layer = layer_for(redis_url, expiry=1)
        gone, alive = await layer.new_channel(), await layer.new_channel()
        await layer.send(gone, {"type": "late"})
        await layer.send(alive, {"type": "tick"})
        assert await asyncio.wait_for(layer.receive(alive), DEADLINE) == {"type": "tick"}  # the late one came first
        arrived = time.monotonic()
        await wait_until(lambda: time.monotonic() - arrived > layer.expiry + 0.5, what="the layer's expiry to pass")
        await layer.send(alive, {"type": "tick"})  # a message arriving is when old ones are looked at
        assert await asyncio.wait_for(layer.receive(alive), DEADLINE) == {"type": "tick"}
        try:
            return await asyncio.wait_for(layer.receive(gone), 0.5)
        except TimeoutError:
            return None
        finally:
            await layer.close_pools()

    assert asyncio.run(late_reply()) is None


def test_a_request_and_its_reply_take_four_commands_on_redis(redis):
    """A send is one script, a pop one blocking command: a request to another process and its reply cost four
    commands (channels_redis's own layer: sixteen, each a round trip). Counted by Redis, so it holds on any
    machine; the time it saves is figure 2's in bench/."""
    _, redis_url = redis
    exchanges = 50

    async def ping_pong():
        asker, answerer = layer_for(redis_url), layer_for(redis_url)
        question, answer = await answerer.new_channel(), await asker.new_channel()

        async def answer_each():
            for _ in range(exchanges):
                message = await answerer.receive(question)
                await answerer.send(message["reply_to"], {"type": "reply", "n": message["n"]})

        answering = asyncio.create_task(answer_each())
        await asker.send(question, {"type": "warm-up", "reply_to": answer, "n": -1})  # scripts loaded, pops started
        assert (await asyncio.wait_for(asker.receive(answer), DEADLINE))["n"] == -1
        counter = redis_client.Redis.from_url(redis_url)
        before = await commands(counter)
        for number in range(exchanges - 1):
            await asker.send(question, {"type": "ask", "reply_to": answer, "n": number})
            assert await asyncio.wait_for(asker.receive(answer), DEADLINE) == {"type": "reply", "n": number}
        used = await commands(counter) - before
        await answering
        await asker.close_pools()
        await answerer.close_pools()
        await counter.aclose()
        return used

    # Each exchange: two sends and two pops; a pop that waited out its 5 s timeout would add one.
    assert asyncio.run(ping_pong()) <= 4 * (exchanges - 1) + 4


async def commands(server) -> int:
    """Commands clients sent Redis, each a round trip: Redis counts the four a send's script runs inside it (none
    of the sends here finds its channel full) as calls too, and the INFO that reads the counts is left out."""
    stats = await server.info("commandstats")
    calls = {name.removeprefix("cmdstat_"): entry["calls"] for name, entry in stats.items()}
    scripts = calls.get("evalsha", 0) + calls.get("eval", 0)
    return sum(calls.values()) - calls.get("info", 0) - 4 * scripts


def test_a_send_to_a_full_channel_is_refused_and_adds_nothing(redis):
    """The capacity holds in the one-script send: past it, ChannelFull (the live fan-out's flow control), and
    the channel keeps exactly what it had."""
    _, redis_url = redis

    async def overfill():
        sender, receiver = layer_for(redis_url, capacity=3), layer_for(redis_url)
        channel = await receiver.new_channel()
        for number in range(3):
            await sender.send(channel, {"type": "m", "n": number})
        with pytest.raises(ChannelFull):
            await sender.send(channel, {"type": "m", "n": 3})
        received = [(await asyncio.wait_for(receiver.receive(channel), DEADLINE))["n"] for _ in range(3)]
        await sender.send(channel, {"type": "m", "n": 4})  # room again
        received.append((await asyncio.wait_for(receiver.receive(channel), DEADLINE))["n"])
        await sender.close_pools()
        await receiver.close_pools()
        return received

    assert asyncio.run(overfill()) == [0, 1, 2, 4]


def test_a_redis_without_bzmpop_stops_a_worker_at_once_and_fails_receives_saying_to_upgrade():
    """Redis older than 7.0 has no BZMPOP, which every receive of this layer uses: a worker would start and then
    answer nothing. It stops at once instead, naming the version to install, and a receive fails saying the same
    (the web process logs it). A real redis-server with the command renamed away stands in for an old one."""
    process, url = start_redis(None, "--rename-command", "BZMPOP", "")
    try:
        worker = subprocess.run([sys.executable, "manage.py", "terminal_worker"], cwd=ROOT, capture_output=True,
                                text=True, timeout=30, env=service_env(REDIS_URL=url))
        assert worker.returncode == 1, worker.stdout + worker.stderr
        assert "needs Redis 7.0 or newer" in worker.stderr and "ready on" not in worker.stdout, worker.stderr
        assert f"127.0.0.1:{url.rsplit(':', 1)[1].split('/')[0]}" in worker.stderr

        async def receive_once():
            layer = layer_for(url)
            try:
                with pytest.raises(RedisTooOld, match="needs Redis 7.0 or newer"):
                    await asyncio.wait_for(layer.receive(await layer.new_channel()), DEADLINE)
            finally:
                await layer.close_pools()

        asyncio.run(receive_once())
    finally:
        process.stop()
