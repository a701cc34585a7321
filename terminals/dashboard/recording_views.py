"""The dashboard's recordings: the list the user may see, the player's page, and the asciicast file it plays."""

from __future__ import annotations

from django.core.paginator import Paginator
from django.http import Http404, StreamingHttpResponse
from django.shortcuts import render

from .. import recordings, sessions
from ..exceptions import ServiceError, TerminalNotFound
from ..models import Recording
from .form_input import actor, moments
from .security import page, player_page

RECORDINGS_PAGE = 50


@page
def recording_list(request):
    found = recordings.recordings_visible_to(request.user)
    filters = {name: request.GET.get(name, "").strip() for name in ("user", "since", "until")}
    if filters["user"]:
        found = found.filter(terminal__owner__username=filters["user"])
    found_moments = moments(request, filters)
    if found_moments["since"] is not None:
        found = found.filter(started__gte=found_moments["since"])
    if found_moments["until"] is not None:
        found = found.filter(started__lte=found_moments["until"])
    listed = Paginator(found, RECORDINGS_PAGE).get_page(request.GET.get("page"))
    query = "&".join(f"{name}={value}" for name, value in filters.items() if value)
    return render(request, "dashboard/recordings.html", {"page": listed, "filters": filters, "query": query,
                                                         "section": "recordings"})


def _visible_recording(request, terminal_id) -> Recording:
    try:
        sessions.session_get_for(user=request.user, terminal_id=terminal_id)
    except TerminalNotFound:
        raise Http404("no such recording") from None
    recording = Recording.objects.select_related("terminal__owner").filter(terminal_id=terminal_id).first()
    if recording is None:
        raise Http404("no such recording")
    return recording


@player_page
def recording_page(request, terminal_id):
    recording = _visible_recording(request, terminal_id)
    return render(request, "dashboard/recording.html", {"recording": recording, "section": "recordings",
                                                        "terminal_id": str(terminal_id)})


@page
def recording_file(request, terminal_id):
    """The asciicast file, for the player (same origin, the session's login); read as the REST API reads it."""
    try:
        playback = recordings.recording_open(actor=actor(request), terminal_id=terminal_id)
    except TerminalNotFound:
        raise Http404("no such recording") from None
    except ServiceError as error:
        if error.default_code != "RECORDING_NOT_FOUND":
            raise
        raise Http404("no such recording") from None
    response = StreamingHttpResponse(playback.chunks, content_type=recordings.CONTENT_TYPE)
    response["Content-Disposition"] = f'inline; filename="{playback.filename}"'
    return response

