"""The dashboard's pages. Thin: each reads the request, calls a core use case as the logged-in user, and renders.

A terminal, key or audit row another user owns answers exactly like an unknown one (404), as in the API.
"""

from __future__ import annotations

import re
import secrets
import shlex
import time

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AnonymousUser
from django.core.paginator import Paginator
from django.http import Http404, HttpResponse, StreamingHttpResponse
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.utils.dateparse import parse_datetime
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from .. import keys, recordings, sessions
from ..audit import Actor, client_address, last_hash, verify_chain
from ..audit_events import audit_events
from ..log_filters import log_refusal
from ..exceptions import InvalidInput, RecordingNotFound, ServiceError, TerminalNotFound, retry_after
from ..ids import parse_uuid
from ..models import ApiKey, Recording, TerminalSession
from ..throttling import count_creation
from .security import page, player_page, with_policy

STATUSES = ["active", "all", *[status for status in TerminalSession.Status.values if status != "active"]]
AUDIT_PAGE = 50
SIGNALS = ["SIGINT", "SIGTERM", "SIGHUP", "SIGKILL"]
# What the list asks the workers (foreground process, viewers): for its newest rows, within a bound, so a slow or
# unreachable worker costs the page at most LIVE_BUDGET_SECONDS.
LIVE_ROWS = 100
LIVE_REPLY_SECONDS = 0.5
LIVE_BUDGET_SECONDS = 2.0


def actor(request) -> Actor:
    return Actor(user=request.user, source=client_address(request))


def _visible_terminal(request, terminal_id) -> dict:
    """The terminal's record and what it is doing now, if the user may see it (also one shared with them); else
    404, as unknown."""
    try:
        return sessions.session_detail(user=request.user, terminal_id=terminal_id, reply_within=LIVE_REPLY_SECONDS,
                                       shared=True)
    except TerminalNotFound:
        raise Http404("no such terminal") from None


def _reachable_terminal(request, terminal_id) -> TerminalSession:
    """The terminal's row if the user may reach it (the core's one access rule, a lookup without asking its
    worker), checked before a form acts; else 404, as unknown."""
    try:
        return sessions.session_get_for(user=request.user, terminal_id=terminal_id)
    except TerminalNotFound:
        raise Http404("no such terminal") from None


# Pages that are not there

FOREIGN = re.compile(r"^/(terminals|recordings)/([^/.]+)")  # a page of one terminal, or of its recording


def not_found(request, exception=None):
    """The dashboard's 404, as a page in its style: an unknown terminal and another user's look the same (the
    dashboard never says which terminals others have), with the way back to the user's own. config/urls.py sends
    unknown paths under /api/ to the API's JSON envelope instead."""
    log_refusal(request, 404, "NOT_FOUND")
    match = FOREIGN.match(request.path)
    if match:
        what = "terminal" if match.group(1) == "terminals" else "recording of a terminal"
        heading = "Terminal not found" if match.group(1) == "terminals" else "Recording not found"
        explanation = (f"There is no {what} {match.group(2)} that you can see: it does not exist, or it is another "
                       "user's and not shared with you. Your terminals are listed on the terminals page.")
    else:
        heading = "Page not found"
        explanation = f"There is no page at {request.path}."
    return with_policy(render(request, "dashboard/not_found.html",
                              {"heading": heading, "explanation": explanation}, status=404))


def database_unavailable(request, error):
    """The dashboard's page while its database is away: rendered without the user (their session is in the
    database too), 503 with Retry-After, and not logged per request (the outage is logged once, outage.py)."""
    html = render_to_string("dashboard/not_found.html", {
        "heading": "Database unavailable", "user": AnonymousUser(),
        "explanation": f"The service cannot reach its database at the moment, so this page cannot be shown; nothing "
                       f"was done. Reload the page in {error.wait} seconds: it works again as soon as the database "
                       f"is back. Live terminals keep running meanwhile."})
    response = with_policy(HttpResponse(html, status=error.status_code))
    response["Retry-After"] = retry_after(error.wait)
    response._has_been_logged = True
    return response


# Terminals


def _terminal_rows(request) -> tuple[list[dict], dict]:
    status = request.GET.get("status", "active")
    status = status if status in STATUSES else "active"
    owner = request.GET.get("owner", "").strip() if request.user.is_staff else ""
    found = sessions.session_list(user=request.user, status=status,
                                  session_filter={"owner__username": owner} if owner else None)
    found.sort(key=lambda row: row["created"] or "", reverse=True)
    deadline = time.monotonic() + LIVE_BUDGET_SECONDS
    for row in found[:LIVE_ROWS]:
        left = deadline - time.monotonic()
        if row["status"] != "active" or left <= 0:
            continue
        try:
            row.update(sessions.session_live(user=request.user, terminal_id=row["terminalId"],
                                             reply_within=min(LIVE_REPLY_SECONDS, left)))
        except ServiceError:
            pass  # the record alone still answers
    return found, {"status": status, "owner": owner}


@page
def terminal_list(request):
    rows, filters = _terminal_rows(request)
    template = "dashboard/terminal_rows.html" if request.GET.get("fragment") else "dashboard/terminals.html"
    owners = (get_user_model().objects.filter(terminals__isnull=False).distinct()
              .values_list("username", flat=True).order_by("username")) if request.user.is_staff else []
    shared = [] if request.GET.get("fragment") else sessions.session_shared_with(user=request.user)
    return render(request, template, {"rows": rows, "filters": filters, "statuses": STATUSES, "owners": owners,
                                      "signals": SIGNALS, "shared": shared, "section": "terminals"})


@page
@require_POST
def terminal_create(request):
    form = request.POST
    try:
        # The form is read whole before anything counts or starts: a refused form has no effect.
        kind = form.get("kind", "shell")
        words = shlex.split(form.get("command", "")) if kind == "program" else []
        if kind == "program" and not words:
            raise InvalidInput("give the program to run, for example: python3 -q")
        # The core's one size check, before the creation counts against the throttle: a refused form has no effect.
        cols, rows = sessions.checked_window_size(_whole("cols", form.get("cols"), 120),
                                                  _whole("rows", form.get("rows"), 32))
        count_creation(actor(request))
        created = sessions.session_create(
            actor=actor(request), shell=(form.get("shell") or None) if kind == "shell" else None,
            command=words[0] if words else None, args=words[1:], cwd=form.get("cwd") or None,
            name=form.get("name", "")[:100], cols=cols, rows=rows, record=form.get("record") == "on")
    except (ServiceError, ValueError) as error:
        messages.error(request, f"Not created: {_message(error)}")
        return redirect("dashboard:terminals")
    return redirect("dashboard:terminal", terminal_id=created["terminalId"])


@page
@require_POST
def terminal_end(request, terminal_id):
    _reachable_terminal(request, terminal_id)
    signal = request.POST.get("signal", "SIGTERM")
    if signal not in SIGNALS:
        signal = "SIGTERM"
    back = _same_site(request, request.POST.get("next"))  # decided before acting: a bad one cannot fail after it
    try:
        ended = sessions.session_terminate(actor=actor(request), terminal_id=terminal_id, signal=signal)
        messages.success(request, f"Ended with {signal}: exit code {ended.get('exitCode')}, signal {ended.get('signal')}")
    except ServiceError as error:
        messages.error(request, f"Not ended: {_message(error)}")
    return redirect(back)


def _same_site(request, target: str | None, fallback: str = "dashboard:terminals") -> str:
    """target if it is a page of this site, else the fallback: a form's next= must not lead off the site (or to a
    javascript: URL, which Django refuses to redirect to, as a 500)."""
    if target and url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()},
                                                  require_https=request.is_secure()):
        return target
    return fallback


@page
def terminal_page(request, terminal_id):
    terminal = _visible_terminal(request, terminal_id)
    mine = terminal["owner"] == request.user.get_username()
    # Staff see every terminal; someone else's only through a share, which gives the live view alone.
    guest = not mine and not request.user.is_staff
    shares = [] if guest else sessions.session_shares(user=request.user, terminal_id=terminal_id)
    return render(request, "dashboard/terminal.html", {
        "terminal": terminal, "mine": mine, "read_only": not mine, "guest": guest, "shares": shares,
        "signals": SIGNALS, "section": "terminals"})


@page
@require_POST
def terminal_share(request, terminal_id):
    """Gives (or, with remove, takes back) another user's read-only look at the terminal."""
    _reachable_terminal(request, terminal_id)
    username = request.POST.get("user", "").strip()
    try:
        if request.POST.get("remove"):
            sessions.session_unshare(actor=actor(request), terminal_id=terminal_id, username=username)
            messages.success(request, f"{username} can no longer watch this terminal.")
        else:
            sessions.session_share(actor=actor(request), terminal_id=terminal_id, username=username)
            messages.success(request, f"{username} can now watch this terminal, read-only, from their Terminals page.")
    except ServiceError as error:
        messages.error(request, f"Not shared: {_message(error)}")
    return redirect("dashboard:terminal", terminal_id=terminal_id)


@page
def terminal_commands(request, terminal_id):
    """The commands the shell ran (shell integration), as rows for the terminal page to refresh."""
    terminal = _reachable_terminal(request, terminal_id)
    commands = []
    if terminal.shell:
        try:
            commands = sessions.session_command_list(actor=actor(request), terminal_id=terminal_id)["commands"]
        except ServiceError:
            pass
    return render(request, "dashboard/command_rows.html", {"commands": commands[-50:][::-1]})


@page
def terminal_watchers(request, terminal_id):
    """Who is watching the terminal now (user and mode), for the terminal page to refresh."""
    _reachable_terminal(request, terminal_id)
    try:
        watchers = sessions.session_live(user=request.user, terminal_id=terminal_id,
                                         reply_within=LIVE_REPLY_SECONDS).get("watchers", [])
    except ServiceError:
        watchers = []
    return render(request, "dashboard/watcher_items.html", {"watchers": watchers})


@page
def terminal_download(request, terminal_id):
    """The output the service holds, escape sequences stripped, as a text file."""
    _reachable_terminal(request, terminal_id)
    read = {"from_byte": 0, "max_bytes": settings.TERMINALS["MAX_READ_BYTES"], "strip_ansi": True, "stream": None}
    data = sessions.session_read(actor=actor(request), terminal_id=terminal_id, options=read)
    response = HttpResponse(data["chunk"], content_type="text/plain; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="terminal-{terminal_id}.txt"'
    return response


# Audit


def _moments(request, filters: dict) -> dict:
    """The filters' since and until as dates and times (ISO 8601), None when empty; a value that is not a date and
    time is said on the page, and not applied."""
    moments = {}
    for name in ("since", "until"):
        try:
            moments[name] = _moment(name, filters[name])
        except InvalidInput as error:
            messages.error(request, f"Not filtered by {name}: {error.message}")
            moments[name] = None
    return moments


def _moment(name: str, value: str):
    """The date and time a form field holds (ISO 8601), None when empty; InvalidInput when it is no date."""
    if not value:
        return None
    try:
        moment = parse_datetime(value)  # None when the form is wrong, ValueError for a day that does not exist
    except ValueError:
        moment = None
    if moment is None:
        raise InvalidInput(f"{name}: {value!r} is not a date and time; write it as 2025-02-28T13:45")
    return moment


@page
def audit_list(request):
    filters = {name: request.GET.get(name, "").strip() for name in ("user", "action", "outcome", "terminal",
                                                                    "since", "until")}
    terminal = filters["terminal"]
    events = audit_events(user=request.user, terminal=terminal if parse_uuid(terminal) else None,
                          action=filters["action"], outcome=filters["outcome"], username=filters["user"],
                          **_moments(request, filters))
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


# Recordings

RECORDINGS_PAGE = 50


@page
def recording_list(request):
    found = recordings.recordings_visible_to(request.user)
    filters = {name: request.GET.get(name, "").strip() for name in ("user", "since", "until")}
    if filters["user"]:
        found = found.filter(terminal__owner__username=filters["user"])
    moments = _moments(request, filters)
    if moments["since"] is not None:
        found = found.filter(started__gte=moments["since"])
    if moments["until"] is not None:
        found = found.filter(started__lte=moments["until"])
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
    except (TerminalNotFound, RecordingNotFound):
        raise Http404("no such recording") from None
    response = StreamingHttpResponse(playback.chunks, content_type=recordings.CONTENT_TYPE)
    response["Content-Disposition"] = f'inline; filename="{playback.filename}"'
    return response


# Keys


@page
def key_list(request):
    records = ApiKey.objects.select_related("user").order_by("-created")
    if not request.user.is_staff:
        records = records.filter(user=request.user)
    new_key = request.session.pop("dashboard_new_key", None)  # shown once, on the page after its creation
    new_user = request.session.pop("dashboard_new_user", None)
    users = get_user_model().objects.order_by("username") if request.user.is_staff else []
    return render(request, "dashboard/keys.html", {"keys": records, "new_key": new_key, "new_user": new_user,
                                                   "users": users, "section": "keys"})


@page
@require_POST
def key_create(request):
    owner = request.user
    if request.user.is_staff and request.POST.get("user"):
        owner = get_user_model().objects.filter(username=request.POST["user"]).first() or owner
    try:
        expires = _moment("expires", request.POST.get("expires", "").strip())
    except InvalidInput as error:  # a typo must not make a key that never expires
        messages.error(request, f"Not created: {error.message}")
        return redirect("dashboard:keys")
    record, key = keys.create_key(actor(request), owner, name=request.POST.get("name", "")[:100], expires_at=expires)
    request.session["dashboard_new_key"] = {"key": key, "prefix": record.display_prefix, "user": owner.get_username()}
    return redirect("dashboard:keys")


@page
@require_POST
def key_revoke(request, prefix):
    record = ApiKey.objects.filter(prefix=prefix).select_related("user").first()
    if record is None or (record.user_id != request.user.pk and not request.user.is_staff):
        raise Http404("no such key")
    if keys.revoke_key(actor(request), record):
        messages.success(request, f"Key {record.display_prefix} revoked: it no longer works anywhere.")
    return redirect("dashboard:keys")


# Users (staff)

USER_CHANGES = {"disable": "disabled: their keys, logins and open connections stop working", "enable": "enabled again",
                "staff": "now staff: they see and reach everything", "unstaff": "no longer staff"}


@page
@require_POST
def user_create(request):
    """A new user with a generated password, shown once on the keys page."""
    if not request.user.is_staff:
        raise Http404("no such page")
    username = request.POST.get("username", "").strip()
    password = secrets.token_urlsafe(12)
    try:
        if not username or len(username) > 150:
            raise InvalidInput("give a user name of 1 to 150 characters")
        keys.create_user(actor(request), username, staff=bool(request.POST.get("staff")), password=password)
    except ServiceError as error:
        messages.error(request, f"Not created: {_message(error)}")
        return redirect("dashboard:keys")
    request.session["dashboard_new_user"] = {"user": username, "password": password}
    return redirect("dashboard:keys")


@page
@require_POST
def user_change(request, username):
    """Disables or enables a user, or changes the staff flag. Staff cannot take their own access away here."""
    if not request.user.is_staff:
        raise Http404("no such page")
    change = request.POST.get("change", "")
    flags = {"disable": {"active": False}, "enable": {"active": True}, "staff": {"staff": True},
             "unstaff": {"staff": False}}.get(change)
    if flags is None or (username == request.user.get_username() and change in ("disable", "unstaff")):
        messages.error(request, "Not changed: pick disable, enable, staff or unstaff, for someone other than you.")
        return redirect("dashboard:keys")
    try:
        keys.set_user(actor(request), username, **flags)
        messages.success(request, f"{username}: {USER_CHANGES[change]}")
    except ServiceError as error:
        messages.error(request, f"Not changed: {_message(error)}")
    return redirect("dashboard:keys")


# Workers


@page
def worker_list(request):
    if not request.user.is_staff:
        raise Http404("no such page")
    return render(request, "dashboard/workers.html", {"workers": sessions.workers_report(), "section": "workers",
                                                      "confinement": sessions.confinement_report()})


def _whole(name: str, value, default: int) -> int:
    try:
        return int(value) if value not in (None, "") else default
    except ValueError:
        raise ValueError(f"{name}: {value!r} is not a whole number") from None


def _message(error: Exception) -> str:
    return getattr(error, "message", None) or str(error)


