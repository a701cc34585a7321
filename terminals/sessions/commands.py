"""Commands run in a shell terminal, each with its own start, end and output."""

from __future__ import annotations

from ..audit import Actor, audit
from ..remote import protocol
from .checks import _require_active
from .lookup import session_get_for, session_get_for_typing
from .routing import _ask_worker
from .waiting import _wait_seconds, worker_client_wait

def session_command_run(*, actor: Actor, terminal_id, command: str, timeout_ms: int, wait: bool, read: dict) -> dict:
    """Runs one command in a shell terminal; with wait, answers when it ends, stops at a prompt, or times out."""
    record = session_get_for_typing(user=actor.user, terminal_id=terminal_id)
    _require_active(record)
    # Like input, the command is on record before it reaches the terminal.
    audit(actor, "command", terminal_id=record.id, outcome="sent", command=command)
    return worker_client_wait(record, protocol.COMMAND_RUN, _wait_seconds(actor, timeout_ms) if wait else 0,
                              {"command": command, "wait": wait, "read": read, "actor": actor.as_dict()}, actor)


def session_command_get(*, actor: Actor, terminal_id, command_id: str, read: dict) -> dict:
    record = session_get_for(user=actor.user, terminal_id=terminal_id)
    return _ask_worker(record, protocol.COMMAND_GET, command_id=command_id, read=read)


def session_command_wait(*, actor: Actor, terminal_id, command_id: str, timeout_ms: int, read: dict) -> dict:
    record = session_get_for(user=actor.user, terminal_id=terminal_id)
    return worker_client_wait(record, protocol.COMMAND_WAIT, _wait_seconds(actor, timeout_ms),
                              {"command_id": command_id, "read": read}, actor)


def session_command_list(*, actor: Actor, terminal_id) -> dict:
    record = session_get_for(user=actor.user, terminal_id=terminal_id)
    return _ask_worker(record, protocol.COMMAND_LIST)
