"""The checks use cases make before acting, the same whatever the interface: a writable audit trail, a window size,
the input's size, an active terminal."""

from __future__ import annotations

import logging

from django.conf import settings
from django.db import DatabaseError, transaction

from ..environment import invalid
from ..exceptions import AuditUnavailable, database_unavailable, terminal_inactive
from ..models import TerminalSession

logger = logging.getLogger(__name__)


def require_audit_writable() -> None:
    """Refuses up front (503 AUDIT_UNAVAILABLE) an action whose audit row can only be written after it.

    Takes the database's write lock and lets it go: when the database is locked past its busy timeout,
    or down, the request stops here, before a process is started, ended or signalled.
    """
    try:
        with transaction.atomic():
            pass
    except DatabaseError as error:
        unavailable = database_unavailable(error)
        if unavailable is not None:
            raise unavailable from error
        logger.error("the audit trail cannot be written, request refused: %s", error)
        raise AuditUnavailable() from error


def checked_window_size(cols, rows) -> tuple[int, int]:
    """The one check of a window size, whatever the interface asked (REST, WebSocket, MCP, ACP, the dashboard):
    whole numbers from 1 to MAX_COLS and MAX_ROWS. A larger screen is what every screen read renders, on the process
    that serves everyone (65535 x 65535 took a server to 100% CPU for minutes); past 65535 the PTY cannot hold it."""
    config = settings.TERMINALS
    for field, value, limit in (("cols", cols, config["MAX_COLS"]), ("rows", rows, config["MAX_ROWS"])):
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= limit:
            raise invalid(field, f"must be a whole number from 1 to {limit} (TERMINALS_MAX_{field.upper()}); "
                                 f"got {str(value)[:20]}")
    return cols, rows


def checked_input(text: str) -> str:
    """The one check of input's size, whatever the interface typed it (REST, the WebSocket, MCP, ACP): at most
    MAX_INPUT_BYTES of what the client sent (an Enter key the service adds does not count)."""
    limit = settings.TERMINALS["MAX_INPUT_BYTES"]
    if len(text.encode("utf-8", errors="surrogatepass")) > limit:
        raise invalid("input", f"longer than {limit} bytes (TERMINALS_MAX_INPUT_BYTES)")
    return text


def _require_active(record: TerminalSession) -> None:
    if not record.is_active:
        raise terminal_inactive(record.id, record.status, released=not record.holds_output)
