"""Live output for attached clients: the worker pushes each terminal's new bytes to its subscribers' channels.

Every subscriber gets every byte in order, or an explicit gap. A subscriber
whose channel is full (a slow client) is skipped, never waited for, so it
cannot slow the terminal or the other subscribers; on the next batch the
worker tries again and replays what it missed from the buffer, announcing
a gap when that part was already evicted. A send the channel layer fails
(Redis away, or out of connections) is retried the same way. Memory per
subscriber is a number, and so are the sends in flight.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from channels.exceptions import ChannelFull

from ..runtime.buffer import OutputBuffer
from ..runtime.pty import PtySession
from ..remote import protocol
from ..remote.client import TRANSPORT_ERRORS

logger = logging.getLogger(__name__)

FRAME_BYTES = 512 * 1024  # at most this much output in one channel-layer message (Redis costs per message)
REPLAY_BYTES = 4 * 1024 * 1024  # at most this much sent to one subscriber per batch
# Output kept for watching clients beyond the terminal's own buffer, which its line limit
# can make small (10,000 short lines): a client that falls this far behind gets a gap.
LAG_BYTES = 32 * 1024 * 1024
RETRY_SECONDS = 0.2  # how soon a skipped (lagging) subscriber is tried again
ABANDON_SECONDS = 60.0  # a subscriber whose channel stays full this long is gone (its process died)


@dataclass
class Subscriber:
    channel: str
    next_byte: int  # the first byte this subscriber has not been sent
    # The terminal's oldest readable byte when this subscriber first came: its replay honours the terminal's
    # limits even where the output kept for lagging watchers reaches further back.
    replay_from: int = 0
    interactive: bool = False  # a terminal emulator that answers the program's queries itself
    who: str = ""  # the user name behind the connection, for "who is watching"
    lagging_since: float | None = None
    undelivered: bool = False  # the channel layer failed the last send: retry, without the abandon clock
    exit_sent: bool = False
    renewed: float = 0.0  # when its web process last renewed its lease (leases.py), by the loop's clock
    actor: dict | None = None  # whom a WebSocket attached for (Actor.as_dict()), to audit a detach nobody sent


@dataclass
class TerminalFeed:
    """The subscribers of one terminal, the output kept for them, and the flush scheduled for them."""

    session: PtySession
    recent: OutputBuffer
    subscribers: dict[str, Subscriber] = field(default_factory=dict)
    flushing: bool = False
    pending: bool = False

    @classmethod
    def watching(cls, session: PtySession) -> TerminalFeed:
        recent = OutputBuffer(max_lines=1 << 62, max_bytes=LAG_BYTES)
        buffer = session.buffer
        # Start from what the terminal holds, so a new client can replay it; later output is copied as it comes.
        data, start, _ = buffer.read_bytes(max(buffer.oldest_byte, buffer.end - LAG_BYTES), LAG_BYTES, complete=True)
        recent.restart_at(start)
        recent.append(data)
        # From now on every byte the terminal appends is copied as it is appended, before the terminal's
        # own buffer can evict it: a burst of more lines than that buffer keeps reaches watchers whole.
        buffer.copy_to = recent
        return cls(session=session, recent=recent)

    def stop_copying(self) -> None:
        if self.session.buffer.copy_to is self.recent:
            self.session.buffer.copy_to = None

    def catch_up(self) -> None:
        """Copies the terminal's new output into the kept output, when it is not copied as it comes."""
        buffer, recent = self.session.buffer, self.recent
        if buffer.copy_to is not recent and buffer.end > recent.end:
            data, start, _ = buffer.read_bytes(recent.end, buffer.end - recent.end, complete=True)
            if start > recent.end:
                recent.restart_at(start)  # more arrived in one burst than the terminal kept
            recent.append(data)


class OutputFanout:
    """Sends new output of every watched terminal to its subscribers, in batches per event-loop turn."""

    def __init__(self, layer, *, concurrency: int = 32) -> None:
        self.layer = layer
        self.feeds: dict[str, TerminalFeed] = {}
        # Each send in flight holds a Redis connection: a hundred viewers must not need a hundred at once.
        self.sending = asyncio.Semaphore(concurrency)

    def subscribe(
        self, terminal_id: str, session: PtySession, channel: str, from_byte: int, *, interactive: bool = False,
        who: str = "", actor: dict | None = None,
    ) -> Subscriber:
        """Starts (or restarts, from a new byte) sending a terminal's output to a channel."""
        feed = self.feeds.get(terminal_id) or self.feeds.setdefault(terminal_id, TerminalFeed.watching(session))
        known = feed.subscribers.get(channel)
        # A client resuming after a pause keeps its place in the kept output; a new one starts within the limits.
        replay_from = known.replay_from if known is not None else session.buffer.oldest_byte
        subscriber = Subscriber(channel=channel, next_byte=max(0, from_byte), interactive=interactive,
                                replay_from=replay_from, who=who or (known.who if known else ""),
                                renewed=asyncio.get_running_loop().time(), actor=actor or (known.actor if known else None))
        feed.subscribers[channel] = subscriber
        session.on_output = lambda: self.notify(terminal_id)
        self._update_emulator(feed)
        self.notify(terminal_id)
        return subscriber

    @staticmethod
    def _update_emulator(feed: TerminalFeed) -> None:
        # While a terminal emulator is attached it answers cursor and device queries; the service must not too.
        feed.session.emulator_attached = any(sub.interactive for sub in feed.subscribers.values())

    def unsubscribe(self, terminal_id: str, channel: str) -> None:
        feed = self.feeds.get(terminal_id)
        if feed is not None:
            feed.subscribers.pop(channel, None)
            self._update_emulator(feed)
            if not feed.subscribers:
                feed.session.on_output = None  # nobody watches: the read path does no extra work
                feed.stop_copying()
                self.feeds.pop(terminal_id, None)

    def renew(self, leases: list) -> list[tuple[str, str]]:
        """A web process still reads at these [terminal id, channel] pairs (leases.py); returns those this worker
        does not know."""
        now = asyncio.get_running_loop().time()
        unknown = []
        for terminal_id, channel in leases:
            feed = self.feeds.get(terminal_id)
            subscriber = feed.subscribers.get(channel) if feed is not None else None
            if subscriber is not None:
                subscriber.renewed = now
            else:
                unknown.append((terminal_id, channel))
        return unknown

    def expire(self, lease_seconds: float, *, paused: bool = False) -> list[tuple[str, Subscriber]]:
        """Drops and returns the subscribers whose lease went lease_seconds unrenewed. paused: this process did not
        run for a while (the renewals wait unread in its channel), so every lease counts as renewed now instead."""
        now = asyncio.get_running_loop().time()
        expired = []
        for terminal_id, feed in list(self.feeds.items()):
            for channel, subscriber in list(feed.subscribers.items()):
                if paused:
                    subscriber.renewed = max(subscriber.renewed, now)
                elif now - subscriber.renewed > lease_seconds:
                    self.unsubscribe(terminal_id, channel)
                    expired.append((terminal_id, subscriber))
        return expired

    async def tell_restarted(self, leases: list[tuple[str, str]]) -> None:
        """Tells clients of this worker's previous process (killed, then started again by its keeper, which has
        none of their subscriptions) that it restarted: they reattach from the byte they have."""
        for terminal_id, channel in leases:
            try:
                await self.layer.send(channel, {"type": protocol.STREAM_RESTARTING, "terminal": terminal_id})
            except Exception as error:  # noqa: BLE001 - its lease runs out instead
                logger.warning("a watcher of %s was not told of the restart: %r", terminal_id, error)

    async def restarting(self) -> None:
        """Tells every subscriber that the worker restarts (keeper.py) and the byte to reattach from."""
        sends = [self.layer.send(subscriber.channel, {"type": protocol.STREAM_RESTARTING, "terminal": terminal_id,
                                                      "fromByte": subscriber.next_byte})
                 for terminal_id, feed in self.feeds.items() for subscriber in feed.subscribers.values()]
        for outcome in await asyncio.gather(*sends, return_exceptions=True):
            if isinstance(outcome, BaseException):
                logger.warning("a watcher was not told of the restart (%r); its lease runs out instead", outcome)

    def watching(self, terminal_id: str) -> int:
        feed = self.feeds.get(terminal_id)
        return len(feed.subscribers) if feed else 0

    def watchers(self, terminal_id: str) -> list[dict]:
        """Who watches: each connection's user, and whether it is a terminal that types (else a view or a stream)."""
        feed = self.feeds.get(terminal_id)
        subscribers = feed.subscribers.values() if feed else ()
        return [{"user": sub.who, "mode": "interactive" if sub.interactive else "view"} for sub in subscribers]

    def notify(self, terminal_id: str) -> None:
        """New output (or an exit) happened: keep it, and flush soon, once per burst."""
        feed = self.feeds.get(terminal_id)
        if feed is None:
            return
        feed.catch_up()
        if feed.flushing:
            feed.pending = True
            return
        feed.flushing = True
        asyncio.get_running_loop().create_task(self._flush(terminal_id, feed))

    async def _flush(self, terminal_id: str, feed: TerminalFeed) -> None:
        try:
            while True:
                feed.pending = False
                await asyncio.gather(*(self._send_to(terminal_id, feed, sub) for sub in list(feed.subscribers.values())))
                if not feed.pending:
                    break
        except Exception:  # noqa: BLE001 - a broken subscriber must not stop the others' next flush
            logger.exception("sending output of %s failed", terminal_id)
        finally:
            feed.flushing = False
        self._retry_lagging(terminal_id, feed)

    def _retry_lagging(self, terminal_id: str, feed: TerminalFeed) -> None:
        loop = asyncio.get_running_loop()
        for channel, subscriber in list(feed.subscribers.items()):
            if subscriber.lagging_since is not None and loop.time() - subscriber.lagging_since > ABANDON_SECONDS:
                self.unsubscribe(terminal_id, channel)
        if any(sub.lagging_since is not None or sub.undelivered for sub in feed.subscribers.values()):
            loop.call_later(RETRY_SECONDS, self.notify, terminal_id)

    async def _send_to(self, terminal_id: str, feed: TerminalFeed, subscriber: Subscriber) -> None:
        buffer = feed.recent
        budget = REPLAY_BYTES
        complete = not feed.session.is_alive
        while subscriber.next_byte < buffer.end and budget > 0:
            position = max(subscriber.next_byte, subscriber.replay_from)
            data, start, truncated = buffer.read_bytes(position, min(FRAME_BYTES, budget), complete=complete)
            if not data and not truncated:
                break  # only part of a character so far: it goes with the next output
            if truncated or start > subscriber.next_byte:
                gap = {"type": protocol.STREAM_GAP, "terminal": terminal_id, "from": subscriber.next_byte, "to": start}
                if not await self._deliver(subscriber, [gap]):
                    return
                subscriber.next_byte = start  # the gap is announced: never announce it twice
            frame = {"type": protocol.STREAM_OUTPUT, "terminal": terminal_id, "offset": start, "data": data}
            if not await self._deliver(subscriber, [frame]):
                return
            subscriber.next_byte = start + len(data)
            budget -= len(data)
        if budget <= 0:
            self.notify(terminal_id)  # more to replay: continue in a later turn, letting others run
            return
        status = feed.session.exit_status
        if status is not None and not subscriber.exit_sent and subscriber.next_byte >= buffer.end:
            subscriber.exit_sent = await self._deliver(subscriber, [{
                "type": protocol.STREAM_EXIT, "terminal": terminal_id,
                "exitCode": status.exit_code, "signal": status.signal, "offset": buffer.end,
            }])

    async def _deliver(self, subscriber: Subscriber, frames: list[dict]) -> bool:
        for frame in frames:
            try:
                async with self.sending:
                    await self.layer.send(subscriber.channel, frame)
            except ChannelFull:
                # A slow client: skip it now, replay from the buffer on a later flush.
                if subscriber.lagging_since is None:
                    subscriber.lagging_since = asyncio.get_running_loop().time()
                return False
            except TRANSPORT_ERRORS as error:
                # Not the client's fault: replay on a later flush, however long the layer stays away.
                if not subscriber.undelivered:
                    logger.warning("output to %s not sent (%s: %s); retrying", subscriber.channel,
                                   type(error).__name__, error)
                subscriber.undelivered = True
                return False
        subscriber.lagging_since = None
        subscriber.undelivered = False
        return True
