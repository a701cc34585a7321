"""What changes a running terminal: input typed into it, its window size, signals, and its end."""

from __future__ import annotations

import logging

from django.conf import settings
from django.db import DatabaseError
from django.utils import timezone

from ..audit import Actor, audit
from ..exceptions import terminal_inactive
from ..models import TerminalSession
from ..remote import client as worker_client
from ..remote import protocol
from .checks import _require_active, checked_input, checked_window_size, require_audit_writable
from .lookup import forget_record, session_get_for, session_get_for_typing
from .routing import _ask_worker

logger = logging.getLogger(__name__)


# The signals a client may send by name (seed 000's list, and the job-control and user signals).
SIGNALS = ("SIGTERM", "SIGINT", "SIGKILL", "SIGHUP", "SIGQUIT", "SIGTSTP", "SIGCONT", "SIGUSR1", "SIGUSR2")


def normalize_input(text: str, *, append_newline: bool = True) -> str:
    """Adds the Enter key, as the contract asks, unless the input already ends a line or is a control key."""
    if not append_newline:
        return text
    if text.endswith(("\n", "\r")) or (text and _is_control_key(text)):
        return text
    return text + "\n"


def _is_control_key(text: str) -> bool:
    # "\x03" (Ctrl-C), "\x04", "\x1b[A" (an arrow key): keystrokes, not commands to run.
    first = ord(text[0])
    return (first < 0x20 and text[0] not in "\t") or first == 0x7F


def session_write(*, actor: Actor, terminal_id, text: str, append_newline: bool = True, close: bool = False) -> dict:
    record = session_get_for_typing(user=actor.user, terminal_id=terminal_id)
    if not record.is_active:
        raise terminal_inactive(record.id, record.status, released=not record.holds_output)
    data = normalize_input(checked_input(text), append_newline=append_newline)
    # The audit row is written before the bytes reach the terminal; when it cannot be, audit() raises
    # AuditUnavailable (503) and nothing is sent.
    audit(actor, "input", terminal_id=record.id, outcome="sent", input=data, **({"close": True} if close else {}))
    reply = _ask_worker(record, protocol.INPUT, data=data, close=close)
    try:
        TerminalSession.objects.filter(pk=record.pk).update(last_activity=timezone.now())
    except DatabaseError as error:  # the input went through; the worker's heartbeat records the activity too
        logger.warning("last activity of terminal %s not recorded: %s", record.id, error)
    return {"terminalId": str(record.id), **reply}


def session_terminate(
    *, actor: Actor, terminal_id, signal: str = "SIGTERM", force: bool = False, grace_ms: int | None = None
) -> dict:
    """Ends the terminal's processes and frees it (the Agent Client Protocol's release); the record stays."""
    record = session_get_for(user=actor.user, terminal_id=terminal_id)
    signal = "SIGKILL" if force else signal
    grace = 0.0 if force else (None if grace_ms is None else grace_ms / 1000)
    kill_grace = settings.TERMINALS["KILL_GRACE_MS"] / 1000 if grace is None else grace
    require_audit_writable()
    # The worker may take the whole grace period and then a few seconds to reap.
    data = _ask_worker(record, protocol.TERMINATE, worker_client.default_timeout() + kill_grace + 5,
                       signal=signal, grace=grace)
    forget_record(record.id)
    audit(actor, "delete", terminal_id=record.id, signal=signal, exitCode=data["exitCode"], endSignal=data["signal"])
    return data


def session_resize(*, actor: Actor, terminal_id, cols: int, rows: int) -> dict:
    record = session_get_for_typing(user=actor.user, terminal_id=terminal_id)
    cols, rows = checked_window_size(cols, rows)
    _require_active(record)
    require_audit_writable()
    data = _ask_worker(record, protocol.RESIZE, cols=cols, rows=rows)
    audit(actor, "resize", terminal_id=record.id, cols=cols, rows=rows)
    return data


def session_signal(*, actor: Actor, terminal_id, signal: str) -> dict:
    """Sends a signal to the terminal's foreground process group, as Ctrl-C does."""
    record = session_get_for_typing(user=actor.user, terminal_id=terminal_id)
    _require_active(record)
    require_audit_writable()
    data = _ask_worker(record, protocol.SIGNAL, signal=signal)
    audit(actor, "signal", terminal_id=record.id, signal=signal, processGroup=data["processGroup"])
    return data


def session_kill(*, actor: Actor, terminal_id, signal: str = "SIGKILL") -> dict:
    """Ends the terminal's processes but keeps its output readable (the Agent Client Protocol's kill)."""
    record = session_get_for(user=actor.user, terminal_id=terminal_id)
    kill_grace = settings.TERMINALS["KILL_GRACE_MS"] / 1000
    require_audit_writable()
    data = _ask_worker(record, protocol.KILL, worker_client.default_timeout() + kill_grace + 5, signal=signal)
    forget_record(record.id)
    audit(actor, "kill", terminal_id=record.id, signal=signal, exitCode=data["exitCode"], endSignal=data["signal"])
    return data
