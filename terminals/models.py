"""Records that outlive the processes: API keys, workers, terminal sessions and the audit trail."""

from __future__ import annotations

import functools
import hashlib
import hmac
import json
import secrets
import uuid
from datetime import timedelta

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connection, models, transaction
from django.db.models.functions import Now
from django.utils import timezone

KEY_TYPE = "tk"


# A PositiveIntegerField holds this much on every database (PostgreSQL's integer is 32 bits).
LARGEST_OUTPUT_BYTE_LIMIT = 2**31 - 1

LAST_USED_RESOLUTION = timedelta(minutes=1)


class ApiKeyManager(models.Manager["ApiKey"]):
    def create_key(self, *, user, name: str = "", expires_at=None) -> tuple[ApiKey, str]:
        """Creates a key; returns the record and the plaintext key, which is never stored."""
        prefix = secrets.token_hex(4)
        key = f"{KEY_TYPE}_{prefix}.{secrets.token_urlsafe(32)}"
        record = self.create(user=user, name=name, prefix=prefix, hashed_key=hash_key(key), expires_at=expires_at)
        return record, key

    def for_key(self, key: str) -> ApiKey | None:
        """Returns the key's record if the key is genuine, whatever its state; None otherwise."""
        prefix = key_prefix(key)
        if prefix is None:
            return None
        try:
            record = self.select_related("user").get(prefix=prefix)  # unique; get() compiles no ordering
        except self.model.DoesNotExist:
            return None
        if not hmac.compare_digest(record.hashed_key, hash_key(key)):
            return None
        return record


def hash_key(key: str) -> str:
    # Keys carry 256 random bits, so a fast hash is enough: no dictionary can guess them.
    return hashlib.sha256(key.encode()).hexdigest()


def key_prefix(key: str) -> str | None:
    """Returns the public prefix of a well-formed key ("tk_<prefix>.<secret>"), or None."""
    head, dot, secret = key.partition(".")
    kind, underscore, prefix = head.partition("_")
    if not (dot and underscore and secret) or kind != KEY_TYPE or len(prefix) != 8:
        return None
    return prefix


class ApiKey(models.Model):
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_keys")
    name = models.CharField(max_length=100, blank=True)
    prefix = models.CharField(max_length=8, unique=True, editable=False)
    hashed_key = models.CharField(max_length=64, editable=False)
    created = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    # When the key last authenticated a request, to the minute (written at most once a minute per key).
    last_used = models.DateTimeField(null=True, blank=True, editable=False)
    revoked_at = models.DateTimeField(null=True, blank=True, editable=False)

    objects = ApiKeyManager()

    class Meta:
        verbose_name = "API key"

    def __str__(self) -> str:
        return f"{KEY_TYPE}_{self.prefix} ({self.user})"

    @property
    def display_prefix(self) -> str:
        return f"{KEY_TYPE}_{self.prefix}"

    def is_usable(self, now=None) -> bool:
        now = now or timezone.now()
        return self.revoked_at is None and (self.expires_at is None or self.expires_at > now)

    def note_use(self, now=None) -> None:
        """Records that the key was used now, unless it was recorded less than a minute ago."""
        now = now or timezone.now()
        if self.last_used is None or now - self.last_used >= LAST_USED_RESOLUTION:
            ApiKey.objects.filter(pk=self.pk).update(last_used=now)
            self.last_used = now

    def revoke(self) -> None:
        """Revokes the key for good; revoking twice keeps the first time."""
        ApiKey.objects.filter(pk=self.pk, revoked_at__isnull=True).update(revoked_at=timezone.now())
        self.refresh_from_db(fields=["revoked_at"])

    def save(self, *args, **kwargs) -> None:
        if self.pk is not None and self.revoked_at is None:
            stored = ApiKey.objects.filter(pk=self.pk).values_list("revoked_at", flat=True).first()
            if stored is not None:
                raise ValueError("a revoked key cannot be reinstated")
        super().save(*args, **kwargs)


class WorkerQuerySet(models.QuerySet["Worker"]):
    def live(self) -> WorkerQuerySet:
        return self.filter(Worker.live_condition())


class Worker(models.Model):
    """A process that hosts terminals; its heartbeat says it is alive."""

    id = models.CharField(max_length=32, primary_key=True)
    channel = models.CharField(max_length=200)
    hostname = models.CharField(max_length=255)
    # Where its pid means something (runtime.processes.process_space): a worker judges another one by its pid only
    # when they share this, whatever their hostnames; otherwise by its heartbeat. Empty: unknown.
    process_space = models.CharField(max_length=200, blank=True, default="")
    pid = models.IntegerField()
    started = models.DateTimeField()
    last_seen = models.DateTimeField()
    stopped = models.DateTimeField(null=True, blank=True)
    # When another worker confirmed it gone (its process gone on that worker's host, or silent over a window in which
    # that worker could write: worker/liveness.py) and marked its terminals lost. Cleared when it beats again.
    lost = models.DateTimeField(null=True, blank=True)

    objects = WorkerQuerySet.as_manager()

    def __str__(self) -> str:
        return f"{self.hostname}:{self.pid}"

    @staticmethod
    def stale_before():
        """Heartbeats older than this mean the worker is gone (three missed beats).

        Heartbeats are written and judged by the database's clock alone (Now()): a worker host whose clock runs
        behind the reader's would otherwise look dead while it beats.
        """
        interval = settings.TERMINALS["HEARTBEAT_INTERVAL_MS"]
        return models.ExpressionWrapper(Now() - timedelta(milliseconds=3 * interval),
                                        output_field=models.DateTimeField())

    @staticmethod
    def live_condition(prefix: str = "") -> models.Q:
        """Not stopped, not confirmed gone, and beating; prefix ("worker__") applies it to a terminal's worker."""
        return models.Q(**{f"{prefix}stopped__isnull": True, f"{prefix}lost__isnull": True,
                           f"{prefix}last_seen__gte": Worker.stale_before()})

    def is_live(self) -> bool:
        return Worker.objects.live().filter(pk=self.pk).exists()


class TerminalSessionQuerySet(models.QuerySet["TerminalSession"]):
    def visible_to(self, user) -> TerminalSessionQuerySet:
        """The one access rule: staff see every terminal, others only their own."""
        if user.is_staff:
            return self.all()
        return self.filter(owner=user)

    def active(self) -> TerminalSessionQuerySet:
        return self.filter(status=TerminalSession.Status.ACTIVE)


class TerminalSession(models.Model):
    class Status(models.TextChoices):
        ACTIVE = "active"
        EXITED = "exited"  # the process ended by itself
        KILLED = "killed"  # ended by a delete
        TIMED_OUT = "timed_out"  # ended by the idle sweep
        LOST = "lost"  # its worker went away

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="terminals")
    api_key = models.ForeignKey(ApiKey, null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    name = models.CharField(max_length=100, blank=True)
    pid = models.IntegerField(null=True)
    shell = models.CharField(max_length=255, blank=True)  # empty for a command terminal
    command = models.CharField(max_length=4096, blank=True)  # the program of a command terminal
    args = models.JSONField(default=list, blank=True)
    pty = models.BooleanField(default=True)
    output_byte_limit = models.PositiveIntegerField(null=True, blank=True)  # at most LARGEST_OUTPUT_BYTE_LIMIT
    session_id = models.CharField(max_length=200, blank=True, db_index=True)  # the Agent Client Protocol session
    cwd = models.CharField(max_length=4096)
    cols = models.PositiveIntegerField(default=80)
    rows = models.PositiveIntegerField(default=24)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.ACTIVE, db_index=True)
    exit_code = models.IntegerField(null=True, blank=True)
    signal = models.CharField(max_length=16, null=True, blank=True)
    created = models.DateTimeField(default=timezone.now)
    last_activity = models.DateTimeField(default=timezone.now)
    ended = models.DateTimeField(null=True, blank=True)
    released = models.DateTimeField(null=True, blank=True)
    worker = models.ForeignKey(Worker, null=True, blank=True, on_delete=models.SET_NULL, related_name="terminals")
    recorded = models.BooleanField(default=False)  # what it showed is kept as a Recording

    objects = TerminalSessionQuerySet.as_manager()

    class Meta:
        verbose_name = "terminal"  # the API's word; "terminal session" said the same thing twice
        ordering = ["created"]
        indexes = [models.Index(fields=["owner", "status"])]

    def __str__(self) -> str:
        return f"{self.id} ({self.status})"

    @property
    def is_active(self) -> bool:
        return self.status == self.Status.ACTIVE

    @property
    def holds_output(self) -> bool:
        """Whether a worker still keeps this terminal's output."""
        return self.released is None and self.status != self.Status.LOST

    def mark_ended(self, status: str, *, exit_code: int | None, signal: str | None, release: bool) -> bool:
        """Records how the process ended, once; returns whether this call recorded it."""
        now = timezone.now()
        changes = {"exit_code": exit_code, "signal": signal, "ended": now, "status": status}
        if release:
            changes["released"] = now
        updated = TerminalSession.objects.filter(pk=self.pk, status=self.Status.ACTIVE).update(**changes)
        if not updated and release:
            TerminalSession.objects.filter(pk=self.pk, released__isnull=True).update(released=now)
        self.refresh_from_db()
        return updated == 1


class Recording(models.Model):
    """Where a recorded terminal's asciicast file is (each worker host keeps its own) and, once it is finished,
    its size and SHA-256, which the audit trail holds too: a file changed afterwards no longer matches."""

    terminal = models.OneToOneField(TerminalSession, on_delete=models.CASCADE, primary_key=True,
                                    related_name="recording")
    host = models.CharField(max_length=255)  # the hostname of the worker that writes it
    path = models.CharField(max_length=4096)
    record_input = models.BooleanField(default=False)
    started = models.DateTimeField(default=timezone.now, db_index=True)
    finished = models.DateTimeField(null=True, blank=True)
    size = models.BigIntegerField(null=True, blank=True)
    sha256 = models.CharField(max_length=64, blank=True)
    capped = models.BooleanField(default=False)  # it reached its size cap
    deleted = models.DateTimeField(null=True, blank=True)  # the retention sweep removed the file

    class Meta:
        ordering = ["-started"]

    def __str__(self) -> str:
        return f"recording of {self.terminal_id}"


class ViewGrant(models.Model):
    """A read-only look at a terminal that its owner gave another user: they may watch it live (the WebSocket's
    view mode), nothing more. Removing the row takes the look back."""

    terminal = models.ForeignKey(TerminalSession, on_delete=models.CASCADE, related_name="view_grants")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    granted_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+")
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["terminal", "user"], name="one_grant_per_terminal_and_user")]


def _lock_audit_chain() -> None:
    """Serialises appends to the chain, so two writers never link to the same previous row."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [AUDIT_CHAIN_LOCK])
    # SQLite: transactions are IMMEDIATE (settings), so a writer holds the database lock already.


AUDIT_CHAIN_LOCK = 6973


def _insert_audit_event(event: AuditEvent) -> None:
    """Model.save()'s INSERT by a statement written once per database: the ORM built it anew for every row, a
    quarter of the time a row took (0.198 -> 0.151 ms; bench/ANALYSIS.md, eighth session), and every request that
    changes anything writes one. Each value is prepared by its field, as the ORM does. No signals are sent: nothing
    listens for audit rows, and rows are never changed."""
    fields, sql, returning = _audit_insert_statement(connection.vendor)
    params = [field.get_db_prep_save(field.pre_save(event, True), connection) for field in fields]
    opts = AuditEvent._meta
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        event.pk = (cursor.fetchone()[0] if returning
                    else connection.ops.last_insert_id(cursor, opts.db_table, opts.pk.column))
    event._state.adding = False
    event._state.db = connection.alias


@functools.cache
def _audit_insert_statement(vendor: str) -> tuple[list, str, bool]:
    """(the fields written, in order; the INSERT; whether it returns the new id) for this process's database."""
    opts = AuditEvent._meta
    fields = [field for field in opts.concrete_fields if not field.primary_key]
    quote = connection.ops.quote_name
    columns = ", ".join(quote(field.column) for field in fields)
    sql = f"INSERT INTO {quote(opts.db_table)} ({columns}) VALUES ({', '.join(['%s'] * len(fields))})"
    returning = connection.features.can_return_columns_from_insert
    return fields, sql + (f" RETURNING {quote(opts.pk.column)}" if returning else ""), returning


def newest_audit_hash() -> str:
    """The newest event's hash ("" before the first), by a statement written once: the ORM compiled `order_by("-id")...first()` anew for
    every event, a third of the time writing one took (bench/ANALYSIS.md). The same SQL on SQLite and PostgreSQL."""
    quote = connection.ops.quote_name
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {quote('hash')} FROM {quote(AuditEvent._meta.db_table)} ORDER BY {quote('id')} DESC "
                       "LIMIT 1")
        row = cursor.fetchone()
    return row[0] if row else ""


class AuditQuerySet(models.QuerySet["AuditEvent"]):
    def update(self, **kwargs):
        raise PermissionError("audit events are never changed")

    def bulk_update(self, *args, **kwargs):
        raise PermissionError("audit events are never changed")

    def bulk_create(self, *args, **kwargs):
        raise PermissionError("audit events are added one at a time, each linked to the one before")

    def delete(self):
        raise PermissionError("audit events are never deleted")

    def visible_to(self, user) -> AuditQuerySet:
        """Staff see every event; others their own and the system's events about their terminals."""
        if user.is_staff:
            return self.all()
        owned = TerminalSession.objects.filter(owner=user).values("id")
        return self.filter(models.Q(user=user) | models.Q(user__isnull=True, terminal_id__in=owned))


class AuditEvent(models.Model):
    """One state change or refused request. Rows are only ever added."""

    at = models.DateTimeField(default=timezone.now, db_index=True)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    username = models.CharField(max_length=150, blank=True)
    key_prefix = models.CharField(max_length=16, blank=True)
    source = models.CharField(max_length=64, blank=True)
    action = models.CharField(max_length=32, db_index=True)
    terminal_id = models.UUIDField(null=True, blank=True, db_index=True)
    outcome = models.CharField(max_length=32)
    details = models.JSONField(default=dict, blank=True)
    # Each row's hash covers its content and the previous row's hash, so a changed,
    # removed or inserted row breaks the chain (manage.py verify_audit finds where).
    previous_hash = models.CharField(max_length=64, blank=True, editable=False)
    hash = models.CharField(max_length=64, blank=True, editable=False)

    objects = AuditQuerySet.as_manager()

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.username or '-'} {self.action} {self.outcome}"

    def save(self, *args, **kwargs) -> None:
        if self.pk is not None:
            raise PermissionError("audit events are never changed")
        if kwargs.get("using", DEFAULT_DB_ALIAS) != DEFAULT_DB_ALIAS:
            raise ValueError("audit events are written to the default database only")
        with transaction.atomic():
            _lock_audit_chain()
            self.previous_hash = newest_audit_hash()
            self.hash = self.compute_hash()
            _insert_audit_event(self)

    def compute_hash(self) -> str:
        content = {
            "at": self.at.isoformat(),
            "user": self.user_id,
            "username": self.username,
            "key_prefix": self.key_prefix,
            "source": self.source,
            "action": self.action,
            "terminal": str(self.terminal_id) if self.terminal_id else None,
            "outcome": self.outcome,
            "details": self.details,
        }
        canonical = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
        return hashlib.sha256((self.previous_hash + canonical).encode()).hexdigest()

    def delete(self, *args, **kwargs):
        raise PermissionError("audit events are never deleted")
