"""What the dashboard's forms send, read for every page: the acting user, dates and times, and errors as a page says
them."""

from __future__ import annotations

from django.contrib import messages
from django.utils.dateparse import parse_datetime

from ..audit import Actor, client_address
from ..exceptions import InvalidInput


def actor(request) -> Actor:
    return Actor(user=request.user, source=client_address(request))


def moments(request, filters: dict) -> dict:
    """The filters' since and until as dates and times (ISO 8601), None when empty; a value that is not a date and
    time is said on the page, and not applied."""
    found = {}
    for name in ("since", "until"):
        try:
            found[name] = moment(name, filters[name])
        except InvalidInput as error:
            messages.error(request, f"Not filtered by {name}: {error.message}")
            found[name] = None
    return found


def moment(name: str, value: str):
    """The date and time a form field holds (ISO 8601), None when empty; InvalidInput when it is no date."""
    if not value:
        return None
    try:
        parsed = parse_datetime(value)  # None when the form is wrong, ValueError for a day that does not exist
    except ValueError:
        parsed = None
    if parsed is None:
        raise InvalidInput(f"{name}: {value!r} is not a date and time; write it as 2025-02-28T13:45")
    return parsed


def error_message(error: Exception) -> str:
    return getattr(error, "message", None) or str(error)
