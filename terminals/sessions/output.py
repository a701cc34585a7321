"""Reading what a terminal printed: by line or byte, its stats, its screen, its newest output, and live."""

from __future__ import annotations

from django.conf import settings

from ..audit import Actor, audit
from ..remote import protocol
from .lookup import _record_for_reading, session_get_for
from .routing import _ask_worker, _hosting_channel

def session_read(*, actor: Actor, terminal_id, options: dict) -> dict:
    """Output by line (since, sinceTime, mode) or, with from_byte, by byte offset."""
    record = _record_for_reading(user=actor.user, terminal_id=terminal_id)
    if options.get("from_byte") is not None:
        data = _ask_worker(record, protocol.BYTES, **options)
    else:
        data = _ask_worker(record, protocol.OUTPUT, **options)
    return {"terminalId": str(record.id), **data}


def session_stats(*, actor: Actor, terminal_id) -> dict:
    record = _record_for_reading(user=actor.user, terminal_id=terminal_id)
    return _ask_worker(record, protocol.STATS)


def session_newest_output(*, actor: Actor, terminal_id) -> dict:
    """The output as a terminal shows it, plain text: the newest outputByteLimit bytes (or the whole buffer)."""
    record = session_get_for(user=actor.user, terminal_id=terminal_id)
    limit = record.output_byte_limit or settings.TERMINALS["MAX_BUFFER_BYTES"]
    return _ask_worker(record, protocol.NEWEST, limit=limit)


def session_follow(*, actor: Actor, terminal_id, from_byte: int | None):
    """The terminal's output from from_byte, live: an async stream of worker.follow.Event, which ends with an error
    event once the actor's access to the terminal is taken away (access.py)."""
    from ..remote.follow import follow

    record = session_get_for(user=actor.user, terminal_id=terminal_id)
    channel = _hosting_channel(record)
    audit(actor, "follow", terminal_id=record.id, fromByte=from_byte)
    return follow(str(record.id), channel, from_byte, actor)


def session_screen(*, actor: Actor, terminal_id) -> dict:
    record = session_get_for(user=actor.user, terminal_id=terminal_id)
    return _ask_worker(record, protocol.SCREEN)
