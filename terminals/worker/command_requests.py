"""The worker's answer to requests about API commands: run one in a shell terminal, read it, wait for it, list them."""

from __future__ import annotations

import asyncio

from ..remote import protocol
from ..runtime.commands import Command
from ..runtime.errors import CommandNotFound, InvalidRequest, TerminalBusy
from ..runtime.manager import SessionManager
from ..runtime.shell import ShellSession
from . import bookkeeping
from .database_queue import DatabaseQueue
from .requests import FIRST_PROMPT_WAIT_SECONDS, Handler
from .shapes import command_data, command_summary


class CommandRequests:
    """Commands of the shell terminals the worker holds; each one's end is audited under the user who ran it."""

    def __init__(self, *, manager: SessionManager, database: DatabaseQueue) -> None:
        self.manager, self.database = manager, database

    def handlers(self) -> dict[str, Handler]:
        return {
            protocol.COMMAND_RUN: self.handle_command_run,
            protocol.COMMAND_GET: self.handle_command_get,
            protocol.COMMAND_WAIT: self.handle_command_wait,
            protocol.COMMAND_LIST: self.handle_command_list,
        }

    def _shell(self, session_id: str) -> ShellSession:
        session = self.manager.get(session_id)
        if not isinstance(session, ShellSession):
            raise InvalidRequest("commands run in shell terminals; this one runs a program directly")
        return session

    def _command(self, message: dict) -> tuple[ShellSession, Command]:
        session = self._shell(message["id"])
        record = session.commands.get(message["command_id"])
        if record is None:
            raise CommandNotFound(f"no command {message['command_id']} in terminal {message['id']}")
        return session, record

    async def handle_command_run(self, message: dict) -> dict:
        session = self._shell(message["id"])
        loop = asyncio.get_running_loop()
        deadline = loop.time() + message["timeout"] + FIRST_PROMPT_WAIT_SECONDS
        await first_prompt(session, message["timeout"] + FIRST_PROMPT_WAIT_SECONDS)
        await session.ready_for(message["command"], 0)
        record = session.run_command(message["command"])
        record.actor = message.get("actor") or {}
        self.audit_end(message["id"], record)
        if message.get("wait", True):
            # A first prompt that took longer than FIRST_PROMPT_WAIT_SECONDS took that much of the timeout.
            result = await session.wait_command(record, min(message["timeout"], max(0.0, deadline - loop.time())))
        else:
            result = None
        return {"terminalId": message["id"], **command_data(session, record, message.get("read", {}), result)}

    def audit_end(self, terminal_id: str, record: Command) -> None:
        """The command's end gets an audit row, under whoever sent it (also for one a restarted worker took back)."""
        actor = record.actor or {}
        record.on_finish = lambda finished: self.database.submit(
            lambda: bookkeeping.command_audit(terminal_id, command_summary(finished), actor)
        )

    async def handle_command_get(self, message: dict) -> dict:
        session, record = self._command(message)
        return {"terminalId": message["id"], **command_data(session, record, message.get("read", {}))}

    async def handle_command_wait(self, message: dict) -> dict:
        session, record = self._command(message)
        result = await session.wait_command(record, message["timeout"])
        return {"terminalId": message["id"], **command_data(session, record, message.get("read", {}), result)}

    async def handle_command_list(self, message: dict) -> dict:
        session = self._shell(message["id"])
        history = [command_summary(record) for record in session.commands.history()]
        return {"terminalId": message["id"], "commands": history, "count": len(history)}


async def first_prompt(session: ShellSession, seconds: float) -> None:
    """Waits for a new shell's first prompt; refuses the command, typing nothing, when it does not come.

    Typed earlier, the command would sit in the terminal until the shell reads it, at no known time, or be
    read by whatever its startup files run (a question they ask, say).
    """
    if not await session.started(seconds):
        raise TerminalBusy(
            f"the shell has not shown its first prompt within {seconds:g} s: its startup files are still "
            "running (or waiting for input), so nothing was typed. Read the terminal's output to see what it "
            "is doing, then send the command again, with a longer timeoutMs if the shell starts slowly",
            startingShell={"waitedMs": round(seconds * 1000)},
        )
