"""Keeping API keys out of what the service writes: log lines, the access log, error bodies and refusal records.

Keys belong in the X-API-Key or Authorization header, which nothing logs or records. A client that puts one
somewhere else (a query parameter, the path) gets it masked: the public prefix stays, the secret part goes.
"""

from __future__ import annotations

import logging
import re

MASK = "[redacted]"

# tk_<8 hex>.<secret>, also with the dot percent-encoded; the prefix (public) is kept.
KEY = re.compile(r"(tk_[0-9a-fA-F]{8})(?:\.|%2[eE])[A-Za-z0-9_\-]+")
# The value of a query parameter whose name says it holds a credential (?api_key=..., &token=...).
SECRET_PARAMETER = re.compile(
    r"([?&;][^=&;#\s\"]*(?:key|token|secret|passw|auth|credential)[^=&;#\s\"]*=)[^&;#\s\"]*", re.IGNORECASE
)


def redact(text: str) -> str:
    """The text with every API key's secret part, and every credential-named query value, masked."""
    if not isinstance(text, str):
        return text
    return SECRET_PARAMETER.sub(rf"\g<1>{MASK}", KEY.sub(rf"\g<1>.{MASK}", text))


def redact_data(value):
    """redact() applied to every string in a JSON-like value (dicts, lists, strings)."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {key: redact_data(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact_data(item) for item in value]
    return value


class RedactSecrets(logging.Filter):
    """A logging filter (see settings.LOGGING) that masks keys in the message and in any traceback."""

    _formatter = logging.Formatter()

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        masked = redact(message)
        if masked != message:
            record.msg, record.args = masked, None
        if record.exc_info and not record.exc_text:
            record.exc_text = self._formatter.formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        return True


def redact_access_log() -> None:
    """Makes daphne's access log (daphne's own command line, or `manage.py serve`) mask keys in the URLs it writes."""
    from daphne.access import AccessLogGenerator

    if getattr(AccessLogGenerator.write_entry, "redacts", False):
        return
    write_entry = AccessLogGenerator.write_entry

    def write_redacted_entry(self, host, date, request, *args, **kwargs):
        return write_entry(self, host, date, redact(request), *args, **kwargs)

    write_redacted_entry.redacts = True
    AccessLogGenerator.write_entry = write_redacted_entry
