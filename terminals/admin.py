"""The admin: sessions, keys and workers to look at, the audit trail read-only."""

from django.contrib import admin

from .models import ApiKey, AuditEvent, TerminalSession, Worker

# The index says plainly when users' terminals are not separated (terminals/templatetags/terminals_admin.py).
admin.site.index_template = "terminals/admin_index.html"


@admin.register(TerminalSession)
class TerminalSessionAdmin(admin.ModelAdmin):
    list_display = ("id", "name", "owner", "status", "shell", "pid", "created", "last_activity", "ended", "worker")
    list_filter = ("status",)
    search_fields = ("id", "name", "owner__username")
    readonly_fields = [field.name for field in TerminalSession._meta.fields]

    def has_add_permission(self, request):
        return False


@admin.register(AuditEvent)
class AuditEventAdmin(admin.ModelAdmin):
    list_display = ("at", "username", "key_prefix", "source", "action", "terminal_id", "outcome")
    list_filter = ("action", "outcome")
    search_fields = ("username", "terminal_id", "key_prefix")
    readonly_fields = [field.name for field in AuditEvent._meta.fields]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    list_display = ("display_prefix", "name", "user", "created", "expires_at", "revoked_at")
    list_filter = ("revoked_at",)
    search_fields = ("prefix", "name", "user__username")
    readonly_fields = ("prefix", "created", "revoked_at")
    actions = ["revoke"]

    def has_add_permission(self, request):
        return False  # keys are made with create_api_key, which shows the plaintext once

    @admin.action(description="Revoke the selected keys")
    def revoke(self, request, queryset):
        for key in queryset:
            key.revoke()


@admin.register(Worker)
class WorkerAdmin(admin.ModelAdmin):
    list_display = ("id", "hostname", "pid", "started", "last_seen", "stopped")
    readonly_fields = [field.name for field in Worker._meta.fields]
