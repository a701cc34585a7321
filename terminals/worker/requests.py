"""The worker's answer to each request about a terminal it holds: one handler per protocol message."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable

from django.conf import settings

from ..environment import PER_USER, homes_base, run_as_policy
from ..record_shapes import session_data
from ..remote import protocol
from ..runtime import confinement as confine
from ..runtime import integrity, sealed
from ..runtime.accounts import provision
from ..runtime.ansi import newest_plain_text
from ..runtime.buffer import OutputBuffer
from ..runtime.errors import AccountUnavailable, InvalidRequest, SessionNotFound
from ..runtime.manager import SessionManager
from ..runtime.processes import signal_number
from ..runtime.pty import ExitStatus
from ..runtime.tty_limits import check_window_size
from ..runtime.shell import ShellSession
from . import bookkeeping
from .database_queue import DatabaseQueue
from .placement import terminal_account_kind
from .recording_files import read_chunk
from .shapes import bytes_data, exit_status_data, info_data, line_read_data, stats_data
from .streaming import OutputFanout

# When this process started: a worker restarted under its keeper (a reload, a crash) answers pings with a new one.
STARTED = time.monotonic()

# A new shell gets this long to show its first prompt on top of a command's timeout (so a command that does not
# wait, or waits less, still finds it started); a longer wait counts against the timeout. Within the web side's
# deadline, which allows the worker timeout on top of the command's.
FIRST_PROMPT_WAIT_SECONDS = 2.0

Handler = Callable[[dict], Awaitable[dict]]


def allowed_size(message: dict) -> None:
    """A worker renders every screen it is asked for on its event loop: it takes no size past the service's limits,
    whoever sent the request (the web processes check first, sessions.checked_window_size)."""
    check_window_size(message["cols"], message["rows"], (settings.TERMINALS["MAX_COLS"], settings.TERMINALS["MAX_ROWS"]))


def _buffer(session, stream: str | None) -> OutputBuffer:
    if stream in (None, "", "both"):
        return session.buffer
    if not hasattr(session, "buffer_for"):
        raise InvalidRequest("stream: only a terminal without a PTY keeps stdout and stderr apart")
    return session.buffer_for(stream)


def _record_data(session_id: str, record) -> dict:
    if record is None:
        raise SessionNotFound(f"terminal {session_id} has no record any more", terminal_id=session_id)
    return session_data(record)


class TerminalRequests:
    """Input, output, size, signals and ends of the terminals the worker holds, and its live clients."""

    def __init__(self, *, worker_id: str, manager: SessionManager, database: DatabaseQueue, fanout: OutputFanout,
                 confinement: confine.Confinement) -> None:
        self.worker_id, self.manager, self.database, self.fanout = worker_id, manager, database, fanout
        self.confinement = confinement

    def handlers(self) -> dict[str, Handler]:
        return {
            protocol.INPUT: self.handle_input,
            protocol.OUTPUT: self.handle_output,
            protocol.STATS: self.handle_stats,
            protocol.TERMINATE: self.handle_terminate,
            protocol.PING: self.handle_ping,
            protocol.ACCOUNT: self.handle_account,
            protocol.BYTES: self.handle_bytes,
            protocol.NEWEST: self.handle_newest,
            protocol.INFO: self.handle_info,
            protocol.SCREEN: self.handle_screen,
            protocol.RESIZE: self.handle_resize,
            protocol.SIGNAL: self.handle_signal,
            protocol.WAIT: self.handle_wait,
            protocol.KILL: self.handle_kill,
            protocol.ATTACH: self.handle_attach,
            protocol.DETACH: self.handle_detach,
            protocol.RENEW: self.handle_renew,
            protocol.RECORDING_READ: self.handle_recording_read,
        }

    # Input and output

    async def handle_input(self, message: dict) -> dict:
        data = message["data"].encode("utf-8", errors="surrogateescape")
        session = self.manager.get(message["id"])
        if message.get("close") and not hasattr(session, "close_input"):
            raise InvalidRequest("eof: only a terminal without a PTY has an input to close; send Ctrl-D (\\x04) instead")
        if data:
            session.type_input(data)  # what comes after it is the answer to it, its echo aside
            if session.recording is not None:
                session.recording.input(message["data"], self.manager.clock())
        if message.get("close"):
            session.close_input()
        return {"bytesWritten": len(data), "pendingBytes": session.pending_input}

    async def handle_output(self, message: dict) -> dict:
        session = self.manager.get(message["id"])
        buffer = _buffer(session, message.get("stream"))
        read = message.get("read", {})
        since = message.get("since")
        if message.get("since_time") is not None:
            since = max(since or 0, buffer.line_since_time(message["since_time"]))
        result = buffer.read_lines(
            since=since,
            mode=read.get("mode", "full"),
            head_lines=read.get("head_lines", 50),
            tail_lines=read.get("tail_lines", 50),
            max_lines=read.get("max_lines", 1000),
        )
        return line_read_data(result, session, strip=read.get("strip_ansi", False))

    async def handle_newest(self, message: dict) -> dict:
        session = self.manager.get(message["id"])
        raw, evicted = session.buffer.text_between(0, None)
        exit_status = exit_status_data(session.exit_status) if session.finished else None
        # Rendering a few MB takes a fraction of a second: off the loop, so other terminals are not held up.
        text, cut = await asyncio.to_thread(newest_plain_text, raw, message["limit"], cut_before=evicted)
        return {"output": text, "truncated": evicted or cut, "exitStatus": exit_status}

    async def handle_bytes(self, message: dict) -> dict:
        session = self.manager.get(message["id"])
        buffer = _buffer(session, message.get("stream"))
        return bytes_data(session, buffer, message["from_byte"], message["max_bytes"], message.get("strip_ansi", False),
                          without_echo=message.get("without_echo", False))

    async def handle_stats(self, message: dict) -> dict:
        session = self.manager.get(message["id"])
        return stats_data(message["id"], session)

    async def handle_info(self, message: dict) -> dict:
        return {**info_data(self.manager.get(message["id"])), "viewers": self.fanout.watching(message["id"]),
                "watchers": self.fanout.watchers(message["id"])}

    async def handle_screen(self, message: dict) -> dict:
        session = self.manager.get(message["id"])
        if not hasattr(session, "screen"):
            raise InvalidRequest("a terminal without a PTY has no screen")
        return {"terminalId": message["id"], **(await session.render_screen())}

    async def handle_recording_read(self, message: dict) -> dict:
        data = await asyncio.to_thread(read_chunk, message["path"], message["offset"], message["length"])
        return {"data": data}

    # Size, signals and ends

    async def handle_resize(self, message: dict) -> dict:
        allowed_size(message)
        session = self.manager.get(message["id"])
        session.resize(message["cols"], message["rows"])
        if session.recording is not None:
            session.recording.resize(message["cols"], message["rows"], self.manager.clock())
        await self.database.run(lambda: bookkeeping.session_resize(message["id"], message["cols"], message["rows"]))
        return {"terminalId": message["id"], "cols": message["cols"], "rows": message["rows"]}

    async def handle_signal(self, message: dict) -> dict:
        session = self.manager.get(message["id"])
        if isinstance(session, ShellSession):
            # Sent right after creation, the signal waits for the shell's first prompt and finds it there, as it
            # would a moment later; otherwise it would go to the first process, before it became the shell.
            await session.started(FIRST_PROMPT_WAIT_SECONDS)
        group = session.signal_foreground(signal_number(message["signal"]))
        return {"terminalId": message["id"], "signal": message["signal"], "processGroup": group}

    async def handle_wait(self, message: dict) -> dict:
        session = self.manager.get(message["id"])
        status = await session.wait_for_exit(timeout=message["timeout"])
        return {
            "terminalId": message["id"],
            "timedOut": status is None,
            "exitCode": status.exit_code if status else None,
            "signal": status.signal if status else None,
        }

    async def handle_kill(self, message: dict) -> dict:
        return await self._end(message, "SIGKILL", release=False)

    async def handle_terminate(self, message: dict) -> dict:
        return await self._end(message, "SIGTERM", release=True)

    async def _end(self, message: dict, default_signal: str, *, release: bool) -> dict:
        """Ends the terminal's processes (and with release frees its output), recorded as killed if they ran."""
        session_id = message["id"]
        was_alive = self.manager.get(session_id).is_alive
        status = await self.manager.terminate(session_id, signal_number(message.get("signal", default_signal)),
                                              message.get("grace"), release=release)
        status = status or ExitStatus(exit_code=None, signal="SIGKILL")
        self.fanout.notify(session_id)
        ended_as = bookkeeping.KILLED if was_alive else None
        return await self.database.run(
            lambda: _record_data(session_id, bookkeeping.session_end(session_id, status, ended_as, release=release))
        )

    # The worker itself

    async def handle_ping(self, message: dict) -> dict:
        return {"worker": self.worker_id, "uptime": round(time.monotonic() - STARTED, 3),
                "terminals": len(self.manager), "active": self.manager.active_count,
                "isolation": {**self.confinement.describe(), "runAs": run_as_policy(), "workerUid": os.geteuid()},
                "commandIntegrity": integrity.describe(terminal_account_kind(), sealed.SHELLS)}

    async def handle_account(self, message: dict) -> dict:
        """Makes the user's own account before their first terminal (the web process may not be root)."""
        if run_as_policy() != PER_USER:
            raise AccountUnavailable("this worker does not run terminals per user: set TERMINALS_RUN_AS the same in "
                                     "every process")
        account = await asyncio.to_thread(provision, message["username"], prefix=settings.TERMINALS["RUN_AS_PREFIX"],
                                          homes=homes_base())
        return {"account": account.name, "home": account.home}

    # Live clients

    async def handle_attach(self, message: dict) -> dict:
        session = self.manager.get(message["id"])
        from_byte = message.get("from_byte")
        start = session.buffer.oldest_byte if from_byte is None else from_byte
        self.fanout.subscribe(message["id"], session, message["subscriber"], start,
                              interactive=message.get("interactive", False), who=message.get("who", ""),
                              actor=message.get("actor"))
        return {"terminalId": message["id"], "fromByte": start, "oldestByte": session.buffer.oldest_byte,
                "totalBytes": session.buffer.end, "isActive": session.is_alive, "cols": session.cols,
                "rows": session.rows, "viewers": self.fanout.watching(message["id"])}

    async def handle_detach(self, message: dict) -> dict:
        self.fanout.unsubscribe(message["id"], message["subscriber"])
        return {"terminalId": message["id"], "viewers": self.fanout.watching(message["id"])}

    async def handle_renew(self, message: dict) -> dict:
        unknown = self.fanout.renew(message.get("subscribers") or [])
        # Leases of terminals this process took back from its keeper, for connections it never had: they were
        # attached to its previous process (a crash; a SIGHUP told them itself). They reattach from their byte.
        restarted = [(terminal, channel) for terminal, channel in unknown if terminal in self.manager.taken_back]
        if restarted:
            await self.fanout.tell_restarted(restarted)
        return {}
