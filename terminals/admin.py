"""The admin: sessions, keys and workers to look at, the audit trail read-only.

Terminal and worker rows stand for live processes, so the admin neither adds nor deletes them: a row deleted
under a running terminal would leave its process running off the record. A terminal is ended with the action
"End selected terminals", the same use case as `DELETE /api/terminals/{id}`, audited under the admin user.
"""

from django.contrib import admin, messages
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import GroupAdmin, UserAdmin
from django.contrib.auth.models import Group
from django.contrib.admin.models import ADDITION, CHANGE, DELETION, LogEntry
from django.db.models.signals import post_save
from django.dispatch import receiver

from . import keys, sessions
from .audit import Actor, audit
from .exceptions import AuditUnavailable, ServiceError
from .models import ApiKey, AuditEvent, TerminalSession, Worker

# The index says plainly when users' terminals are not separated (terminals/templatetags/terminals_admin.py).
admin.site.index_template = "terminals/admin_index.html"
admin.site.site_header = admin.site.site_title = "Terminals administration"
admin.site.index_title = "Terminals, keys, workers and the audit trail"


@admin.register(TerminalSession)
class TerminalSessionAdmin(admin.ModelAdmin):
    list_display = ("id", "name", "owner", "status", "shell", "pid", "created", "last_activity", "ended", "worker")
    list_filter = ("status",)
    search_fields = ("id", "name", "owner__username")
    readonly_fields = [field.name for field in TerminalSession._meta.fields]
    actions = ["end_terminals"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False  # the worker writes the record; a save from a stale form would undo what it wrote

    def has_delete_permission(self, request, obj=None):
        return False  # the row is the terminal's record; "End selected terminals" ends the terminal itself

    @admin.action(description="End selected terminals")
    def end_terminals(self, request, queryset):
        actor = Actor.from_request(request)
        ended, failed = 0, []
        for record in queryset:
            try:
                sessions.session_terminate(actor=actor, terminal_id=record.pk)
                ended += 1
            except ServiceError as error:
                failed.append(f"{record.pk}: {error.message}")
                _audit_refusal(actor, record.pk, error)
        if ended:
            self.message_user(request, f"Ended {ended} terminal(s).", messages.SUCCESS)
        if failed:
            self.message_user(request, "Not ended: " + "; ".join(failed), messages.WARNING)


@admin.register(AuditEvent)
class AuditEventAdmin(admin.ModelAdmin):
    list_display = ("when", "username", "key_prefix", "source", "action", "terminal_id", "outcome")
    list_filter = ("action", "outcome", "username", "at")
    date_hierarchy = "at"
    ordering = ("-id",)  # newest first; ids follow the hash chain's order
    search_fields = ("username", "terminal_id", "key_prefix")

    @admin.display(description="at (UTC)", ordering="id")
    def when(self, event):
        return event.at.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"
    readonly_fields = [field.name for field in AuditEvent._meta.fields]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    list_display = ("display_prefix", "name", "user", "created", "last_used", "expires_at", "revoked_at")
    list_filter = ("revoked_at",)
    search_fields = ("prefix", "name", "user__username")
    readonly_fields = ("prefix", "created", "last_used", "revoked_at")
    actions = ["revoke"]

    def has_add_permission(self, request):
        return False  # keys are made with create_api_key, which shows the plaintext once

    def has_delete_permission(self, request, obj=None):
        return False  # revoked, never deleted: the record of who held which key stays

    @admin.action(description="Revoke the selected keys")
    def revoke(self, request, queryset):
        actor = Actor.from_request(request)
        revoked = [key.display_prefix for key in queryset.select_related("user") if keys.revoke_key(actor, key)]
        self.message_user(request, f"Revoked {', '.join(revoked)}." if revoked else "Those keys were revoked already.")


@admin.register(Worker)
class WorkerAdmin(admin.ModelAdmin):
    list_display = ("id", "hostname", "pid", "started", "last_seen", "stopped", "lost")
    readonly_fields = [field.name for field in Worker._meta.fields]

    def has_add_permission(self, request):
        return False  # a worker registers itself when it starts

    def has_change_permission(self, request, obj=None):
        return False  # the worker keeps its own record

    def has_delete_permission(self, request, obj=None):
        return False  # its terminals' records point at it; it closes its own record when it stops


def _audit_refusal(actor: Actor, terminal_id, error: ServiceError) -> None:
    """Records an end the admin asked for and did not get, under the same action as the API's."""
    try:
        audit(actor, "delete", outcome=error.default_code, terminal_id=terminal_id, message=error.message,
              via="admin")
    except AuditUnavailable:
        pass  # the refusal itself was shown to the admin; the trail cannot take it now


LOGGED_ACTIONS = {ADDITION: "add", CHANGE: "change", DELETION: "delete"}


class EachDeletionLogged:
    """The admin logs a bulk deletion with one bulk insert, which sends no signal: log each object on its own, so
    each reaches the audit trail below."""

    def log_deletions(self, request, queryset):
        return [LogEntry.objects.log_actions(request.user.pk, [obj], DELETION, single_object=True) for obj in queryset]


class AuditedUserAdmin(EachDeletionLogged, UserAdmin):
    pass


class AuditedGroupAdmin(EachDeletionLogged, GroupAdmin):
    pass


for model, model_admin in ((get_user_model(), AuditedUserAdmin), (Group, AuditedGroupAdmin)):
    if admin.site.is_registered(model):
        admin.site.unregister(model)
    admin.site.register(model, model_admin)


@receiver(post_save, sender=LogEntry, dispatch_uid="terminals-audit-admin-log")
def audit_admin_log_entry(sender, instance: LogEntry, created: bool, **kwargs) -> None:
    """Every change made in the admin (a user's staff flag or password, a key's name, ...) is on the audit trail,
    written inside the admin's own transaction: when the row cannot be written, the change is undone."""
    if not created:
        return
    audit(Actor(user=instance.user, source="admin"), "admin",
          change=LOGGED_ACTIONS.get(instance.action_flag, str(instance.action_flag)),
          model=instance.content_type.model if instance.content_type else "",
          object=instance.object_repr[:200], message=instance.get_change_message()[:500])
