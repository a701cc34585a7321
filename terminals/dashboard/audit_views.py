"""The dashboard's audit page: the trail as the user may see it, and (staff) its verification."""

from __future__ import annotations

from django.contrib import messages
from django.core.paginator import Paginator
from django.http import Http404
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from .. import recordings
from ..audit import last_hash, verify_chain
from ..audit_events import audit_events
from ..ids import parse_uuid
from .form_input import moments
from .security import page

AUDIT_PAGE = 50


@page
def audit_list(request):
    filters = {name: request.GET.get(name, "").strip() for name in ("user", "action", "outcome", "terminal",
                                                                    "since", "until")}
    terminal = filters["terminal"]
    events = audit_events(user=request.user, terminal=terminal if parse_uuid(terminal) else None,
                          action=filters["action"], outcome=filters["outcome"], username=filters["user"],
                          **moments(request, filters))
    if terminal and not parse_uuid(terminal):
        events = events.none()  # no terminal has that id
    listed = Paginator(events, AUDIT_PAGE).get_page(request.GET.get("page"))
    # A row about a recorded terminal opens its recording.
    terminal_ids = {event.terminal_id for event in listed if event.terminal_id}
    recorded = set(recordings.recordings_visible_to(request.user).filter(
        terminal_id__in=terminal_ids, deleted__isnull=True).values_list("terminal_id", flat=True))
    for event in listed:
        event.recorded = event.terminal_id in recorded
    query = "&".join(f"{name}={value}" for name, value in filters.items() if value)
    actions = audit_events(user=request.user).values_list("action", flat=True).distinct().order_by("action")
    return render(request, "dashboard/audit.html", {"page": listed, "filters": filters, "query": query,
                                                    "actions": actions, "section": "audit"})


@page
@require_POST
def audit_verify(request):
    if not request.user.is_staff:
        raise Http404("no such page")
    count, broken = verify_chain()
    checked, problems = recordings.verify_files()
    if broken:
        messages.error(request, f"The audit trail is broken: {broken}")
    elif problems:
        messages.error(request, f"The audit trail is intact, but {len(problems)} recordings do not match it: "
                                + "; ".join(problems[:5]))
    else:
        messages.success(request, f"The audit trail is intact: {count} events, last hash {last_hash()[:16]}; "
                                  f"{checked} recordings on this host match their sealed SHA-256")
    return redirect("dashboard:audit")

