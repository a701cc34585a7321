"""Request shapes of the REST API: bodies and query strings, validated. (Response shapes: responses.py.)"""

from __future__ import annotations

from django.conf import settings
from rest_framework import serializers

from .. import field_names, json_input
from ..exceptions import InvalidInput
from ..models import LARGEST_OUTPUT_BYTE_LIMIT, AuditEvent, TerminalSession
from ..runtime.line_reads import MODES
from ..sessions import SIGNALS

STREAMS = ("both", "stdout", "stderr")


class WholeNumber(serializers.IntegerField):
    """An integer field that is always bounded: a number no database column could hold is a 400, never a 500.
    Without a max_value of its own it takes the largest integer a database column stores."""

    def __init__(self, **kwargs) -> None:
        kwargs.setdefault("max_value", json_input.LARGEST_STORED_INTEGER)
        kwargs.setdefault("min_value", -json_input.LARGEST_STORED_INTEGER - 1)
        super().__init__(**kwargs)


class UpToSetting(WholeNumber):
    """A whole number from min_value up to a setting, settings.TERMINALS[setting]: the one source of that bound, read
    each time a value is checked and when the schema is made (its maximum), never copied at import."""

    def __init__(self, setting: str, **kwargs) -> None:
        super().__init__(max_value=None, **kwargs)  # no bound fixed now: at_most reads it when used
        self.setting = setting
        self.validators.append(self.at_most)

    @property
    def max_value(self) -> int | None:
        setting = getattr(self, "setting", None)  # None while IntegerField's __init__ runs: no fixed validator
        return settings.TERMINALS[setting] if setting else None

    @max_value.setter
    def max_value(self, value) -> None:
        pass  # the bound is the setting's

    def at_most(self, value: int) -> None:
        limit = self.max_value
        if value > limit:
            raise serializers.ValidationError(f"Ensure this value is less than or equal to {limit}.", code="max_value")


class Choice(serializers.ChoiceField):
    """A choice whose refusal lists the valid choices, so the caller can pick one without reading the docs."""

    default_error_messages = {"invalid_choice": '"{input}" is not a valid choice; choose one of: {choices}.'}

    def to_internal_value(self, data):
        if data == "" and self.allow_blank:
            return ""
        try:
            return self.choice_strings_to_values[str(data)]
        except KeyError:
            self.fail("invalid_choice", input=field_names.shown(data), choices=", ".join(map(str, self.choices)))


class RequestSerializer(serializers.Serializer):
    """A request's body (or query string): a name it does not declare is refused, naming it and the name probably
    meant, before any field is read. Every request serializer of the API derives from this one."""

    refuses_unknown_fields = True  # the OpenAPI document says so: additionalProperties false (schema.py)

    def to_internal_value(self, data):
        if hasattr(data, "keys"):
            refuse_unknown(data.keys(), self.fields, "field")
        return super().to_internal_value(data)


def refuse_unknown(given, accepted, kind: str) -> None:
    """400 INVALID_INPUT for the names in given that are not accepted: each with what was probably meant."""
    names = field_names.unknown(given, accepted)
    if names:
        problems = {field_names.shown(name): [field_names.problem(name, accepted, kind)] for name in names}
        raise InvalidInput("; ".join(problem for (problem,) in problems.values()),
                           {"fields": problems, "accepted": sorted(accepted)})


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


class TerminalCreateSerializer(RequestSerializer):
    shell = serializers.CharField(required=False, allow_blank=True, max_length=4096)
    command = serializers.CharField(required=False, max_length=4096, help_text="Run this program directly instead of a shell")
    args = serializers.ListField(child=serializers.CharField(allow_blank=True, trim_whitespace=False), required=False, max_length=1000)
    cwd = serializers.CharField(required=False, allow_blank=True, max_length=4096, trim_whitespace=False)
    env = EnvField(required=False)
    cols = UpToSetting("MAX_COLS", required=False, default=80, min_value=1)
    rows = UpToSetting("MAX_ROWS", required=False, default=24, min_value=1)
    name = serializers.CharField(required=False, allow_blank=True, max_length=100)
    pty = serializers.BooleanField(required=False, default=True, help_text="false: pipes, stdout and stderr apart")
    outputByteLimit = WholeNumber(required=False, min_value=1, max_value=LARGEST_OUTPUT_BYTE_LIMIT,
                                  help_text="Keep only the newest bytes")
    sessionId = serializers.CharField(required=False, allow_blank=True, max_length=200)
    record = serializers.BooleanField(required=False, default=False,
                                      help_text="Record what the terminal shows (an asciicast file, GET .../recording); "
                                                "the service's policy may record it anyway")

    def validate_args(self, value: list[str]) -> list[str]:
        if any("\x00" in arg for arg in value):
            raise serializers.ValidationError("An argument must not contain NUL.")
        return value

    def validate(self, attrs):
        if attrs.get("shell") and attrs.get("command"):
            raise serializers.ValidationError({"command": "Give a shell or a command, not both."})
        if attrs.get("args") and not attrs.get("command"):
            raise serializers.ValidationError({"args": "args go with command."})
        if attrs.get("pty") is False:
            given = [field for field in ("cols", "rows") if field in self.initial_data]
            if given:
                # Pipes have no window: a size would be accepted and then have no effect.
                raise serializers.ValidationError({field: 'A terminal without a PTY ("pty": false) has no window '
                                                   "size; leave cols and rows out." for field in given})
        return attrs

    def use_case_arguments(self) -> dict:
        data = dict(self.validated_data)
        data["output_byte_limit"] = data.pop("outputByteLimit", None)
        data["session_id"] = data.pop("sessionId", "")
        return data


class TerminalInputSerializer(RequestSerializer):
    input = serializers.CharField(allow_blank=True, trim_whitespace=False)
    appendNewline = serializers.BooleanField(required=False, default=True)
    eof = serializers.BooleanField(required=False, default=False, help_text="Close the program's input (pty: false)")


class ReadOptionsSerializer(RequestSerializer):
    """How much of a text to show: the modes of the REST contract, and escape-sequence stripping."""

    mode = Choice(choices=MODES, required=False, default="full")
    headLines = UpToSetting("MAX_OUTPUT_LINES", required=False, default=50, min_value=0)
    tailLines = UpToSetting("MAX_OUTPUT_LINES", required=False, default=50, min_value=0)
    maxLines = UpToSetting("MAX_OUTPUT_LINES", required=False, default=1000, min_value=1)
    stripAnsi = serializers.BooleanField(required=False, default=False)

    def read(self) -> dict:
        data = self.validated_data
        return {
            "mode": data["mode"],
            "head_lines": data["headLines"],
            "tail_lines": data["tailLines"],
            "max_lines": data["maxLines"],
            "strip_ansi": data["stripAnsi"],
        }


class OutputQuerySerializer(ReadOptionsSerializer):
    since = WholeNumber(required=False, min_value=0)
    sinceTime = serializers.DateTimeField(required=False, help_text="Lines that arrived at or after this time")
    fromByte = WholeNumber(required=False, min_value=0, help_text="Read by byte offset instead of line")
    maxBytes = UpToSetting("MAX_READ_BYTES", required=False, default=65536, min_value=1)
    stream = Choice(choices=STREAMS, required=False, default="both")
    follow = serializers.BooleanField(required=False, default=False,
                                      help_text="Stream as Server-Sent Events until the process exits")

    def options(self) -> dict:
        data = self.validated_data
        if data.get("fromByte") is not None:
            return {"from_byte": data["fromByte"], "max_bytes": data["maxBytes"], "strip_ansi": data["stripAnsi"],
                    "stream": data["stream"]}
        since_time = data.get("sinceTime")
        return {
            "since": data.get("since"),
            "since_time": since_time.timestamp() if since_time else None,
            "stream": data["stream"],
            "read": self.read(),
        }


class CommandRunSerializer(ReadOptionsSerializer):
    command = serializers.CharField(trim_whitespace=False, max_length=1 << 20)
    timeoutMs = UpToSetting("MAX_WAIT_MS", required=False, default=10_000, min_value=1)
    wait = serializers.BooleanField(required=False, default=True)

    def validate_command(self, value: str) -> str:
        if not value.strip():
            raise serializers.ValidationError("Must not be blank.")
        limit = settings.TERMINALS["MAX_INPUT_BYTES"]
        if len(value.encode("utf-8", errors="surrogatepass")) > limit:
            raise serializers.ValidationError(f"Longer than {limit} bytes.")
        return value


class WaitQuerySerializer(ReadOptionsSerializer):
    timeoutMs = UpToSetting("MAX_WAIT_MS", required=False, default=10_000, min_value=0)


class SignalSerializer(RequestSerializer):
    signal = Choice(choices=SIGNALS, required=False, default="SIGINT")

    def to_internal_value(self, data):
        return super().to_internal_value(_signal_name(data))


class ResizeSerializer(RequestSerializer):
    cols = UpToSetting("MAX_COLS", min_value=1)
    rows = UpToSetting("MAX_ROWS", min_value=1)


def _signal_name(data):
    """Accepts "INT", "sigint" and "SIGINT" alike."""
    if isinstance(data, dict) and isinstance(data.get("signal"), str):
        name = data["signal"].upper()
        return {**data, "signal": name if name.startswith("SIG") else "SIG" + name}
    return data


class TerminateSerializer(RequestSerializer):
    signal = Choice(choices=SIGNALS, required=False, default="SIGTERM")
    force = serializers.BooleanField(required=False, default=False, help_text="SIGKILL at once")
    gracefulTimeoutMs = UpToSetting("MAX_WAIT_MS", required=False, min_value=0, help_text="Time before SIGKILL")

    def to_internal_value(self, data):
        return super().to_internal_value(_signal_name(data))


class ListQuerySerializer(RequestSerializer):
    status = Choice(
        choices=["active", "all", *TerminalSession.Status.values], required=False, default="active"
    )
    sessionId = serializers.CharField(
        required=False, max_length=200, trim_whitespace=False, help_text="Only the terminals of this ACP session"
    )


class AuditQuerySerializer(RequestSerializer):
    terminal = serializers.UUIDField(required=False, help_text="only events of this terminal")
    action = serializers.CharField(required=False, max_length=32, help_text="only this action, e.g. input")
    outcome = serializers.CharField(required=False, max_length=64,
                                    help_text="only this outcome: ok, or an error code such as TERMINAL_NOT_FOUND")
    user = serializers.CharField(required=False, max_length=150,
                                 help_text="only this user's events (a user sees only their own whatever it says)")
    # Times are sinceTime/untilTime, as in the output's sinceTime; since and until, the first spellings, still work.
    sinceTime = serializers.DateTimeField(required=False, help_text="events at or after this time (ISO 8601)")
    untilTime = serializers.DateTimeField(required=False, help_text="events before this time (ISO 8601)")
    since = serializers.DateTimeField(required=False, help_text="the former name of sinceTime")
    until = serializers.DateTimeField(required=False, help_text="the former name of untilTime")
    ordering = Choice(required=False, choices=["-at", "at"], default="-at",
                                       help_text="-at: newest first (the default); at: oldest first")


class AuditEventSerializer(serializers.ModelSerializer):
    terminalId = serializers.UUIDField(source="terminal_id", allow_null=True)
    keyPrefix = serializers.CharField(source="key_prefix")
    user = serializers.CharField(source="username")

    class Meta:
        model = AuditEvent
        fields = ["id", "at", "user", "keyPrefix", "source", "action", "terminalId", "outcome", "details"]


class OutputWaitSerializer(RequestSerializer):
    pattern = serializers.CharField(required=False, default="", allow_blank=True, trim_whitespace=False,
                                    max_length=1000, help_text="A regular expression to wait for in the output "
                                                               "(escape sequences stripped)")
    timeoutMs = UpToSetting("MAX_WAIT_MS", required=False, default=10_000, min_value=0)
    fromByte = WholeNumber(required=False, min_value=0, help_text="Search from this byte (default: where the output "
                                                                  "stood at the last input)")
    untilInput = serializers.BooleanField(required=False, default=True,
                                          help_text="Also stop when the foreground program waits for input")
