"""A live connection's use cases: attach to a terminal, type into it, resume after a pause, detach, and the audit
rows of each, refusals included. The WebSocket consumer (live/) calls these and keeps only its protocol: frames,
flow control and close codes. They run on the event loop: database work goes through database_threads, worker
requests through the worker's client, as REST's use cases (sessions/) do from a request's thread.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from rest_framework.exceptions import AuthenticationFailed

from . import sessions
from .plumbing import database_threads
from .audit import Actor, audit
from .auth import usable_key
from .exceptions import AuditUnavailable, DatabaseUnavailable, ServiceError, TerminalNotFound, terminal_inactive
from .ids import parse_uuid
from .keystrokes import KeyAudit
from .remote import client as worker_client
from .remote import leases, protocol

logger = logging.getLogger(__name__)


@dataclass
class Attachment:
    """A connection attached to a terminal: where its worker is, and what the worker answered (the offset output
    starts from, the window size...), which the client gets as its `attached` frame."""

    actor: Actor
    terminal_id: str  # the canonical spelling, for audit rows and worker requests
    worker_channel: str
    subscriber: str  # the connection's own channel, where the worker pushes output
    read_only: bool
    answer: dict
    keys: KeyAudit


def find_with_key(key: str, terminal_id: str, read_only: bool):
    """(the key's record, the terminal's (record, channel) or the ServiceError finding it raised); (None, None) for
    a key that is unknown, revoked, expired or whose user is disabled. The key is checked as REST checks it; one
    trip to a database thread for both (an attach is on the create-to-first-prompt path)."""
    try:
        record = usable_key(key)
    except AuthenticationFailed:
        return None, None
    try:
        return record, _record_and_channel(record.user, terminal_id, read_only)
    except ServiceError as error:
        return record, error


def _record_and_channel(user, terminal_id: str, read_only: bool):
    # A viewer may also watch a terminal its owner shared with them; typing needs the terminal itself, and one's own
    # (staff watch other users' terminals with mode=view: sessions.session_get_for_typing).
    find = sessions.session_get_for_viewing if read_only else sessions.session_get_for_typing
    record = find(user=user, terminal_id=terminal_id)
    return record, sessions.hosting_channel(record)


async def attach(actor: Actor, terminal_id: str, *, read_only: bool, subscriber: str, from_byte: int | None,
                 found=None) -> Attachment:
    """Attaches subscriber to the terminal (found: what find_with_key found, when the key's check looked it up).
    On record before the client gets a byte: when the row cannot be written, the attach is undone and
    AuditUnavailable raised. Raises the lookup's and the worker's ServiceErrors as they come."""
    if found is None:
        found = await database_threads.run(_record_and_channel, actor.user, terminal_id, read_only)
    if isinstance(found, Exception):  # the lookup made with the key's check refused
        raise found
    record, channel = found
    terminal_id = str(record.id)
    answer = await worker_client.request(channel, protocol.ATTACH, id=terminal_id, subscriber=subscriber,
                                         from_byte=from_byte, interactive=not read_only, who=actor.username,
                                         actor=actor.as_dict())
    attachment = Attachment(actor, terminal_id, channel, subscriber, read_only, answer, KeyAudit(actor, terminal_id))
    try:
        await database_threads.run(audit, actor, "attach", terminal_id=terminal_id,
                                   mode="view" if read_only else "interactive")
    except AuditUnavailable:
        await _detach_from_worker(attachment)
        raise
    leases.hold(channel, terminal_id, subscriber)
    return attachment


async def refuse(actor: Actor, terminal_id: str, code: str) -> None:
    """An attach refused (credentials, origin, the cap, the terminal): on record under code."""
    await database_threads.run(audit, actor, "attach", outcome=code, terminal_id=parse_uuid(terminal_id))


async def type_keys(attachment: Attachment, data: str) -> None:
    """Keys typed live: checked as every input is, on record before anything that can run goes out
    (keystrokes.py), then one request to the worker."""
    sessions.checked_input(data)
    await attachment.keys.before_sending(data)
    try:
        await worker_client.request(attachment.worker_channel, protocol.INPUT, id=attachment.terminal_id, data=data,
                                    close=False)
    except TerminalNotFound:
        raise terminal_inactive(attachment.terminal_id, released=True) from None


async def refuse_keys(attachment: Attachment, error: ServiceError) -> None:
    """An input frame refused leaves its own row, as a refused POST .../input does."""
    try:
        await database_threads.run(audit, attachment.actor, "input", outcome=error.default_code,
                                   terminal_id=attachment.terminal_id, message=error.message)
    except ServiceError as failure:  # the refusal is still answered
        if not isinstance(failure, DatabaseUnavailable):  # an outage is logged once, not each frame
            logger.exception("auditing a refused input frame failed")


async def resume(attachment: Attachment, from_byte: int) -> None:
    """A client that caught up after a pause: the worker resends what it dropped meanwhile, from its buffer."""
    await worker_client.request(attachment.worker_channel, protocol.ATTACH, id=attachment.terminal_id,
                                subscriber=attachment.subscriber, from_byte=from_byte,
                                interactive=not attachment.read_only)


async def detach(attachment: Attachment, *, close_code: int, outcome: str = "ok") -> None:
    """Puts the detach on record and detaches from the worker. Each step is tried whatever the one before raised:
    a failed flush must not leave a ghost viewer."""
    try:
        await attachment.keys.flush()  # keys sent and not yet on record
    except Exception:  # noqa: BLE001 - the detach below must still happen
        logger.exception("keys typed into terminal %s before its client left could not be audited",
                         attachment.terminal_id)
    try:
        # connection: the worker audits a detach that no web process renewed (leases.py) unless this row exists.
        await database_threads.run(audit, attachment.actor, "detach", terminal_id=attachment.terminal_id,
                                   closeCode=close_code, outcome=outcome, connection=attachment.subscriber)
    except AuditUnavailable:
        logger.warning("the detach from terminal %s (close code %s) could not be audited", attachment.terminal_id,
                       close_code)
    finally:
        await _detach_from_worker(attachment)


async def _detach_from_worker(attachment: Attachment) -> None:
    # Not waited for: a worker that is gone (4409) must not hold up the detach row. One that does not arrive
    # (Redis away: 4503) is made up for by the worker, which drops a subscriber whose lease nobody renews.
    leases.release(attachment.worker_channel, attachment.terminal_id, attachment.subscriber)
    await worker_client.tell(attachment.worker_channel, protocol.DETACH, id=attachment.terminal_id,
                             subscriber=attachment.subscriber)

