"""The audit of keys typed live (WebSocket input frames): every key on record before anything it can cause runs.

A key that only adds text to the line being typed executes nothing: printable characters. Enter, every other
control character, escape sequences and C1 controls can (they end a line, send a signal through the line
discipline, move through a menu). So, with TERMINALS_KEY_AUDIT=batched (the default):
- printable-only frames go to the terminal at once; their audit rows are written together, BATCH_SECONDS later;
- any other frame first waits until every earlier key is durable on record, then is audited itself, and only then
  goes out; a batch that cannot be written refuses it (AUDIT_UNAVAILABLE), sending nothing.
So no byte that can make a shell execute anything reaches the PTY before the rows of everything typed up to it are
committed. A program reading the terminal in raw mode (an editor, a pager) acts on printable keys too, up to
BATCH_SECONDS before their row is committed: SECURITY.md says so. TERMINALS_KEY_AUDIT=strict commits a row
before every frame goes out, as POST .../input always does.
"""

from __future__ import annotations

import asyncio
import logging
import re

from django.conf import settings

from .plumbing import database_threads
from .audit import Actor, audit
from .exceptions import AuditUnavailable

logger = logging.getLogger(__name__)

# How long a printable key may wait for its row. Writing a batch's row delays the key echoed meanwhile by about half
# a millisecond on a 2-core machine, however cheap the write (bench/ANALYSIS.md, eighth session): every 50 ms, that
# was one key in a hundred typed back to back; every 250 ms it is one in five hundred, and a row holds a few keys of
# a person's typing instead of one.
BATCH_SECONDS = 0.25
BATCH_LIMIT = 4096  # characters held back at most: past this the batch is written before the next frame goes out
# C0 controls (Enter, Tab, Ctrl-C, ESC...), DEL, and C1 controls (a CSI on its own, for example).
ACTIVE = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def is_inert(text: str) -> bool:
    """Whether text only adds printable characters to a line being edited."""
    return bool(text) and ACTIVE.search(text) is None


def batched() -> bool:
    return settings.TERMINALS["KEY_AUDIT"] == "batched"


class KeyAudit:
    """The input audit of one live connection."""

    def __init__(self, actor: Actor, terminal_id: str) -> None:
        self.actor = actor
        self.terminal_id = terminal_id
        self._pending: list[str] = []
        self._pending_chars = 0
        self._timer: asyncio.TimerHandle | None = None
        self._flushing: asyncio.Lock = asyncio.Lock()

    async def before_sending(self, text: str) -> None:
        """Returns once text may go to the terminal; raises AuditUnavailable (nothing may go out) otherwise."""
        if batched() and is_inert(text) and self._pending_chars + len(text) <= BATCH_LIMIT:
            self._pending.append(text)
            self._pending_chars += len(text)
            if self._timer is None:
                self._timer = asyncio.get_running_loop().call_later(BATCH_SECONDS, self._flush_soon)
            return
        await self._commit(then=text)  # every earlier key on record first, then this one

    def _flush_soon(self) -> None:
        self._timer = None
        task = asyncio.ensure_future(self.flush())
        task.add_done_callback(_log_failure)

    async def flush(self) -> None:
        """Commits the keys held back, as one row (their text in order, and how many frames). On failure they stay
        held, so the next flush tries again, and the error is raised to whoever must not go on."""
        await self._commit(then=None)

    async def _commit(self, then: str | None) -> None:
        """The keys held back as one row and then `then` (a frame that can run something) as its own, in one hop to
        a database thread: the second row waited for a hop of its own after the first."""
        async with self._flushing:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            keys, text = len(self._pending), "".join(self._pending)
            if not keys and then is None:
                return
            refused = await database_threads.run(self._write, keys, text, then)
            del self._pending[:keys]
            self._pending_chars -= len(text)
            if refused is not None:
                raise refused

    def _write(self, keys: int, text: str, then: str | None) -> AuditUnavailable | None:
        """On a database thread. A failure of the held keys' row raises (they stay held); one of `then`'s row, after
        theirs was written, is returned, so that they are let go and `then` is still refused."""
        if keys:
            audit(self.actor, "input", terminal_id=self.terminal_id, outcome="sent", input=text, frames=keys)
        if then is not None:
            try:
                audit(self.actor, "input", terminal_id=self.terminal_id, outcome="sent", input=then)
            except AuditUnavailable as error:
                return error
        return None


def _log_failure(task: asyncio.Task) -> None:
    if not task.cancelled() and isinstance(task.exception(), AuditUnavailable):
        logger.error("typed keys already sent could not be audited yet; the next key that can run anything waits "
                     "for them")
