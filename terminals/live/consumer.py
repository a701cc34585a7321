"""The live terminal WebSocket: output pushed as it happens, input, resize and signals; thin over sessions/.

Its close codes are in close_codes.py; a stopping server's clean close of every connection in stopping.py.
"""

from __future__ import annotations

import asyncio
import json
import logging
from urllib.parse import parse_qs

from autobahn.exception import Disconnected
from channels.db import DatabaseSyncToAsync
from channels.generic.websocket import AsyncWebsocketConsumer
from channels.consumer import get_handler_name
from django.db import DatabaseError

from .. import access, attachments, live_connections, metrics, sessions
from ..plumbing import lifecycle
from ..audit import Actor
from ..exceptions import (
    AuditUnavailable,
    DatabaseUnavailable,
    Forbidden,
    InvalidInput,
    LimitReached,
    ServiceError,
    database_unavailable,
    terminal_inactive,
)
from ..runtime.utf8 import decode
from ..remote import watch as worker_watch
from .close_codes import (
    CLOSE_CODES,
    CLOSE_FOREIGN_ORIGIN,
    CLOSE_INACTIVE,
    CLOSE_NOT_FOUND,
    CLOSE_SERVER_STOPPING,
    CLOSE_TOO_MANY,
    CLOSE_UNAUTHORIZED,
    CLOSE_UNAVAILABLE,
)
from . import frames
from .handshake import authenticate, from_byte, origin_allowed
from .stopping import open_connections

logger = logging.getLogger(__name__)


def database_sync_to_async(function):
    # For a use case that asks a worker (async_to_sync needs asgiref's thread); database work alone goes through
    # database_threads. Not the one thread shared by thread-sensitive code: a call that waits for the worker must
    # not hold a thread the worker may need.
    return DatabaseSyncToAsync(function, thread_sensitive=False)


WINDOW_BYTES = 4 << 20  # output sent but not acknowledged before the server pauses a client
CLOSE_AFTER_EXIT_SECONDS = 60.0  # how long a client may take to acknowledge the end before the server closes
LAYER_FAILED = "terminal.layer_failed"  # a receive from the channel layer failed


class TerminalConsumer(AsyncWebsocketConsumer):
    """One client attached to one terminal, interactive or (mode=view) read-only."""

    async def dispatch(self, message) -> None:
        # Channels' own dispatch first closes stale database connections, on the one shared sync thread, before every
        # message: two thread hops per keystroke (its frame, then its echo), queued behind the embedded worker's
        # database work. This consumer touches the database only through DatabaseSyncToAsync, whose thread does
        # that itself, so the hop is left out (bench figure 2).
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"No handler for message type {message['type']}")
        try:
            await handler(message)
        except Exception:
            # A handler that raises ends the consumer (channels closes the socket with 1011) without its disconnect:
            # the client would stay a viewer of the terminal for good, with no detach row. Leave first, then fail.
            if message["type"] != "websocket.disconnect":
                await self.disconnect(1011)
            raise

    async def connect(self) -> None:
        self.terminal_id = self.scope["url_route"]["kwargs"]["terminal_id"]
        query = parse_qs(self.scope.get("query_string", b"").decode())
        self.read_only = query.get("mode", [""])[0] == "view"
        self.attached = False
        self.sent_until = self.acked = 0  # byte offsets, for flow control
        self.paused_at: int | None = None
        self.exit_offset: int | None = None
        self.closing = False  # once a close is sent, nothing the client sends is handled
        # Accept first: a refusal then carries a close code, and still no terminal byte is sent.
        await self.accept()
        if lifecycle.stopping():  # a client reconnecting to a server on its way out: try another one
            await self.close(code=CLOSE_SERVER_STOPPING)
            return
        try:
            refusal = await self._admit(query)
        except (DatabaseError, DatabaseUnavailable) as error:
            unavailable = error if isinstance(error, DatabaseUnavailable) else database_unavailable(error)
            if unavailable is None:
                raise
            # The database is away (the outage is logged once): told as REST tells it, then 4503, try again later.
            await self._send({"type": "error", "code": unavailable.default_code, "message": unavailable.message,
                              "retryAfter": unavailable.wait})
            refusal = CLOSE_UNAVAILABLE
        if refusal is not None:
            await self.close(code=refusal)
            return
        hold = access.hold_of(self.actor, self.terminal_id, view=self.read_only)
        access.access_watch.watch(self, hold, self._access_lost)
        worker_watch.watch(self.terminal_id, self)
        open_connections.add(self)
        metrics.LIVE_CLIENTS.labels("websocket").inc()

    async def _admit(self, query: dict) -> int | None:
        """Checks credentials, origin and the terminal; attaches. Returns a close code on refusal."""
        self.actor, self.api_key, found = await authenticate(self.scope, self.terminal_id, self.read_only)
        if self.actor is None:
            await self._refuse("UNAUTHORIZED")
            return CLOSE_UNAUTHORIZED
        if self.api_key is None and not origin_allowed(self.scope):
            await self._refuse("FORBIDDEN")
            return CLOSE_FOREIGN_ORIGIN
        try:
            self.slot = live_connections.take(self.actor.user)  # given back in disconnect(), whatever happens next
        except LimitReached:
            await self._refuse(LimitReached.default_code)
            return CLOSE_TOO_MANY
        # On record before the client gets a byte; when it cannot be, the attach is undone and refused. (Output the
        # worker pushes meanwhile waits: a consumer handles its channel's messages after connect() returns.)
        try:
            self.link = await attachments.attach(self.actor, self.terminal_id, read_only=self.read_only,
                                                 subscriber=self.channel_name, from_byte=from_byte(query),
                                                 found=found)
        except (ValueError, ServiceError) as error:
            if isinstance(error, DatabaseUnavailable):
                raise  # told with its error frame, as any refusal for the database's outage
            if isinstance(error, AuditUnavailable):  # the attach row: it was undone
                return CLOSE_UNAVAILABLE
            code = error.default_code if isinstance(error, ServiceError) else "INVALID_INPUT"
            await self._refuse(code)
            if isinstance(error, Forbidden):  # staff, interactive, on another user's terminal: say to use mode=view
                await self._error(code, error.message)
            return CLOSE_CODES.get(type(error), CLOSE_NOT_FOUND if code == "TERMINAL_NOT_FOUND" else 4400)
        self.terminal_id = self.link.terminal_id
        self.attached = True
        self.sent_until = self.acked = self.link.answer["fromByte"]
        await self._send({"type": "attached", **self.link.answer, "readOnly": self.read_only})
        return None

    async def disconnect(self, code: int) -> None:
        if getattr(self, "slot", None) is not None:
            self.slot.release()
        worker_watch.unwatch(self.terminal_id, self)
        closer = getattr(self, "exit_close", None)
        if closer is not None:
            closer.cancel()
        access.access_watch.unwatch(self)
        try:
            if self.attached:
                self.attached = False
                await attachments.detach(self.link, close_code=getattr(self, "sent_close", None) or code,
                                         outcome=getattr(self, "access_lost", "ok"))
        finally:
            # Only now: a stopping server waits for open_connections to empty, so it does not exit before the detach is on
            # record and sent to the worker.
            if self in open_connections:
                open_connections.discard(self)
                metrics.LIVE_CLIENTS.labels("websocket").dec()

    # From the client

    async def close(self, code=None, reason=None) -> None:
        self.closing = True
        if getattr(self, "sent_close", None) is None:
            self.sent_close = code  # what the client is told; daphne may report the end as 1006 (the TCP went first)
        await super().close(code=code, reason=reason)

    async def receive(self, text_data=None, bytes_data=None) -> None:
        # Frames a client sent before it learnt of a refusal, or after any close, act on nothing: a refused
        # connection has no actor or terminal of its own to act for.
        if not self.attached or self.closing:
            return
        try:
            await self._receive(text_data, bytes_data)
        except Exception:  # noqa: BLE001 - a frame this code mishandles is this code's bug, not the client's
            # Escaping, it would end the consumer and close the socket with 1011: the frame is refused instead and
            # the connection (and its other frames) go on; the log has the traceback.
            logger.exception("a frame on the live connection to terminal %s failed", self.terminal_id)
            await self._error("INTERNAL_ERROR", "The frame could not be handled and nothing of it was done; the "
                                                "connection stays open. If it happens again, report it.")

    async def _receive(self, text_data, bytes_data) -> None:
        try:
            frame = frames.read(text_data, bytes_data)
        except frames.FrameRefused as refusal:
            return await self._error("INVALID_INPUT", str(refusal))
        kind = frame.get("type") if isinstance(frame, dict) else None
        handlers = {"input": self._input, "resize": self._resize, "signal": self._signal, "ack": self._ack}
        handler = handlers.get(kind) if isinstance(kind, str) else None  # a list or an object cannot be a key
        if handler is None:
            return await self._error("INVALID_INPUT", f"unknown frame type {frames.shown(kind)}: a frame's type is one of "
                                                      f"{', '.join(handlers)}")
        if self.read_only and kind != "ack":
            return await self._error("FORBIDDEN", "this connection is read-only (mode=view)")
        try:
            try:
                await handler(frame)
            except DatabaseError as error:
                # A lookup before anything is done found the database locked or away (the audit writes themselves
                # already answer AUDIT_UNAVAILABLE): the frame is refused the same way, the connection stays.
                raise database_unavailable(error) or AuditUnavailable(
                    "the database did not answer; nothing was done, send the frame again", {"frame": kind}) from error
        except ServiceError as error:
            if kind == "input":  # as POST .../input does, a refused input leaves its own row
                await attachments.refuse_keys(self.link, error)
            await self._error(error.default_code, error.message)

    async def _input(self, frame: dict) -> None:
        data = frame.get("data")
        if not isinstance(data, str):
            raise InvalidInput("input: data must be a string")
        if self.exit_offset is not None:
            raise terminal_inactive(self.terminal_id, released=False)
        # The keystroke path: the terminal and its worker are known since the attach, so a key costs its audit
        # (keystrokes.py: a row before anything that can run goes out) and one request to the worker.
        await attachments.type_keys(self.link, data)

    async def _resize(self, frame: dict) -> None:
        # The core's one size check, here before the keys are flushed and the terminal looked up (it raises
        # InvalidInput, an error frame naming the field and its bound).
        cols, rows = sessions.checked_window_size(frame.get("cols"), frame.get("rows"))
        await self.link.keys.flush()  # the keys typed before it are on record before it acts
        await database_sync_to_async(sessions.session_resize)(actor=self.actor, terminal_id=self.terminal_id,
                                                              cols=cols, rows=rows)

    async def _signal(self, frame: dict) -> None:
        from ..sessions import SIGNALS

        name = str(frame.get("signal", "SIGINT")).upper()
        name = name if name.startswith("SIG") else "SIG" + name
        if name not in SIGNALS:
            return await self._error("INVALID_INPUT", f"signal: {name} is not one of {', '.join(SIGNALS)}")
        await self.link.keys.flush()  # the keys typed before it are on record before it acts
        await database_sync_to_async(sessions.session_signal)(actor=self.actor, terminal_id=self.terminal_id, signal=name)

    async def _ack(self, frame: dict) -> None:
        offset = frame.get("offset")
        if not isinstance(offset, int):
            return await self._error("INVALID_INPUT", "ack: offset must be a whole number")
        self.acked = max(self.acked, min(offset, self.sent_until))
        if self.exit_offset is not None and self.acked >= self.exit_offset:
            await self.close(code=1000)
            return
        if self.paused_at is not None and self.sent_until - self.acked < WINDOW_BYTES // 2:
            # Caught up: the worker resends what was dropped while paused, from its buffer.
            resume, self.paused_at = self.paused_at, None
            await attachments.resume(self.link, resume)

    # From the worker

    async def terminal_stream_output(self, event: dict) -> None:
        # Only the next contiguous frame is taken: anything else is a leftover from before a resume.
        if not self.attached or self.paused_at is not None or event["offset"] != self.sent_until:
            return
        if self.sent_until - self.acked >= WINDOW_BYTES:
            # The client is not keeping up: drop now, resend from the buffer once it acknowledges.
            self.paused_at = event["offset"]
            await self._send({"type": "paused", "offset": event["offset"], "window": WINDOW_BYTES})
            return
        data = event["data"]
        self.sent_until = event["offset"] + len(data)
        await self._send({"type": "output", "offset": event["offset"], "next": self.sent_until, "data": decode(data)})

    async def terminal_stream_gap(self, event: dict) -> None:
        if not self.attached or self.paused_at is not None or event["from"] != self.sent_until:
            return
        await self._send({"type": "gap", "from": event["from"], "to": event["to"]})
        skipped = event["to"] - event["from"]
        self.sent_until += skipped
        self.acked += skipped  # nothing to acknowledge for bytes that were never sent

    async def terminal_stream_exit(self, event: dict) -> None:
        if self.attached and self.paused_at is None and event["offset"] == self.sent_until:
            await self._send({"type": "exit", "exitCode": event["exitCode"], "signal": event["signal"],
                              "offset": event["offset"]})
            # Closing now would cut off output a slow client has not read yet: close once it
            # acknowledges the end, or after a long while.
            self.exit_offset = event["offset"]
            if self.acked >= self.exit_offset:
                await self.close(code=1000)
            else:
                self.exit_close = asyncio.get_running_loop().call_later(
                    CLOSE_AFTER_EXIT_SECONDS, lambda: asyncio.ensure_future(self.close(code=1000)))

    # The channel layer failing (Redis away)

    @property
    def channel_receive(self):
        return self._receive_from_layer

    @channel_receive.setter
    def channel_receive(self, receive) -> None:
        # Channels sets this once per connection and would let its failure escape: the socket closed with 1011
        # and a traceback in the log. A failure becomes a terminal.layer_failed event instead; after it nothing
        # more is read, since the connection closes.
        async def receive_or_report():
            if self._layer_failed:
                await asyncio.Event().wait()  # until the connection's end cancels it
            try:
                return await receive()
            except Exception as error:  # noqa: BLE001 - whatever the layer raises, the client is told the same
                self._layer_failed = True
                return {"type": LAYER_FAILED, "error": f"{type(error).__name__}: {error}"}

        self._layer_failed = False
        self._receive_from_layer = receive_or_report

    async def terminal_layer_failed(self, event: dict) -> None:
        """Output can no longer reach this connection: close with 4503, saying where to reconnect from."""
        if not self.attached:
            return  # refused while connecting (the attach needs the layer too), and closed already
        logger.warning("live connection closed: the channel layer failed (%s); terminal %s, client told to "
                       "reconnect from byte %d", event["error"], self.terminal_id, self.sent_until)
        await self._error("WORKER_UNAVAILABLE", f"The connection to the terminal's worker was lost; reconnect with "
                                                f"?fromByte={self.sent_until} to continue where this stopped.")
        await self.close(code=CLOSE_UNAVAILABLE)

    async def terminal_stream_dropped(self, event: dict) -> None:
        """The worker stopped streaming here: this process did not renew the lease in time (leases.py)."""
        if not self.attached:
            return
        logger.warning("live connection closed: the worker of terminal %s stopped streaming to it (its lease was "
                       "not renewed); client told to reconnect from byte %d", self.terminal_id, self.sent_until)
        await self._error("WORKER_UNAVAILABLE", f"The terminal's worker stopped streaming to this connection; "
                                                f"reconnect with ?fromByte={self.sent_until} to continue where this "
                                                f"stopped.")
        await self.close(code=CLOSE_UNAVAILABLE)

    async def server_stopping(self) -> None:
        if self.closing:
            return
        if self.exit_offset is not None:  # the client has everything, the exit included
            await self.close(code=1000)
            return
        await self._send({"type": "error", "code": "SERVER_STOPPING", "fromByte": self.sent_until,
                          "message": f"This server is stopping; reconnect, to it or another one, with "
                                     f"?fromByte={self.sent_until} to continue where this stopped."})
        await self.close(code=CLOSE_SERVER_STOPPING)

    async def terminal_stream_restarting(self, event: dict) -> None:
        """The terminal's worker restarts (SIGHUP), or restarted (a crash: its next process found this connection's
        lease among those it does not know), under its keeper (runtime/keeper.py), and the terminal goes on: the
        client reattaches from the byte it has, as when a web process stops (4012)."""
        if not self.attached or self.exit_offset is not None:
            return
        await self._send(frames.restarting(self.sent_until))
        await self.close(code=CLOSE_SERVER_STOPPING)

    async def terminal_worker_lost(self, event: dict) -> None:
        """The terminal's worker is gone (remote/watch.py): it will send nothing more, so close as a refusal would,
        with 4409 once the terminal is marked lost, else 4503. A client that has its exit frame has nothing to lose."""
        if not self.attached or self.exit_offset is not None:
            return
        if event["lost"]:
            await self._error("TERMINAL_INACTIVE", terminal_inactive(self.terminal_id, "lost", released=True).message)
        else:
            await self._error("WORKER_UNAVAILABLE", f"The terminal's worker stopped answering; reconnect later with "
                                                    f"?fromByte={self.sent_until} to continue where this stopped.")
        await self.close(code=CLOSE_INACTIVE if event["lost"] else CLOSE_UNAVAILABLE)

    async def _access_lost(self, reason: str) -> None:
        """Access was taken away while connected (access.py): 4401 for the credential, 4404 for the terminal."""
        self.access_lost = reason  # the detach row's outcome
        await self._error(reason, "Your key was revoked or your user disabled; connect again with a usable key."
                          if reason == access.UNAUTHORIZED else f"Terminal {self.terminal_id} not found")
        await self.close(code=CLOSE_UNAUTHORIZED if reason == access.UNAUTHORIZED else CLOSE_NOT_FOUND)

    async def _send(self, frame: dict) -> None:
        # Output the worker pushed can be dispatched after this side sent its close (a stopping server) or after
        # the client's socket closed, before its disconnect is handled. Sending then raised out of the handler and
        # ended the consumer without its disconnect: no detach from the worker, no audit row.
        if self.closing:
            return  # nothing follows a close frame
        try:
            await self.send(text_data=json.dumps(frame, ensure_ascii=False))
        except Disconnected:
            self.closing = True  # the client is gone; its disconnect, on its way, detaches and audits

    async def _error(self, code: str, message: str) -> None:
        await self._send({"type": "error", "code": code, "message": message})

    async def _refuse(self, code: str) -> None:
        actor = getattr(self, "actor", None) or Actor(source=(self.scope.get("client") or [""])[0] or "")
        await attachments.refuse(actor, self.terminal_id, code)

