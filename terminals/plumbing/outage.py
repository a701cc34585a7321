"""A database that cannot be reached: told apart from other database errors, and logged once per outage.

A PostgreSQL restart or failover makes every statement fail at once. Each failed request used to be a 500 with a
traceback (95 requests in 10 s wrote 1.6 MB of log). Here a lost or refused connection is recognised (unavailable),
the outage is logged once when it starts (a WARNING with its cause) and once when it ends (INFO, at the first new
connection that succeeds), and exceptions.as_service_error turns it into 503 DATABASE_UNAVAILABLE, which every
interface renders through its own error mapping.

A database that answers but refuses a write (SQLite locked past its busy timeout, a disk full) is not an outage:
that stays AUDIT_UNAVAILABLE or whatever the caller made of it.
"""

from __future__ import annotations

import logging
import threading
import time

from django.db import InterfaceError, OperationalError
from django.db.backends.signals import connection_created

logger = logging.getLogger(__name__)

# PostgreSQL's SQLSTATEs of a connection that failed or was ended by the server: class 08 (connection exception),
# 57P01-57P03 (admin shutdown, crash shutdown, cannot connect now: a server stopping or starting), and 53300 (too
# many connections: every slot of max_connections taken, which bench figure 11 saw under a ramp of pollers).
_GONE_STATES = ("57P01", "57P02", "57P03", "53300")

_lock = threading.Lock()
_since: float | None = None  # monotonic time the current outage was noticed; None while the database answers


def is_unavailable(error: BaseException) -> bool:
    """Whether error is the database being out of reach (a refused, lost or closed connection), not a refusal
    of one statement by a database that answers."""
    if not isinstance(error, (OperationalError, InterfaceError)):
        return False
    if isinstance(error, InterfaceError):  # "connection already closed": the connection died under this thread
        return True
    cause = error.__cause__
    if cause is None or not type(cause).__module__.startswith("psycopg"):
        return False  # SQLite's "database is locked", and the like: the database is there
    state = getattr(cause, "sqlstate", None) or getattr(cause, "pgcode", None)  # psycopg 3, psycopg2
    # psycopg's own connection failures (refused, closed by the server unexpectedly) carry no SQLSTATE.
    return state is None or state.startswith("08") or state in _GONE_STATES


def noticed(error: BaseException) -> None:
    """Records that the database is unavailable; the first time in an outage, logs it with its cause."""
    global _since
    with _lock:
        if _since is not None:
            return
        _since = time.monotonic()
    cause = error.__cause__ or error
    logger.warning("database unavailable: %s; requests that need it answer 503 DATABASE_UNAVAILABLE until it is "
                   "back", " ".join(str(cause).split()))


def ongoing() -> bool:
    return _since is not None


def _reconnected(sender, connection, **kwargs) -> None:
    """A new connection succeeded: an outage in progress is over."""
    global _since
    with _lock:
        since, _since = _since, None
    if since is not None:
        logger.info("database available again after %.1f s", time.monotonic() - since)


connection_created.connect(_reconnected, dispatch_uid="terminals.plumbing.outage")
