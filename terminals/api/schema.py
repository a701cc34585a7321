"""OpenAPI: how drf-spectacular documents the API-key scheme, the env field, and each operation.

Imported only when a document is built (SPECTACULAR_SETTINGS names its generator class here), never at start:
loading it applies the views' deferred @extend_schema decorators (terminals/openapi.py)."""

from drf_spectacular.extensions import OpenApiAuthenticationExtension, OpenApiSerializerFieldExtension
from drf_spectacular.generators import SchemaGenerator as SpectacularSchemaGenerator
from drf_spectacular.openapi import AutoSchema

from .. import openapi


class ApiKeyScheme(OpenApiAuthenticationExtension):
    target_class = "terminals.auth.ApiKeyAuthentication"
    name = ["ApiKeyHeader", "ApiKeyAuthorization"]

    def get_security_requirement(self, auto_schema):
        # Either header is enough: two requirements (alternatives), not one that needs both headers.
        return [{name: []} for name in self.name]

    def get_security_definition(self, auto_schema):
        return [
            {"type": "apiKey", "in": "header", "name": "X-API-Key"},
            {"type": "apiKey", "in": "header", "name": "Authorization", "description": "Authorization: Api-Key <key>"},
        ]


class EnvFieldSchema(OpenApiSerializerFieldExtension):
    target_class = "terminals.api.serializers.EnvField"

    def map_serializer_field(self, auto_schema, direction):
        return {
            "oneOf": [
                {"type": "object", "additionalProperties": {"type": "string"}},
                {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {"name": {"type": "string"}, "value": {"type": "string"}},
                        "required": ["name", "value"],
                    },
                },
            ],
            "description": "Environment variables: an object, or a list of {name, value}",
        }


# Each operation's summary and description in the OpenAPI document (and so in /api/docs/): by the view's action, or
# the view's class name for plain views, and the HTTP method.
OPERATIONS = {
    ("list", "GET"): ("List terminals",
                      "The caller's terminals (staff: everyone's), newest first; `status` filters by state."),
    ("create", "POST"): ("Create a terminal",
                         "Starts a shell (`shell`) or a program (`command` with `args`) in a PTY, or on pipes with "
                         "`pty: false`, in `cwd` with `env`; answers once it runs. Audited before it starts."),
    ("retrieve", "GET"): ("Get a terminal", "Its record: status, pid, size, exit status, activity times."),
    ("destroy", "DELETE"): ("End a terminal",
                            "Sends `signal` (default SIGTERM) to its processes, then SIGKILL after "
                            "`gracefulTimeoutMs` (or at once with `force`); the output stays readable. Parameters "
                            "in the query string or a JSON body."),
    ("input", "POST"): ("Type into a terminal",
                        "Writes `input` (text, or named keys) to the terminal. Audited before a byte is sent."),
    ("output", "GET"): ("Read output",
                        "A bounded slice of what the terminal printed: by line (`since`, `mode` full/tail/head/"
                        "head-tail) or by byte offset (`fromByte`, `maxBytes`). With `follow=true` the answer is a "
                        "Server-Sent Events stream (text/event-stream) of output, gap and exit events instead."),
    ("stats", "GET"): ("Terminal statistics", "Bytes and lines printed and kept, activity times, exit status."),
    ("commands", "POST"): ("Run a command",
                           "Types a command line into a shell terminal and answers with its exact output and exit "
                           "code when it ends, or when it stops to wait for input, or at `timeoutMs` (with `wait: "
                           "false` at once, with its id)."),
    ("commands", "GET"): ("List commands", "The commands the shell ran (API and typed ones), with exit codes."),
    ("command", "GET"): ("Get a command", "One command's status, output (shaped by the read options) and exit code."),
    ("command_wait", "POST"): ("Wait for a command", "Waits up to `timeoutMs` for the command to end."),
    ("signal", "POST"): ("Signal the foreground", "Sends a signal to the terminal's foreground process group."),
    ("resize", "POST"): ("Resize", "Sets the PTY's size (`cols`, `rows`); the program gets SIGWINCH."),
    ("wait", "POST"): ("Wait for the terminal to end", "Waits up to `timeoutMs` for the terminal's program to exit."),
    ("output_wait", "POST"): ("Wait for output",
                              "Waits up to `timeoutMs` until the output from `fromByte` (default: where it stood at "
                              "the last input) matches `pattern`, or the foreground program waits for input, or the "
                              "process ends; answers which, and what was printed."),
    ("kill", "POST"): ("Kill, keep the output", "Ends the terminal's processes; its record and output stay."),
    ("screen", "GET"): ("The rendered screen", "What a terminal emulator would show now: lines, cursor, title."),
    ("AuditViewSet.list", "GET"): ("The audit trail",
                                   "Who did what to which terminal and how it ended, newest first; filters by "
                                   "terminal, action, outcome, user and time; other parameters are refused."),
    ("HealthView", "GET"): ("Health", "Database, a worker's answer and every worker's heartbeat; 503 when degraded."),
    ("LivenessView", "GET"): ("Liveness", "200 whenever the process answers; asks nothing of the database or Redis."),
    ("ReadinessView", "GET"): ("Readiness", "200 when the database, the channel layer and a live worker answer; "
                                            "503 naming what failed."),
    ("AcpView", "POST"): ("Agent Client Protocol", "JSON-RPC 2.0 calls of ACP's terminal methods (terminal/create, "
                                                   "output, wait_for_exit, kill, release), one or a batch."),
}


class DescribedAutoSchema(AutoSchema):
    """drf-spectacular's schema, with each operation's own summary and description from OPERATIONS."""

    def _described(self):
        view, action, method = type(self.view).__name__, getattr(self.view, "action", None), self.method.upper()
        if action is None:
            return OPERATIONS.get((view, method))
        return OPERATIONS.get((f"{view}.{action}", method)) or OPERATIONS.get((action, method))

    def _map_basic_serializer(self, serializer, direction):
        schema = super()._map_basic_serializer(serializer, direction)
        if direction == "request" and getattr(serializer, "refuses_unknown_fields", False):
            schema["additionalProperties"] = False  # RequestSerializer refuses any other field
        return schema

    def get_summary(self):
        described = self._described()
        return described[0] if described else super().get_summary()

    def get_description(self):
        described = self._described()
        return described[1] if described else super().get_description()


class SchemaGenerator(SpectacularSchemaGenerator):
    """drf-spectacular's generator, unchanged: named in SPECTACULAR_SETTINGS so that every way of building the
    document (/api/schema/, `manage.py spectacular`) loads this module, and with it the extensions above and the
    views' annotations, before it looks at a view."""


# Last: the decorators resolve DEFAULT_SCHEMA_CLASS, DescribedAutoSchema above.
openapi.apply_deferred()
