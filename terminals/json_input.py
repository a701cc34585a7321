"""JSON from clients, decoded only when the service can keep it: every interface's bodies and frames come here.

Python's json module takes values the service can neither store nor echo faithfully: numbers that
are not finite (1e400 becomes inf), integers too wide for any database column, strings with a lone
surrogate ("\\ud800", which no UTF-8 encoder writes) and nesting deep enough to exhaust the stack.
Each would surface later as a 500, a closed WebSocket or an audit row that cannot be written; here it
is refused at the door with a sentence that says what to send instead.
"""

from __future__ import annotations

import json
import math

MAX_DEPTH = 64  # levels of arrays and objects; no request of any interface needs more than a handful
# int64 and uint64: the widest integers any contract the service speaks uses (the ACP schema's).
SMALLEST_INTEGER, LARGEST_INTEGER = -(2**63), 2**64 - 1
LARGEST_STORED_INTEGER = 2**63 - 1  # what a database integer column holds


class UnkeepableJson(ValueError):
    """A JSON text the service could not decode, store or echo faithfully; the message says why."""


def loads(text: str | bytes):
    """The JSON value of text; raises UnkeepableJson saying what is wrong with it."""
    try:
        value = json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float, parse_int=_bounded_int)
    except UnkeepableJson:
        raise
    except RecursionError:
        raise UnkeepableJson(f"the JSON is nested more than {MAX_DEPTH} levels deep") from None
    except ValueError as error:  # UnicodeDecodeError included
        raise UnkeepableJson(f"the body is not valid JSON ({error})") from None
    check_keepable(value)
    return value


def check_keepable(value) -> None:
    """Raises UnkeepableJson for nesting deeper than MAX_DEPTH or a string (key or value) with a lone surrogate."""
    pending = [(value, 0)]
    while pending:  # iterative, so no depth of nesting can exhaust the stack
        item, depth = pending.pop()
        if isinstance(item, str):
            _check_text(item)
        elif isinstance(item, (dict, list)):
            if depth >= MAX_DEPTH:
                raise UnkeepableJson(f"the JSON is nested more than {MAX_DEPTH} levels deep")
            entries = item.items() if isinstance(item, dict) else enumerate(item)
            for key, entry in entries:
                if isinstance(key, str):
                    _check_text(key)
                pending.append((entry, depth + 1))


def _check_text(text: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise UnkeepableJson("a string holds a lone surrogate (\\ud800-\\udfff without its pair): "
                             "send text as valid UTF-16 pairs or plain UTF-8") from None


def _reject_constant(name: str):
    raise UnkeepableJson(f"{name} is not JSON: send numbers as finite decimals")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise UnkeepableJson(f"the number {text[:40]} is out of range: numbers must fit a 64-bit float")
    return value


def _bounded_int(text: str) -> int:
    # Checked on the digits first: Python refuses to convert more than 4300 of them.
    value = int(text) if len(text) <= 21 else None
    if value is None or not SMALLEST_INTEGER <= value <= LARGEST_INTEGER:
        raise UnkeepableJson(f"the integer {text[:40]} is out of range: integers must be from {SMALLEST_INTEGER} "
                             f"to {LARGEST_INTEGER}; send larger values as strings")
    return value


def byte_offset(text: str | None) -> int | None:
    """A byte offset written in ASCII digits (a query parameter, a Last-Event-ID), from 0 to the largest stored
    integer; None for anything else. int() alone would take "+1", " 1" and other scripts' digits ("\u0661")."""
    if not text or not (text.isascii() and text.isdigit()) or len(text) > 19:
        return None
    value = int(text)
    return value if value <= LARGEST_STORED_INTEGER else None
