"""What the service logs about refused requests: each once, on its own logger, at a level an operator can filter.

Django logs every 4xx answer as a WARNING of django.request (with a traceback for a 403 in the admin), which
floods an operator's logs with what clients got wrong. Those lines are dropped; the service logs each refusal
itself as one INFO line of `terminals.refusals` (code, status, who, method, path; never a key), and server errors
(5xx) still reach django.request with their traceback.
"""

from __future__ import annotations

import logging

from .. import metrics
from ..redaction import redact

refusals = logging.getLogger("terminals.refusals")


class ServerErrorsOnly(logging.Filter):
    """Keeps django.request's records of 5xx answers (and records without a status); drops the 4xx ones."""

    def filter(self, record: logging.LogRecord) -> bool:
        status = getattr(record, "status_code", None)
        return status is None or status >= 500


def log_refusal(request, status: int, code: str) -> None:
    user = getattr(request, "user", None)
    who = user.get_username() if user is not None and user.is_authenticated else "-"
    refusals.info("%s %s %s %s %s", status, code, who, request.method, redact(request.get_full_path()))
    metrics.REFUSED.labels(code).inc()
