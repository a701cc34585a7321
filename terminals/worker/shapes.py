"""The REST API's data shapes for what the runtime reports (camelCase, as the contract names them)."""

from __future__ import annotations

import math
import re
from datetime import datetime, timezone

from ..runtime import echo
from ..runtime.ansi import complete_escapes_end, strip_ansi
from ..runtime.buffer import OutputBuffer
from ..runtime.line_reads import LineRead, estimate_tokens, shape_lines
from ..runtime.utf8 import decode
from ..runtime.commands import Command
from ..runtime.pty import ExitStatus, PtySession
from ..runtime.shell import WaitResult


def line_read_data(read: LineRead, session: PtySession, *, strip: bool = False) -> dict:
    output = strip_ansi(read.output) if strip else read.output
    return {
        "output": output,
        "totalLines": read.total_lines,
        "nextReadFrom": read.next_read_from,
        "hasMore": read.has_more,
        "truncated": read.truncated,
        "oldestLine": read.oldest_line,
        "linesEvicted": read.lines_evicted,
        "isActive": session.is_alive,
        "exitStatus": exit_status_data(session.exit_status),
        "stats": {
            "totalBytes": len(output.encode("utf-8", errors="surrogatepass")),
            "estimatedTokens": estimate_tokens(output),
            "linesShown": read.lines_shown,
            "linesOmitted": read.lines_omitted,
        },
    }


def stats_data(terminal_id: str, session: PtySession) -> dict:
    stats = session.buffer.stats()
    return {
        "terminalId": terminal_id,
        "totalLines": stats.total_lines,
        "totalBytes": stats.total_bytes,
        "estimatedTokens": math.ceil(stats.buffer_bytes / 4),
        "bufferSize": stats.buffer_lines,
        "bufferBytes": stats.buffer_bytes,
        "oldestLine": stats.oldest_line,
        "newestLine": stats.newest_line,
        "oldestByte": stats.oldest_byte,
        "isActive": session.is_alive,
        "exitStatus": exit_status_data(session.exit_status),
        # Where the output stood when input last arrived: a wait for what the input caused starts there.
        "lastInputByte": getattr(session, "last_input_byte", 0),
    }


def exit_status_data(status: ExitStatus | None) -> dict | None:
    if status is None:
        return None
    return {"exitCode": status.exit_code, "signal": status.signal}


def iso_from_timestamp(moment: float | None) -> str | None:
    if moment is None:
        return None
    stamp = datetime.fromtimestamp(moment, tz=timezone.utc)
    return stamp.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def read_text(text: str, read: dict) -> tuple[str, int, int, int]:
    """Shapes text by the read options: (output, total lines, lines shown, lines omitted)."""
    if read.get("strip_ansi"):
        text = strip_ansi(text)
    text = text.replace("\r\n", "\n")
    ends_with_newline = text.endswith("\n")
    lines = (text[:-1] if ends_with_newline else text).split("\n") if text else []
    shaped, shown, omitted = shape_lines(
        lines, read.get("mode", "full"), read.get("head_lines", 50), read.get("tail_lines", 50),
        read.get("max_lines", 1000),
    )
    output = "\n".join(shaped) + ("\n" if ends_with_newline and shaped else "")
    return output, len(lines), shown, omitted


# zsh marks a last line without a newline (PROMPT_SP) before its prompt hooks run, so the
# mark lands inside a typed command's output: bold/reverse "%" or "#", spaces, "\r \r".
ZSH_PROMPT_SP = re.compile(r"(?:\x1b\[[0-9;]*m)*[%#]?(?:\x1b\[[0-9;]*m)* *\r \r$")


def command_data(session: PtySession, record: Command, read: dict, result: WaitResult | None = None) -> dict:
    """A command as the commands endpoints return it; result is the outcome of the wait just made."""
    text, evicted = ("", False) if record.start_byte is None else session.buffer.text_between(record.start_byte, record.end_byte)
    if record.source == "shell" and record.end_byte is not None:
        text = ZSH_PROMPT_SP.sub("", text)
    output, total, shown, omitted = read_text(text, read)
    return {
        **command_summary(record),
        "timedOut": bool(result is not None and not result.finished and not result.waiting_for_input),
        "waitingForInput": bool(result is not None and result.waiting_for_input),
        "output": output,
        "truncated": evicted or omitted > 0,
        "totalLines": total,
        "linesShown": shown,
        "linesOmitted": omitted,
    }


def command_summary(record: Command) -> dict:
    """A command in the history list: no output."""
    return {
        "commandId": record.id,
        "command": record.command,
        "source": record.source,
        "status": record.status,
        "exitCode": record.exit_code,
        "signal": record.signal,
        "startedAt": iso_from_timestamp(record.started_at),
        "finishedAt": iso_from_timestamp(record.finished_at),
        "durationMs": None if record.duration is None else round(record.duration * 1000, 3),
    }


def bytes_data(session: PtySession, buffer: OutputBuffer, from_byte: int, max_bytes: int, strip: bool,
               without_echo: bool = False) -> dict:
    """A slice of output by byte offset (seed 001's stream_logs_from_tab). without_echo: what programs printed
    only, the echo of typed input left out (runtime/echo.py), and nothing past where that is not known yet."""
    complete = session.finished
    data, start, truncated = buffer.read_bytes(from_byte, max_bytes, complete=complete)
    if strip:
        data = _without_cut_escape(buffer, data, start, max_bytes, complete)
    next_byte = start + len(data)
    if without_echo and hasattr(session, "echo_ranges"):
        ranges, known = session.echo_ranges(next_byte)
        if known < next_byte:
            data, next_byte = data[:max(0, known - start)], max(start, known)
        data = echo.without(data, start, ranges)
    chunk = decode(data)
    return {
        "chunk": strip_ansi(chunk) if strip else chunk,
        "fromByte": start,
        "nextByte": next_byte,
        "eof": complete and next_byte >= buffer.end,
        "truncated": truncated,
        "oldestByte": buffer.oldest_byte,
        "totalBytes": buffer.end,
        "isActive": session.is_alive,
        "exitStatus": exit_status_data(session.exit_status),
    }


def _without_cut_escape(buffer: OutputBuffer, data: bytes, start: int, max_bytes: int, complete: bool) -> bytes:
    """A slice to strip must not end inside an escape sequence, or its two halves would pass the stripping:
    it ends before the sequence, or, when the slice is nothing but its start, takes the whole sequence."""
    cut = complete_escapes_end(data)
    if cut > 0 or not data:
        return data[:cut]
    longer, _, _ = buffer.read_bytes(start, max_bytes + 256, complete=complete)
    whole = complete_escapes_end(longer)
    return longer[:whole] if whole > 0 else longer


def info_data(session: PtySession) -> dict:
    """What the terminal is doing now."""
    commands = getattr(session, "commands", None)
    running = commands.running if commands is not None else None
    return {
        "isActive": session.is_alive,
        "busy": session.busy or running is not None,
        "foreground": session.foreground_process(),
        "waitingForInput": session.waiting_for_input() if (session.busy or running is not None) else False,
        "runningCommand": command_summary(running) if running is not None else None,
        "cols": session.cols,
        "rows": session.rows,
        "exitStatus": exit_status_data(session.exit_status),
    }
