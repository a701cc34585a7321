"""The dashboard's terminal pages, its workers page and its error pages. Thin: each reads the request, calls a core
use case as the logged-in user, and renders. The other sections: audit_views.py, recording_views.py, key_views.py.

A terminal, key or audit row another user owns answers exactly like an unknown one (404), as in the API.
"""

from __future__ import annotations

import re
import shlex
import time

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AnonymousUser
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from .. import sessions
from ..plumbing.log_filters import log_refusal
from ..exceptions import InvalidInput, ServiceError, TerminalNotFound, retry_after
from ..models import TerminalSession
from ..throttling import count_creation
from .form_input import actor, error_message
from .security import page, with_policy

STATUSES = ["active", "all", *[status for status in TerminalSession.Status.values if status != "active"]]
SIGNALS = ["SIGINT", "SIGTERM", "SIGHUP", "SIGKILL"]
# What the list asks the workers (foreground process, viewers): for its newest rows, within a bound, so a slow or
# unreachable worker costs the page at most LIVE_BUDGET_SECONDS.
LIVE_ROWS = 100
LIVE_REPLY_SECONDS = 0.5
LIVE_BUDGET_SECONDS = 2.0


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
        messages.error(request, f"Not created: {error_message(error)}")
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
        messages.error(request, f"Not ended: {error_message(error)}")
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
        messages.error(request, f"Not shared: {error_message(error)}")
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
