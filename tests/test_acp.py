"""The Agent Client Protocol endpoint: JSON-RPC 2.0 terminal methods, answered by the real embedded server."""

from __future__ import annotations

import json
import threading
import uuid
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from terminals.models import AuditEvent

from .client import Api
from .conftest import make_key
from .servers import start_embedded

ROUTE = "/api/acp"
SHORT_WAIT_MS = 300


# The published ACP schema (its source and version are in the file's header), for checking every answer.
ACP_SCHEMA = json.loads((Path(__file__).parent / "acp-terminal-schema.json").read_text())
RESULTS = {method: shapes["result"] for method, shapes in ACP_SCHEMA["x-methods"].items()}


def conforms(instance, reference: str) -> None:
    """Fails unless instance is valid against the schema's definition at reference ("#/$defs/...")."""
    validator = Draft202012Validator({**ACP_SCHEMA, "$ref": reference})
    problems = [f"{list(error.absolute_path)}: {error.message}" for error in validator.iter_errors(instance)]
    assert not problems, (instance, problems)


def assert_acp_response(answer: dict, method) -> None:
    """A JSON-RPC 2.0 response as ACP defines it: an id, and either the method's result or an error object."""
    assert answer.get("jsonrpc") == "2.0", answer
    assert "id" in answer and ("result" in answer) != ("error" in answer), answer
    assert set(answer) <= {"jsonrpc", "id", "result", "error"}, answer
    conforms(answer["id"], "#/$defs/RequestId")
    if "error" in answer:
        conforms(answer["error"], "#/$defs/Error")
    else:
        assert method in RESULTS, f"a result for {method!r}, which has none: {answer}"
        conforms(answer["result"], RESULTS[method])


def acp_post(api: Api, body=None, **kwargs):
    """Posts to the endpoint; every JSON-RPC response that comes back is checked against the ACP schema."""
    response = api.post(ROUTE, json=body, **kwargs)  # requests sends data= instead when given
    if response.status_code == 200:
        calls = body if isinstance(body, list) else [body]
        methods = {json.dumps(call.get("id")): call.get("method") for call in calls if isinstance(call, dict)}
        answers = response.json()
        for answer in answers if isinstance(answers, list) else [answers]:
            assert isinstance(answer, dict), answers
            assert_acp_response(answer, methods.get(json.dumps(answer.get("id"))))
    return response


def new_session() -> str:
    return f"sess_{uuid.uuid4().hex}"


def rpc(api: Api, method: str, params: dict | None = None, request_id=1) -> dict:
    """Sends one request and returns its JSON-RPC response, which always comes with HTTP 200."""
    body = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        body["params"] = params
    response = acp_post(api, body)
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["jsonrpc"] == "2.0"
    assert answer["id"] == request_id
    return answer


def result(api: Api, method: str, **params):
    answer = rpc(api, method, params)
    assert "error" not in answer, answer
    return answer["result"]


def error(api: Api, method: str, **params) -> dict:
    answer = rpc(api, method, params)
    assert "result" not in answer, answer
    return answer["error"]


def create(api: Api, session: str, command: str, *args: str, **params) -> str:
    """Creates a terminal; the client's cleanup releases it after the test."""
    created = result(api, "terminal/create", sessionId=session, command=command, args=list(args), **params)
    api.created.append(created["terminalId"])
    return created["terminalId"]


def server_error_code(answer: dict) -> str:
    assert answer["code"] == -32000, answer
    assert answer["message"] == "Server error"
    return answer["data"]["code"]


@pytest.fixture
def session() -> str:
    return new_session()


# The methods


def test_create_output_wait_for_exit_report_the_exit_code(alice, session):
    """A command runs at once; wait_for_exit answers its exit code and output shows what it printed."""
    terminal = create(alice, session, "sh", "-c", "echo hi; exit 3")

    assert result(alice, "terminal/wait_for_exit", sessionId=session, terminalId=terminal) == {
        "exitCode": 3, "signal": None,
    }
    output = result(alice, "terminal/output", sessionId=session, terminalId=terminal)
    assert "hi" in output["output"]
    assert output["truncated"] is False
    assert output["exitStatus"] == {"exitCode": 3, "signal": None}
    assert set(output) == {"output", "truncated", "exitStatus"}


def test_create_passes_env_and_cwd_and_takes_meta(alice, session):
    """env's {name, value} pairs reach the command, cwd is its directory, and _meta (any keys) is taken."""
    terminal = create(
        alice, session, "sh", "-c", 'echo "greeting=$GREETING"; pwd',
        env=[{"name": "GREETING", "value": "hello"}], cwd="/tmp", _meta={"client": "test"},
    )
    result(alice, "terminal/wait_for_exit", sessionId=session, terminalId=terminal)
    output = result(alice, "terminal/output", sessionId=session, terminalId=terminal)["output"]
    assert "greeting=hello" in output
    assert "/tmp" in output.splitlines()[-1]


@pytest.mark.parametrize("method,params,name,meant", [
    ("terminal/create", {"command": "true", "cwdir": "/nonexistent"}, "cwdir", "cwd"),
    ("terminal/create", {"command": "true", "output_byte_limit": 10}, "output_byte_limit", "outputByteLimit"),
    ("terminal/output", {"terminalId": "x", "terminal_id": "x"}, "terminal_id", "terminalId"),
    ("terminal/kill", {"terminalId": "x", "signal": "SIGKILL"}, "signal", None),
], ids=["cwdir", "output_byte_limit", "terminal_id", "signal"])
def test_unknown_params_are_invalid_params_naming_the_one_meant(alice, session, orm, method, params, name, meant):
    """A parameter the method's schema does not name is -32602 Invalid params naming it and the parameter meant,
    and nothing is done (no terminal starts)."""
    from terminals.models import TerminalSession

    before = TerminalSession.objects.filter(session_id=session).count()
    answer = error(alice, method, sessionId=session, **params)
    assert answer["code"] == -32602 and answer["message"] == "Invalid params", answer
    assert answer["data"]["field"] == name and repr(name) in answer["data"]["message"], answer
    if meant is not None:
        assert f"did you mean {meant!r}?" in answer["data"]["message"], answer
    assert "_meta" in answer["data"]["accepted"], answer
    assert TerminalSession.objects.filter(session_id=session).count() == before


def test_output_has_exit_status_only_once_exited(alice, session):
    """A running command's output has no exitStatus; after kill it has one and the terminal stays readable."""
    terminal = create(alice, session, "sleep", "30")
    running = result(alice, "terminal/output", sessionId=session, terminalId=terminal)
    assert "exitStatus" not in running

    assert result(alice, "terminal/kill", sessionId=session, terminalId=terminal) == {}
    killed = result(alice, "terminal/output", sessionId=session, terminalId=terminal)
    assert killed["exitStatus"] == {"exitCode": None, "signal": "SIGKILL"}


def test_output_byte_limit_keeps_the_newest_whole_characters(alice, session):
    """With outputByteLimit 10, output is the newest bytes cut at a character boundary, and truncated."""
    terminal = create(alice, session, "printf", "a" + "€" * 20, outputByteLimit=10)
    result(alice, "terminal/wait_for_exit", sessionId=session, terminalId=terminal)
    output = result(alice, "terminal/output", sessionId=session, terminalId=terminal)
    # 10 bytes end inside a 3-byte "€": the partial one is dropped, not replaced.
    assert output["output"] == "€€€"
    assert len(output["output"].encode()) <= 10
    assert output["truncated"] is True


def test_output_is_plain_text_as_a_terminal_shows_it(alice, session):
    """output has no escape sequences, shows a redrawn line's final state, and ends lines with \\n alone."""
    script = r"printf '\033[1;31mred\033[0m\n10%%\r50%%\rdone\n\033]0;title\007plain\n'"
    terminal = create(alice, session, "sh", "-c", script)
    result(alice, "terminal/wait_for_exit", sessionId=session, terminalId=terminal)
    output = result(alice, "terminal/output", sessionId=session, terminalId=terminal)
    assert output["output"] == "red\ndone\nplain\n"
    assert output["truncated"] is False


def test_output_byte_limit_keeps_whole_lines_of_the_bytes_kept(alice, session):
    """The terminal keeps the newest outputByteLimit bytes; output shows them as plain text from the first whole
    line, so a colour code the cut split never shows. Each line is 16 bytes as printed; 40 keep a part of line 1."""
    terminal = create(alice, session, "sh", "-c", r"for i in 1 2 3; do printf '\033[32mline %s\033[0m\n' $i; done",
                      outputByteLimit=40)
    result(alice, "terminal/wait_for_exit", sessionId=session, terminalId=terminal)
    output = result(alice, "terminal/output", sessionId=session, terminalId=terminal)
    assert output["output"] == "line 2\nline 3\n"
    assert output["truncated"] is True


def test_timeout_recipe_kills_reads_and_releases(alice, session):
    """Seed 003's timeout: a timer beats wait_for_exit, then kill, output, wait_for_exit and release all answer."""
    terminal = create(alice, session, "sleep", "30")
    params = {"sessionId": session, "terminalId": terminal}
    waited, exited, expired = {}, threading.Event(), threading.Event()

    def wait_for_exit():
        waited["answer"] = rpc(alice, "terminal/wait_for_exit", params, request_id="wait")
        exited.set()

    waiter = threading.Thread(target=wait_for_exit, daemon=True)
    waiter.start()
    timer = threading.Timer(0.5, expired.set)
    timer.start()
    assert expired.wait(timeout=10) is True
    assert exited.is_set() is False

    assert result(alice, "terminal/kill", **params) == {}
    final = result(alice, "terminal/output", **params)
    assert final["exitStatus"] == {"exitCode": None, "signal": "SIGKILL"}
    assert exited.wait(timeout=15) is True
    waiter.join(timeout=5)
    assert waited["answer"]["result"] == {"exitCode": None, "signal": "SIGKILL"}
    assert result(alice, "terminal/wait_for_exit", **params) == {"exitCode": None, "signal": "SIGKILL"}

    assert result(alice, "terminal/release", **params) == {}
    for method in ("terminal/output", "terminal/kill", "terminal/wait_for_exit", "terminal/release"):
        assert server_error_code(error(alice, method, **params)) == "TERMINAL_INACTIVE", method


def test_release_ends_a_running_command(alice, session):
    """release ends a command still running; the terminal is listed as ended, no longer active."""
    terminal = create(alice, session, "sleep", "30")
    assert result(alice, "terminal/release", sessionId=session, terminalId=terminal) == {}
    listed = alice.get("/api/terminals", params={"status": "all", "sessionId": session}).json()["data"]["terminals"]
    assert [(item["terminalId"], item["status"]) for item in listed] == [(terminal, "killed")]
    assert listed[0]["released"] is not None


@pytest.fixture(scope="module")
def short_wait(django_db_setup, keys):
    """An embedded server of its own whose longest wait is SHORT_WAIT_MS."""
    server = start_embedded(TERMINALS_MAX_WAIT_MS=str(SHORT_WAIT_MS))
    api = Api(server.url, keys["alice"])
    yield api
    api.cleanup()
    server.stop()


def test_wait_for_exit_past_the_server_maximum_answers_timeout(short_wait, session):
    """wait_for_exit gives up after MAX_WAIT_MS with -32000 TIMEOUT; the command keeps running."""
    terminal = create(short_wait, session, "sleep", "30")
    answer = error(short_wait, "terminal/wait_for_exit", sessionId=session, terminalId=terminal)
    assert server_error_code(answer) == "TIMEOUT"
    assert answer["data"]["details"] == {"timeoutMs": SHORT_WAIT_MS}
    assert "exitStatus" not in result(short_wait, "terminal/output", sessionId=session, terminalId=terminal)


# Batches and notifications


def test_batch_answers_each_call_on_its_own(alice, session):
    """In a batch, failures answer alone, notifications get nothing, and the successes still run."""
    batch = [
        {"jsonrpc": "2.0", "id": 1, "method": "terminal/create", "params": {"sessionId": session, "command": "true"}},
        {"jsonrpc": "2.0", "id": 2, "method": "terminal/output",
         "params": {"sessionId": session, "terminalId": str(uuid.uuid4())}},
        {"jsonrpc": "2.0", "id": 3, "method": "terminal/launch", "params": {}},
        {"jsonrpc": "2.0", "method": "terminal/kill", "params": {"sessionId": session, "terminalId": "nothing"}},
        {"jsonrpc": "2.0", "id": 4, "method": "terminal/create", "params": {"sessionId": session}},
        7,
    ]
    response = acp_post(alice, batch)
    assert response.status_code == 200
    answers = response.json()
    assert [answer["id"] for answer in answers] == [1, 2, 3, 4, None]
    created, unknown, missing, invalid, not_a_request = answers
    alice.created.append(created["result"]["terminalId"])
    assert server_error_code(unknown["error"]) == "TERMINAL_NOT_FOUND"
    assert missing["error"]["code"] == -32601
    assert invalid["error"]["code"] == -32602
    assert invalid["error"]["data"]["field"] == "command"
    assert not_a_request["error"]["code"] == -32600


def test_batch_of_notifications_gets_no_content(alice, session):
    """Notifications are carried out but never answered: a batch of them gets HTTP 204."""
    terminal = create(alice, session, "sleep", "30")
    params = {"sessionId": session, "terminalId": terminal}
    response = acp_post(alice, [
        {"jsonrpc": "2.0", "method": "terminal/kill", "params": params},
        {"jsonrpc": "2.0", "method": "terminal/nothing"},
    ])
    assert response.status_code == 204
    assert response.content == b""
    assert result(alice, "terminal/output", **params)["exitStatus"]["signal"] == "SIGKILL"


def test_single_notification_gets_no_content(alice):
    """A notification is never answered, not even when it fails."""
    response = acp_post(alice, {"jsonrpc": "2.0", "method": "terminal/create", "params": {"sessionId": "s"}})
    assert response.status_code == 204
    assert response.content == b""


@pytest.mark.parametrize("size", [0, 101])
def test_empty_or_oversized_batch_is_an_invalid_request(alice, size):
    """An empty batch, or one of more than 100 calls, is one Invalid Request and runs nothing."""
    response = acp_post(alice, [{"jsonrpc": "2.0", "id": number, "method": "terminal/nothing"}
                                       for number in range(size)])
    assert response.status_code == 200
    answer = response.json()
    assert answer["id"] is None
    assert answer["error"]["code"] == -32600


# Refusals


def test_unknown_method_is_method_not_found(alice):
    """A method outside terminal/* answers -32601 naming it."""
    answer = error(alice, "terminal/launch", sessionId="s")
    assert answer == {"code": -32601, "message": "Method not found", "data": {"method": "terminal/launch"}}


CREATE = {"sessionId": "sess_params", "command": "true"}
TERMINAL = {"sessionId": "sess_params", "terminalId": str(uuid.uuid4())}


@pytest.mark.parametrize(
    "method, params, field",
    [
        ("terminal/create", {"sessionId": "sess_params"}, "command"),
        ("terminal/create", {**CREATE, "command": ""}, "command"),
        ("terminal/create", {**CREATE, "command": ["true"]}, "command"),
        ("terminal/create", {"command": "true"}, "sessionId"),
        ("terminal/create", {**CREATE, "sessionId": "s" * 201}, "sessionId"),
        ("terminal/create", {**CREATE, "sessionId": "sess\x00"}, "sessionId"),
        ("terminal/create", {**CREATE, "args": "-c"}, "args"),
        ("terminal/create", {**CREATE, "args": ["-c", 1]}, "args"),
        ("terminal/create", {**CREATE, "env": {"A": "1"}}, "env"),
        ("terminal/create", {**CREATE, "env": [{"name": "A"}]}, "env"),
        ("terminal/create", {**CREATE, "env": [{"name": "A", "value": 1}]}, "env"),
        ("terminal/create", {**CREATE, "env": [{"name": "A", "value": "1", "extra": "x"}]}, "env"),
        ("terminal/create", {**CREATE, "cwd": "relative/dir"}, "cwd"),
        ("terminal/create", {**CREATE, "command": "tr\x00ue"}, "command"),
        ("terminal/create", {**CREATE, "args": ["-c", "\x00"]}, "args"),
        ("terminal/create", {**CREATE, "env": [{"name": "A", "value": "1\x00"}]}, "env"),
        ("terminal/create", {**CREATE, "env": [{"name": "A\x00", "value": "1"}]}, "env"),
        ("terminal/create", {**CREATE, "cwd": "/tmp\x00"}, "cwd"),
        ("terminal/create", {**CREATE, "outputByteLimit": 10.0}, "outputByteLimit"),
        ("terminal/create", {**CREATE, "outputByteLimit": 2**64 - 1}, "outputByteLimit"),
        ("terminal/output", {**TERMINAL, "terminalId": "\x00"}, "terminalId"),
        ("terminal/create", {**CREATE, "outputByteLimit": 0}, "outputByteLimit"),
        ("terminal/create", {**CREATE, "outputByteLimit": "10"}, "outputByteLimit"),
        ("terminal/create", {**CREATE, "outputByteLimit": True}, "outputByteLimit"),
        ("terminal/output", {"sessionId": "sess_params"}, "terminalId"),
        ("terminal/output", {**TERMINAL, "terminalId": 5}, "terminalId"),
        ("terminal/release", {"terminalId": TERMINAL["terminalId"]}, "sessionId"),
        ("terminal/kill", ["sess_params", TERMINAL["terminalId"]], "params"),
    ],
)
def test_invalid_params_name_the_field(alice, method, params, field):
    """Malformed params answer -32602 with data.field naming the parameter and a message."""
    answer = rpc(alice, method, params)["error"]
    assert answer["code"] == -32602
    assert answer["message"] == "Invalid params"
    assert answer["data"]["field"] == field
    assert answer["data"]["message"]


def test_service_refusal_is_a_server_error_with_the_rest_code(alice, session):
    """A cwd that does not exist is the service's INVALID_INPUT, answered as -32000 with its details."""
    answer = error(alice, "terminal/create", sessionId=session, command="true", cwd="/no/such/directory")
    assert server_error_code(answer) == "INVALID_INPUT"
    assert answer["data"]["message"]
    assert isinstance(answer["data"]["details"], dict)


@pytest.mark.parametrize(
    "body",
    [b'{"jsonrpc": "2.0", "id": 1,', b"", b'{"jsonrpc": "2.0", "id": NaN}', b"\xff\xfe",
     b"[" * 100_000 + b"]" * 100_000],
    ids=["cut", "empty", "nan", "not-utf8", "too-deep"],
)
def test_malformed_json_is_a_parse_error(alice, body):
    """A body that is not JSON answers -32700 with id null and HTTP 200, never a 500."""
    response = acp_post(alice, data=body, headers={"Content-Type": "application/json"})
    assert response.status_code == 200
    answer = response.json()
    assert answer["id"] is None
    assert answer["error"]["code"] == -32700


def audit_rows_of(api: Api) -> int:
    return AuditEvent.objects.filter(key_prefix=api.key.split(".")[0], action="acp").count()


@pytest.fixture
def fresh(orm, server):
    """A client with a key of its own, so its audit rows can be counted."""
    _, key = make_key()
    return Api(server.url, key)


@pytest.mark.parametrize(
    "body, code",
    [
        (b'{"jsonrpc": "2.0", "id": 1e400, "method": "terminal/output", "params": {}}', -32700),
        (b'{"jsonrpc": "2.0", "id": -1e400, "method": "terminal/output"}', -32700),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "terminal/output", "params": {"_meta": {"x": 1e999}}}', -32700),
        (b'{"jsonrpc": "2.0", "id": 123456789012345678901234567890, "method": "terminal/output"}', -32700),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "terminal/output", "params": {"n": ' + b"9" * 5000 + b"}}", -32700),
        (rb'{"jsonrpc": "2.0", "id": "\ud800", "method": "terminal/output"}', -32700),
        (rb'{"jsonrpc": "2.0", "id": 1, "method": "terminal/\udfff"}', -32700),
        (rb'{"jsonrpc": "2.0", "id": 1, "method": "terminal/output", "params": {"\udc00": 1}}', -32700),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "terminal/output", "params": {"_meta": '
         + b"[" * 200 + b"]" * 200 + b"}}", -32700),
        (b'{"jsonrpc": "2.0", "id": 1.5, "method": "terminal/output"}', -32600),
        (b'{"jsonrpc": "2.0", "id": 2.0, "method": "terminal/output"}', -32600),
        (b'{"jsonrpc": "2.0", "id": 9223372036854775808, "method": "terminal/output"}', -32600),
    ],
    ids=["id-1e400", "id-minus-1e400", "meta-1e999", "id-huge-integer", "integer-of-5000-digits", "id-lone-surrogate",
         "method-lone-surrogate", "key-lone-surrogate", "nested-200-deep", "id-fraction", "id-float", "id-past-int64"],
)
def test_values_the_service_cannot_keep_are_refused_and_audited(fresh, body, code):
    """Non-finite or out-of-range numbers, lone surrogates and deep nesting answer a JSON-RPC error with id null."""
    before = audit_rows_of(fresh)
    response = acp_post(fresh, data=body, headers={"Content-Type": "application/json"})
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["id"] is None
    assert answer["error"]["code"] == code
    assert answer["error"]["data"]["message"]
    assert audit_rows_of(fresh) == before + 1
    assert error(fresh, "terminal/launch")["code"] == -32601  # and the service keeps answering


def test_audit_row_keeps_a_safe_rendering_of_method_and_id(fresh, orm):
    """The audit stores method and id cut short, with keys masked and no NUL, whatever the client sent."""
    request_id, method = "tk_0123abcd.s3cretpart\x00" + "i" * 5000, "terminal/" + "m" * 5000
    answer = rpc(fresh, method, {}, request_id=request_id)
    assert answer["error"]["code"] == -32601
    row = AuditEvent.objects.filter(key_prefix=fresh.key.split(".")[0], action="acp").latest("id")
    assert row.outcome == "METHOD_NOT_FOUND"
    assert row.details["id"].startswith("tk_0123abcd.[redacted]\ufffd")
    assert "s3cret" not in row.details["id"]
    assert len(row.details["id"]) == len(row.details["method"]) == 200
    assert row.details["method"] == method[:200]


class Raw(str):
    """JSON text put into a generated body as it is: numbers Python cannot hold, deep nesting."""


def to_json(value) -> str:
    """The body's text; json.dumps writes lone surrogates as \\ud800 escapes and non-BMP characters as pairs."""
    if isinstance(value, Raw):
        return str(value)
    if isinstance(value, dict):
        return "{" + ",".join(f"{json.dumps(key)}:{to_json(item)}" for key, item in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(to_json(item) for item in value) + "]"
    return json.dumps(value)


TEXTS = st.one_of(
    st.text(max_size=20),
    st.text(st.characters(min_codepoint=0x10000), min_size=1, max_size=5),  # outside the BMP
    st.text(st.characters(categories=["Cs"]), min_size=1, max_size=3),  # lone surrogates
)
OUT_OF_RANGE = st.sampled_from([Raw("1e400"), Raw("-1e400"), Raw("1e999999"), Raw("9" * 30), Raw("-" + "9" * 20),
                                Raw("18446744073709551616"), Raw("1" * 5000)])
NUMBERS = st.one_of(st.integers(), st.floats(allow_nan=False, allow_infinity=False), OUT_OF_RANGE)
DEEP = st.integers(min_value=1, max_value=300).map(lambda depth: Raw("[" * depth + "]" * depth))
SCALARS = st.one_of(TEXTS, NUMBERS, st.booleans(), st.none(), DEEP)
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXTS, inner, max_size=3),
                      max_leaves=8)
# outputByteLimit is never valid, so no generated call creates a terminal.
BAD_LIMITS = st.one_of(st.integers(max_value=0), st.integers(min_value=2**31), st.floats(), OUT_OF_RANGE, TEXTS,
                       st.booleans(), st.lists(st.integers(), max_size=2))
METHODS = ["terminal/output", "terminal/wait_for_exit", "terminal/kill", "terminal/release", "terminal/launch"]


@st.composite
def acp_bodies(draw) -> str:
    """A request with an id, each member well-formed or not; it can only be answered with an error."""
    method = draw(st.sampled_from([*METHODS, "terminal/create"]) | VALUES)
    if method == "terminal/create":
        params = draw(st.fixed_dictionaries(
            {"outputByteLimit": BAD_LIMITS},
            optional={"sessionId": TEXTS | VALUES, "command": TEXTS | VALUES, "args": st.lists(TEXTS) | VALUES,
                      "env": st.lists(st.fixed_dictionaries({"name": TEXTS, "value": TEXTS | VALUES})) | VALUES,
                      "cwd": TEXTS | VALUES, "_meta": VALUES},
        ))
    else:
        # An unknown terminal: even a well-formed call of a known method is TERMINAL_NOT_FOUND.
        params = draw(st.fixed_dictionaries(
            {}, optional={"sessionId": TEXTS | VALUES, "terminalId": st.uuids().map(str) | VALUES, "_meta": VALUES},
        ) | VALUES)
    request = {
        "jsonrpc": draw(st.just("2.0") | VALUES),
        "id": draw(st.integers(min_value=-(2**63), max_value=2**63 - 1) | st.text(max_size=10) | VALUES),
        "method": method,
        "params": params,
    }
    return to_json(request)


@settings(derandomize=True, database=None, deadline=None, max_examples=150,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(body=acp_bodies())
def test_generated_acp_bodies_get_a_json_rpc_error(fresh, body):
    """Any body with non-BMP or surrogate strings, deep nesting, out-of-range numbers, floats for integers or
    wrong types gets HTTP 200, a JSON-RPC error valid against the ACP schema, and exactly one audit row."""
    before = audit_rows_of(fresh)
    response = acp_post(fresh, data=body.encode("utf-8"), headers={"Content-Type": "application/json"})
    assert response.status_code == 200, (body, response.text)
    answer = response.json()
    assert isinstance(answer, dict) and "error" in answer, (body, answer)
    assert audit_rows_of(fresh) == before + 1, body
    assert error(fresh, "terminal/launch")["code"] == -32601  # the service still answers
    assert audit_rows_of(fresh) == before + 2


def test_body_over_the_upload_limit_is_an_invalid_request(alice):
    """A body over Django's upload limit answers -32600 rather than a 500."""
    padded = {"jsonrpc": "2.0", "id": 1, "method": "terminal/output", "padding": "x" * 3_000_000}
    response = acp_post(alice, padded)
    assert response.status_code == 200
    answer = response.json()
    assert answer["error"]["code"] == -32600
    assert "larger than" in answer["error"]["data"]["message"]


@pytest.mark.parametrize(
    "payload, answered_id",
    [
        ({"id": 1, "method": "terminal/output", "params": {}}, 1),
        ({"jsonrpc": "1.0", "id": 1, "method": "terminal/output", "params": {}}, 1),
        ({"jsonrpc": "2.0", "id": 1, "method": 5}, 1),
        ({"jsonrpc": "2.0", "id": 1, "method": "terminal/output", "params": "sess"}, 1),
        ({"jsonrpc": "2.0", "id": {"nested": 1}, "method": "terminal/output"}, None),
        ({"jsonrpc": "2.0", "method": 5}, None),
        (42, None),
        ("terminal/output", None),
    ],
)
def test_malformed_request_is_an_invalid_request(alice, payload, answered_id):
    """A request that is not a JSON-RPC 2.0 request object answers -32600, even without an id."""
    response = acp_post(alice, payload)
    assert response.status_code == 200
    answer = response.json()
    assert answer["error"]["code"] == -32600
    assert answer["id"] == answered_id


def test_unauthenticated_call_gets_the_rest_401_envelope(anonymous):
    """Without an API key the endpoint answers the REST API's 401 envelope, not JSON-RPC."""
    response = acp_post(anonymous, {"jsonrpc": "2.0", "id": 1, "method": "terminal/output", "params": {}})
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "UNAUTHORIZED"


# Throttling

THROTTLE_RATES = {"TERMINALS_THROTTLE_RATE": "6/min", "TERMINALS_CREATE_THROTTLE_RATE": "2/min"}


@pytest.fixture(scope="module")
def throttled_server(django_db_setup):
    server = start_embedded(**THROTTLE_RATES)
    yield server
    server.stop()


@pytest.fixture
def throttled(orm, throttled_server):
    """A client with a fresh key on the throttled server: 6 requests and 2 creations a minute."""
    _, key = make_key()
    api = Api(throttled_server.url, key)
    yield api
    api.cleanup()


def rate_limited(answer: dict) -> float:
    """The seconds to wait that a RATE_LIMITED server error carries."""
    assert server_error_code(answer) == "RATE_LIMITED", answer
    retry_after = answer["data"]["details"]["retryAfter"]
    assert 0 < retry_after <= 60
    assert "retry in" in answer["data"]["message"]
    return retry_after


def test_acp_and_rest_creations_share_one_count(throttled, orm, session):
    """terminal/create counts against the REST creation rate: ACP cannot create past it, nor REST after it."""
    throttled.create(shell="/bin/sh")
    batch = [{"jsonrpc": "2.0", "id": number, "method": "terminal/create",
              "params": {"sessionId": session, "command": "sleep", "args": ["30"]}} for number in (1, 2)]
    created, refused = acp_post(throttled, batch).json()
    throttled.created.append(created["result"]["terminalId"])
    rate_limited(refused["error"])
    assert throttled.post("/api/terminals", json={"shell": "/bin/sh"}).status_code == 429

    listed = throttled.get("/api/terminals", params={"status": "all"}).json()["data"]["terminals"]
    assert sorted(item["terminalId"] for item in listed) == sorted(throttled.created)
    prefix = throttled.key.split(".")[0]
    refusal = AuditEvent.objects.get(key_prefix=prefix, action="acp", details__id=2)
    assert (refusal.outcome, refusal.details["method"]) == ("RATE_LIMITED", "terminal/create")
    assert refusal.terminal_id is None


def test_request_rate_is_answered_in_json_rpc(throttled, orm):
    """Past the request rate the endpoint answers a JSON-RPC RATE_LIMITED error with HTTP 200 and Retry-After."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "terminal/output", "params": {}}
    assert [acp_post(throttled, body).status_code for _ in range(6)] == [200] * 6
    response = acp_post(throttled, body)
    assert response.status_code == 200
    answer = response.json()
    assert answer["id"] is None
    assert 1 <= int(response.headers["Retry-After"]) <= 60
    assert rate_limited(answer["error"]) <= int(response.headers["Retry-After"])
    prefix = throttled.key.split(".")[0]
    assert AuditEvent.objects.filter(key_prefix=prefix, action="acp", outcome="RATE_LIMITED").count() == 1


# Isolation


def test_other_users_terminal_answers_like_an_unknown_one(alice, bob, session):
    """bob gets TERMINAL_NOT_FOUND for every method on alice's terminal, and it keeps running."""
    terminal, nobody = create(alice, session, "sleep", "30"), str(uuid.uuid4())
    unknown = error(bob, "terminal/output", sessionId=session, terminalId=nobody)["data"]
    for method in ("terminal/output", "terminal/wait_for_exit", "terminal/kill", "terminal/release"):
        answer = error(bob, method, sessionId=session, terminalId=terminal)
        assert server_error_code(answer) == "TERMINAL_NOT_FOUND", method
        assert answer["data"] == {**unknown, "message": unknown["message"].replace(nobody, terminal)}
    assert "exitStatus" not in result(alice, "terminal/output", sessionId=session, terminalId=terminal)


def test_other_session_id_answers_like_an_unknown_terminal(alice, session):
    """A terminal answers only to the sessionId it was created with."""
    terminal = create(alice, session, "sleep", "30")
    for method in ("terminal/output", "terminal/wait_for_exit", "terminal/kill", "terminal/release"):
        answer = error(alice, method, sessionId=new_session(), terminalId=terminal)
        assert server_error_code(answer) == "TERMINAL_NOT_FOUND", method
    assert "exitStatus" not in result(alice, "terminal/output", sessionId=session, terminalId=terminal)


def test_terminals_list_filters_by_session_id(alice, session):
    """GET /api/terminals?sessionId= lists exactly the terminals created in that session."""
    mine = {create(alice, session, "sleep", "30") for _ in range(2)}
    other = new_session()
    create(alice, other, "sleep", "30")
    listed = alice.get("/api/terminals", params={"sessionId": session}).json()["data"]
    assert {item["terminalId"] for item in listed["terminals"]} == mine
    assert {item["sessionId"] for item in listed["terminals"]} == {session}
    assert listed["count"] == 2
    assert alice.get("/api/terminals", params={"sessionId": new_session()}).json()["data"]["count"] == 0
    assert alice.get("/api/terminals", params={"sessionId": "s" * 201}).status_code == 400


# Audit


def test_every_call_leaves_an_acp_audit_row(alice, orm, session):
    """Each call, refused ones included, is recorded as action "acp" with its method, id and outcome."""
    marker = uuid.uuid4().hex
    terminal = result(alice, "terminal/create", sessionId=session, command="true")["terminalId"]
    alice.created.append(terminal)
    rpc(alice, "terminal/output", {"sessionId": session, "terminalId": terminal}, request_id=f"{marker}-ok")
    rpc(alice, "terminal/output", {"sessionId": session, "terminalId": str(uuid.uuid4())}, request_id=f"{marker}-gone")
    rpc(alice, "terminal/launch", {}, request_id=f"{marker}-missing")
    rows = {row.details["id"]: row for row in AuditEvent.objects.filter(action="acp", details__id__startswith=marker)}
    assert {key: (row.details["method"], row.outcome) for key, row in rows.items()} == {
        f"{marker}-ok": ("terminal/output", "ok"),
        f"{marker}-gone": ("terminal/output", "TERMINAL_NOT_FOUND"),
        f"{marker}-missing": ("terminal/launch", "METHOD_NOT_FOUND"),
    }
    assert str(rows[f"{marker}-ok"].terminal_id) == terminal
    assert rows[f"{marker}-ok"].username.startswith("alice")
    created = AuditEvent.objects.filter(action="acp", terminal_id=terminal, details__method="terminal/create")
    assert [row.outcome for row in created] == ["ok"]
