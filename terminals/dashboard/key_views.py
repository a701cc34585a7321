"""The dashboard's keys page: API keys (the user's own; staff: everyone's), and (staff) users made, disabled or
promoted."""

from __future__ import annotations

import secrets

from django.contrib import messages
from django.contrib.auth import get_user_model
from django.http import Http404
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from .. import keys
from ..exceptions import InvalidInput, ServiceError
from ..models import ApiKey
from .form_input import actor, error_message, moment
from .security import page


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
        expires = moment("expires", request.POST.get("expires", "").strip())
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
        messages.error(request, f"Not created: {error_message(error)}")
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
        messages.error(request, f"Not changed: {error_message(error)}")
    return redirect("dashboard:keys")

