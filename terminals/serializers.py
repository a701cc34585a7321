"""Request shapes (validated) and response shapes (documented in the OpenAPI schema)."""

from __future__ import annotations

from django.conf import settings
from drf_spectacular.utils import extend_schema_serializer, inline_serializer
from rest_framework import serializers

from .models import AuditEvent, TerminalSession
from .runtime.buffer import MODES

SIGNALS = ("SIGTERM", "SIGINT", "SIGKILL", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2")


def _limit(name: str) -> int:
    return settings.TERMINALS[name]


class EnvField(serializers.Field):
    """An object of names to values, or the Agent Client Protocol's list of {name, value}."""

    default_error_messages = {"invalid": "Must be an object of strings or a list of {{name, value}}."}

    def to_internal_value(self, data):
        if isinstance(data, list):
            pairs = {}
            for item in data:
                if not isinstance(item, dict) or set(item) != {"name", "value"}:
                    self.fail("invalid")
                pairs[item["name"]] = item["value"]
            data = pairs
        if not isinstance(data, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in data.items()):
            self.fail("invalid")
        return data

    def to_representation(self, value):
        return value


class TerminalCreateSerializer(serializers.Serializer):
    shell = serializers.CharField(required=False, allow_blank=True, max_length=4096)
    cwd = serializers.CharField(required=False, allow_blank=True, max_length=4096, trim_whitespace=False)
    env = EnvField(required=False)
    cols = serializers.IntegerField(required=False, default=80, min_value=1)
    rows = serializers.IntegerField(required=False, default=24, min_value=1)
    name = serializers.CharField(required=False, allow_blank=True, max_length=100)

    def validate_cols(self, value: int) -> int:
        return _at_most(value, _limit("MAX_COLS"))

    def validate_rows(self, value: int) -> int:
        return _at_most(value, _limit("MAX_ROWS"))


def _at_most(value: int, limit: int) -> int:
    if value > limit:
        raise serializers.ValidationError(f"Ensure this value is less than or equal to {limit}.")
    return value


class TerminalInputSerializer(serializers.Serializer):
    input = serializers.CharField(allow_blank=True, trim_whitespace=False)
    appendNewline = serializers.BooleanField(required=False, default=True)


class OutputQuerySerializer(serializers.Serializer):
    since = serializers.IntegerField(required=False, min_value=0)
    mode = serializers.ChoiceField(choices=MODES, required=False, default="full")
    headLines = serializers.IntegerField(required=False, default=50, min_value=0)
    tailLines = serializers.IntegerField(required=False, default=50, min_value=0)
    maxLines = serializers.IntegerField(required=False, default=1000, min_value=1)

    def validate(self, attrs):
        limit = _limit("MAX_OUTPUT_LINES")
        for field in ("headLines", "tailLines", "maxLines"):
            if attrs[field] > limit:
                raise serializers.ValidationError({field: f"Ensure this value is less than or equal to {limit}."})
        return attrs

    def options(self) -> dict:
        data = self.validated_data
        return {
            "since": data.get("since"),
            "mode": data["mode"],
            "head_lines": data["headLines"],
            "tail_lines": data["tailLines"],
            "max_lines": data["maxLines"],
        }


class TerminateSerializer(serializers.Serializer):
    signal = serializers.ChoiceField(choices=SIGNALS, required=False, default="SIGTERM")

    def to_internal_value(self, data):
        if isinstance(data, dict) and isinstance(data.get("signal"), str) and not data["signal"].upper().startswith("SIG"):
            data = {**data, "signal": "SIG" + data["signal"].upper()}
        elif isinstance(data, dict) and isinstance(data.get("signal"), str):
            data = {**data, "signal": data["signal"].upper()}
        return super().to_internal_value(data)


class ListQuerySerializer(serializers.Serializer):
    status = serializers.ChoiceField(
        choices=["active", "all", *TerminalSession.Status.values], required=False, default="active"
    )


class AuditQuerySerializer(serializers.Serializer):
    terminal = serializers.UUIDField(required=False)
    action = serializers.CharField(required=False, max_length=32)
    since = serializers.DateTimeField(required=False)
    until = serializers.DateTimeField(required=False)


class AuditEventSerializer(serializers.ModelSerializer):
    terminalId = serializers.UUIDField(source="terminal_id", allow_null=True)
    keyPrefix = serializers.CharField(source="key_prefix")
    user = serializers.CharField(source="username")

    class Meta:
        model = AuditEvent
        fields = ["id", "at", "user", "keyPrefix", "source", "action", "terminalId", "outcome", "details"]


# Response shapes, for the schema.


class TerminalCreatedSerializer(serializers.Serializer):
    terminalId = serializers.UUIDField()
    pid = serializers.IntegerField()
    shell = serializers.CharField()
    cwd = serializers.CharField()
    created = serializers.DateTimeField()
    status = serializers.CharField()
    name = serializers.CharField()
    cols = serializers.IntegerField()
    rows = serializers.IntegerField()


class TerminalSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    terminalId = serializers.UUIDField()
    name = serializers.CharField()
    pid = serializers.IntegerField(allow_null=True)
    shell = serializers.CharField()
    cwd = serializers.CharField()
    cols = serializers.IntegerField()
    rows = serializers.IntegerField()
    created = serializers.DateTimeField()
    lastActivity = serializers.DateTimeField()
    status = serializers.ChoiceField(choices=TerminalSession.Status.values)
    exitCode = serializers.IntegerField(allow_null=True)
    signal = serializers.CharField(allow_null=True)
    ended = serializers.DateTimeField(allow_null=True)
    released = serializers.DateTimeField(allow_null=True)
    owner = serializers.CharField(allow_null=True)
    worker = serializers.CharField(allow_null=True)


class TerminalListSerializer(serializers.Serializer):
    terminals = TerminalSerializer(many=True)
    count = serializers.IntegerField()


class ExitStatusSerializer(serializers.Serializer):
    exitCode = serializers.IntegerField(allow_null=True)
    signal = serializers.CharField(allow_null=True)


class OutputStatsSerializer(serializers.Serializer):
    totalBytes = serializers.IntegerField()
    estimatedTokens = serializers.IntegerField()
    linesShown = serializers.IntegerField()
    linesOmitted = serializers.IntegerField()


class OutputSerializer(serializers.Serializer):
    terminalId = serializers.UUIDField()
    output = serializers.CharField()
    totalLines = serializers.IntegerField()
    nextReadFrom = serializers.IntegerField()
    hasMore = serializers.BooleanField()
    truncated = serializers.BooleanField()
    oldestLine = serializers.IntegerField()
    linesEvicted = serializers.IntegerField()
    isActive = serializers.BooleanField()
    exitStatus = ExitStatusSerializer(allow_null=True)
    stats = OutputStatsSerializer()


class StatsSerializer(serializers.Serializer):
    terminalId = serializers.UUIDField()
    totalLines = serializers.IntegerField()
    totalBytes = serializers.IntegerField()
    estimatedTokens = serializers.IntegerField()
    bufferSize = serializers.IntegerField()
    bufferBytes = serializers.IntegerField()
    oldestLine = serializers.IntegerField()
    newestLine = serializers.IntegerField()
    oldestByte = serializers.IntegerField()
    isActive = serializers.BooleanField()
    exitStatus = ExitStatusSerializer(allow_null=True)


class InputResultSerializer(serializers.Serializer):
    terminalId = serializers.UUIDField()
    bytesWritten = serializers.IntegerField()
    pendingBytes = serializers.IntegerField()


class HealthSerializer(serializers.Serializer):
    status = serializers.ChoiceField(choices=["healthy", "degraded"])
    uptime = serializers.FloatField()
    activeTerminals = serializers.IntegerField(allow_null=True)
    version = serializers.CharField()
    worker = serializers.DictField()
    database = serializers.DictField()


class ErrorSerializer(serializers.Serializer):
    code = serializers.CharField()
    message = serializers.CharField()
    details = serializers.DictField()


ErrorEnvelope = inline_serializer(
    name="ErrorEnvelope", fields={"success": serializers.BooleanField(default=False), "error": ErrorSerializer()}
)


def enveloped(serializer_class, *, message: bool = False):
    """The schema of a success envelope around serializer_class (never a list, whatever the action)."""
    fields = {"success": serializers.BooleanField(default=True), "data": serializer_class()}
    if message:
        fields["message"] = serializers.CharField()
    name = serializer_class.__name__.removesuffix("Serializer") + ("MessageEnvelope" if message else "Envelope")
    return extend_schema_serializer(many=False)(type(name, (serializers.Serializer,), fields))
