"""Response shapes of the REST API, for its OpenAPI schema: what each endpoint answers inside its success envelope."""

from __future__ import annotations

import functools

from drf_spectacular.utils import extend_schema_serializer
from rest_framework import serializers

from ..models import TerminalSession

# A run of fields that several answers share is declared once, in a base shape.


# What every answer that describes a terminal gives (records.session_created_data, records.session_data). No
# docstring on a shape: the schema would take it as the description of every answer built on it.
class TerminalShape(serializers.Serializer):
    terminalId = serializers.UUIDField()
    name = serializers.CharField()
    shell = serializers.CharField()
    cwd = serializers.CharField()
    cols = serializers.IntegerField(allow_null=True, help_text="null for a terminal on pipes (no screen)")
    rows = serializers.IntegerField(allow_null=True, help_text="null for a terminal on pipes (no screen)")
    created = serializers.DateTimeField()
    command = serializers.CharField(allow_blank=True)
    args = serializers.ListField(child=serializers.CharField())
    pty = serializers.BooleanField()
    outputByteLimit = serializers.IntegerField(allow_null=True)
    sessionId = serializers.CharField(allow_blank=True)
    recorded = serializers.BooleanField(help_text="What it shows is recorded (GET /api/terminals/{id}/recording)")


class ExitStatusSerializer(serializers.Serializer):
    exitCode = serializers.IntegerField(allow_null=True)
    signal = serializers.CharField(allow_null=True)


# Whether the terminal's program still runs, and how it ended if not (reads and stats).
class RunningShape(serializers.Serializer):
    isActive = serializers.BooleanField()
    exitStatus = ExitStatusSerializer(allow_null=True)


class TerminalCreatedSerializer(TerminalShape):
    pid = serializers.IntegerField()
    status = serializers.CharField()


class ForegroundSerializer(serializers.Serializer):
    pid = serializers.IntegerField()
    command = serializers.CharField(allow_blank=True)


class WatcherSerializer(serializers.Serializer):
    user = serializers.CharField(allow_blank=True)
    mode = serializers.CharField(help_text="interactive (a terminal that types) or view")


class RecordingSerializer(serializers.Serializer):
    host = serializers.CharField(help_text="The worker host that keeps the file")
    recordsInput = serializers.BooleanField(help_text="Whether what was typed is recorded too")
    finished = serializers.BooleanField(help_text="The terminal ended and the file was sealed in the audit trail")
    bytes = serializers.IntegerField(allow_null=True, help_text="The sealed file's size")
    sha256 = serializers.CharField(allow_null=True, help_text="The sealed file's SHA-256, as the audit trail holds it")
    capped = serializers.BooleanField(help_text="It reached TERMINALS_RECORDING_MAX_MB and stopped there")
    deleted = serializers.BooleanField(help_text="The retention sweep deleted the file")


class TerminalSerializer(TerminalShape):
    id = serializers.UUIDField()
    pid = serializers.IntegerField(allow_null=True)
    lastActivity = serializers.DateTimeField()
    status = serializers.ChoiceField(choices=TerminalSession.Status.values)
    exitCode = serializers.IntegerField(allow_null=True)
    signal = serializers.CharField(allow_null=True)
    ended = serializers.DateTimeField(allow_null=True)
    released = serializers.DateTimeField(allow_null=True)
    owner = serializers.CharField(allow_null=True)
    worker = serializers.CharField(allow_null=True)
    # What a live terminal is doing now (detail of an active terminal only).
    isActive = serializers.BooleanField(required=False)
    busy = serializers.BooleanField(required=False)
    foreground = ForegroundSerializer(required=False, allow_null=True)
    waitingForInput = serializers.BooleanField(required=False)
    runningCommand = serializers.DictField(required=False, allow_null=True)
    exitStatus = serializers.DictField(required=False, allow_null=True)
    recording = RecordingSerializer(required=False, allow_null=True,
                                    help_text="The detail only: where the recording stands")
    viewers = serializers.IntegerField(required=False, help_text="Clients attached (WebSocket) or following (SSE) now")
    watchers = WatcherSerializer(many=True, required=False,
                                 help_text="Who they are: each client's user (empty for an SSE stream) and mode")


class TerminalListSerializer(serializers.Serializer):
    terminals = TerminalSerializer(many=True)
    count = serializers.IntegerField()


class OutputStatsSerializer(serializers.Serializer):
    totalBytes = serializers.IntegerField()
    estimatedTokens = serializers.IntegerField()
    linesShown = serializers.IntegerField()
    linesOmitted = serializers.IntegerField()


class OutputSerializer(RunningShape):
    terminalId = serializers.UUIDField()
    output = serializers.CharField()
    totalLines = serializers.IntegerField()
    nextReadFrom = serializers.IntegerField()
    hasMore = serializers.BooleanField()
    truncated = serializers.BooleanField()
    oldestLine = serializers.IntegerField()
    linesEvicted = serializers.IntegerField()
    stats = OutputStatsSerializer()


class StatsSerializer(RunningShape):
    terminalId = serializers.UUIDField()
    totalLines = serializers.IntegerField()
    totalBytes = serializers.IntegerField()
    estimatedTokens = serializers.IntegerField()
    bufferSize = serializers.IntegerField()
    bufferBytes = serializers.IntegerField()
    oldestLine = serializers.IntegerField()
    newestLine = serializers.IntegerField()
    oldestByte = serializers.IntegerField()
    lastInputByte = serializers.IntegerField(help_text="Where the output stood when input last arrived")


class OutputWaitResultSerializer(serializers.Serializer):
    terminalId = serializers.UUIDField()
    outcome = serializers.ChoiceField(choices=["matched", "waiting_for_input", "exited", "timeout"])
    match = serializers.CharField(allow_null=True)
    output = serializers.CharField(help_text="What was printed from fromByte on, escape sequences stripped")
    fromByte = serializers.IntegerField()
    nextByte = serializers.IntegerField()
    truncated = serializers.BooleanField()
    exitStatus = ExitStatusSerializer(allow_null=True)


class InputResultSerializer(serializers.Serializer):
    terminalId = serializers.UUIDField()
    bytesWritten = serializers.IntegerField()
    pendingBytes = serializers.IntegerField()


class CommandSummarySerializer(serializers.Serializer):
    commandId = serializers.CharField()
    command = serializers.CharField()
    source = serializers.ChoiceField(choices=["api", "shell"])
    status = serializers.ChoiceField(choices=["running", "completed"])
    exitCode = serializers.IntegerField(allow_null=True)
    signal = serializers.CharField(allow_null=True)
    startedAt = serializers.DateTimeField()
    finishedAt = serializers.DateTimeField(allow_null=True)
    durationMs = serializers.FloatField(allow_null=True)


# A command as the history lists it, with what it printed.
class CommandSerializer(CommandSummarySerializer):
    terminalId = serializers.UUIDField()
    timedOut = serializers.BooleanField()
    waitingForInput = serializers.BooleanField()
    output = serializers.CharField()
    truncated = serializers.BooleanField()
    totalLines = serializers.IntegerField()
    linesShown = serializers.IntegerField()
    linesOmitted = serializers.IntegerField()


class CommandListSerializer(serializers.Serializer):
    terminalId = serializers.UUIDField()
    commands = CommandSummarySerializer(many=True)
    count = serializers.IntegerField()


class BytesSerializer(RunningShape):
    terminalId = serializers.UUIDField()
    chunk = serializers.CharField()
    fromByte = serializers.IntegerField()
    nextByte = serializers.IntegerField()
    eof = serializers.BooleanField()
    truncated = serializers.BooleanField()
    oldestByte = serializers.IntegerField()
    totalBytes = serializers.IntegerField()


class SignalResultSerializer(serializers.Serializer):
    terminalId = serializers.UUIDField()
    signal = serializers.CharField()
    processGroup = serializers.IntegerField()


class WaitResultSerializer(ExitStatusSerializer):
    terminalId = serializers.UUIDField()
    timedOut = serializers.BooleanField()


class CursorSerializer(serializers.Serializer):
    row = serializers.IntegerField()
    col = serializers.IntegerField()


class ScreenSerializer(serializers.Serializer):
    terminalId = serializers.UUIDField()
    cols = serializers.IntegerField()
    rows = serializers.IntegerField()
    lines = serializers.ListField(child=serializers.CharField(allow_blank=True))
    cursor = CursorSerializer()
    cursorVisible = serializers.BooleanField()
    alternateScreen = serializers.BooleanField()
    title = serializers.CharField(allow_blank=True)


class WorkerReportSerializer(serializers.Serializer):
    id = serializers.CharField()
    hostname = serializers.CharField()
    pid = serializers.IntegerField()
    alive = serializers.BooleanField(help_text="not stopped, not judged gone, and its heartbeat still changes")
    started = serializers.DateTimeField(help_text="when its process started (again, after a restart under its keeper)")
    heartbeatAgeMs = serializers.IntegerField()
    stopped = serializers.DateTimeField(allow_null=True)
    lost = serializers.DateTimeField(allow_null=True, help_text="when it was judged gone and its terminals lost")
    activeTerminals = serializers.IntegerField()


class HealthSerializer(serializers.Serializer):
    status = serializers.ChoiceField(choices=["healthy", "degraded"])
    uptime = serializers.FloatField()
    activeTerminals = serializers.IntegerField(allow_null=True)
    version = serializers.CharField()
    worker = serializers.DictField(help_text="the worker that answered a ping through the channel layer")
    workers = WorkerReportSerializer(many=True, allow_null=True,
                                     help_text="every worker, from its heartbeats (null when the database is down)")
    database = serializers.DictField()
    isolation = serializers.DictField(help_text="usersSeparated: whether each user's terminals run as an account "
                                      "of their own; runAs; problem: why not and what to do")


class LivenessSerializer(serializers.Serializer):
    status = serializers.ChoiceField(choices=["alive"])
    uptime = serializers.FloatField()
    version = serializers.CharField()


class ReadinessSerializer(serializers.Serializer):
    status = serializers.ChoiceField(choices=["ready", "not_ready"])
    checks = serializers.DictField(child=serializers.BooleanField(),
                                   help_text="accepting (false once the server is stopping), database, channelLayer, "
                                             "liveWorker: each true when it holds")
    workers = WorkerReportSerializer(many=True)


@functools.cache
def enveloped(serializer_class, *, message: bool = False):
    """The schema of a success envelope around serializer_class (never a list, whatever the action)."""
    fields = {"success": serializers.BooleanField(default=True), "data": serializer_class()}
    if message:
        fields["message"] = serializers.CharField()
    name = serializer_class.__name__.removesuffix("Serializer") + ("MessageEnvelope" if message else "Envelope")
    return extend_schema_serializer(many=False)(type(name, (serializers.Serializer,), fields))
