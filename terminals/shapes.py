"""The REST API's data shapes for what the runtime reports (camelCase, as the contract names them)."""

from __future__ import annotations

import math

from .runtime.buffer import LineRead, estimate_tokens
from .runtime.pty import ExitStatus, PtySession


def line_read_data(read: LineRead, session: PtySession) -> dict:
    output = read.output
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
    }


def exit_status_data(status: ExitStatus | None) -> dict | None:
    if status is None:
        return None
    return {"exitCode": status.exit_code, "signal": status.signal}
