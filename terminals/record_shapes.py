"""A terminal's record and its recording as the API shows them: the web processes answer with these, and so does
the worker when it creates a terminal."""

from __future__ import annotations

from datetime import timezone as dt_timezone

from .models import Recording, TerminalSession


def recording_data(recording: Recording | None) -> dict | None:
    """A recording as the terminal's record shows it."""
    if recording is None:
        return None
    return {
        "host": recording.host,
        "recordsInput": recording.record_input,
        "finished": recording.finished is not None,
        "bytes": recording.size,
        "sha256": recording.sha256 or None,
        "capped": recording.capped,
        "deleted": recording.deleted is not None,
    }


def window_size(record: TerminalSession) -> tuple[int | None, int | None]:
    """(cols, rows); a terminal on pipes has no window, so no size (the columns keep their defaults)."""
    return (record.cols, record.rows) if record.pty else (None, None)


def session_created_data(record: TerminalSession) -> dict:
    cols, rows = window_size(record)
    return {
        "terminalId": str(record.id),
        "pid": record.pid,
        "shell": record.shell,
        "cwd": record.cwd,
        "created": iso(record.created),
        "status": record.status,
        "name": record.name,
        "cols": cols,
        "rows": rows,
        "command": record.command,
        "args": record.args,
        "pty": record.pty,
        "outputByteLimit": record.output_byte_limit,
        "sessionId": record.session_id,
        "recorded": record.recorded,
    }


def session_data(record: TerminalSession) -> dict:
    """The terminal's record as the list and detail endpoints show it."""
    cols, rows = window_size(record)
    return {
        "id": str(record.id),
        "terminalId": str(record.id),
        "name": record.name,
        "pid": record.pid,
        "shell": record.shell,
        "cwd": record.cwd,
        "cols": cols,
        "rows": rows,
        "created": iso(record.created),
        "lastActivity": iso(record.last_activity),
        "status": record.status,
        "exitCode": record.exit_code,
        "signal": record.signal,
        "ended": iso(record.ended),
        "released": iso(record.released),
        "owner": record.owner.get_username() if record.owner_id else None,
        "worker": record.worker_id,
        "command": record.command,
        "args": record.args,
        "pty": record.pty,
        "outputByteLimit": record.output_byte_limit,
        "sessionId": record.session_id,
        "recorded": record.recorded,
    }


def iso(moment) -> str | None:
    """ISO 8601 in UTC with milliseconds and a Z, as the contract's examples show."""
    if moment is None:
        return None
    return moment.astimezone(dt_timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
