"""Fuzzing the shapes of input every interface takes, on both deployments, with fixed examples (deterministic, a few
seconds each): every WebSocket frame shape never closes the connection (no 1011) and never leaves a ghost viewer;
every Accept and Content-Type header on every REST route never answers 5xx."""

from __future__ import annotations

import itertools
import json
import uuid

import pytest

from terminals.models import AuditEvent

from .client import Api
from .conftest import make_key
from .servers import wait_for
from .test_authorization_matrix import REQUESTS, api_routes
from .test_live import Live, run

# The WebSocket's frames

WRONG_VALUES = [None, True, False, 0, -1, 1.5, -1e308, 2**63 - 1, -(2**63), 2**64 - 1, "", "x", "SIGKILL\x00", [],
                [1, 2], {}, {"a": {"b": [None]}}, [[[[[[[[]]]]]]]]]
FIELDS = {"input": ["data"], "resize": ["cols", "rows"], "signal": ["signal"], "ack": ["offset"]}
NOT_FRAMES = ["{not json", "", " ", "[]", "null", "1", '"input"', "true", "NaN", '{"type": NaN}', "1" * 400,
              '{"type": "ack", "offset": 1' + "0" * 30 + "}", "[" * 200 + "]" * 200, '{"a":' * 100 + "1" + "}" * 100,
              '{"type": "input", "data": "\\ud800"}', '{"type": "input", "data": "x"} trailing', "\x00", "\ufeff{}"]


def frames() -> list[str | bytes]:
    """Every shape of frame, as sent: the type wrong, each known type with each field wrong, and non-frames."""
    shapes: list[str | bytes] = []
    for kind in (["input"], {"x": 1}, 1, 1.5, None, True, "", "INPUT", " input", "a" * 1000, ["input", "resize"]):
        shapes.append(json.dumps({"type": kind, "data": "x"}))
    shapes.append(json.dumps({"data": "echo no type\r"}))
    for kind, fields in FIELDS.items():
        for value in WRONG_VALUES:
            if kind == "input" and isinstance(value, str) and value:
                continue  # a string is input: it would be typed, not refused
            if kind == "ack" and isinstance(value, int):
                continue  # any whole number is a fine acknowledgement (clamped to what was sent)
            shapes.append(json.dumps({"type": kind, **{field: value for field in fields}}))
        if kind != "signal":  # a signal frame without its field is a SIGINT: fine, and it would end the program
            shapes.append(json.dumps({"type": kind}))  # every field missing
    shapes += NOT_FRAMES
    shapes += [frame.encode() for frame in NOT_FRAMES[:6]] + [b"\xff\xfe\x00", b'{"type": ["input"]}']
    return shapes


def viewers(api: Api, terminal: str) -> int:
    response = api.get(f"/api/terminals/{terminal}")
    assert response.status_code == 200, response.text
    return response.json()["data"]["viewers"]


@pytest.mark.parametrize("mode", ["interactive", "view"])
def test_no_frame_closes_the_connection_or_leaves_a_ghost_viewer(server, orm, mode):
    """After each frame a probe (an unknown type) must be answered, so the connection is still open and read;
    no frame may be answered INTERNAL_ERROR (a handler that broke); once the client leaves, the terminal's viewer
    count is back where it was and there is one detach row."""
    _, key = make_key(name="fuzz")
    api = Api(server.url, key)
    terminal = api.create(command="sleep", args=["600"])["terminalId"]
    before = viewers(api, terminal)
    shapes = frames()

    async def scenario():
        live = await Live.open(server.url, terminal, key, **({"mode": "view"} if mode == "view" else {}))
        answers = []
        for number, shape in enumerate(shapes):
            await live.ws.send(shape)
            probe = f"probe-{number}"
            await live.send(type=probe)
            seen = len(live.frames)
            await live.until(lambda live: any(probe in frame.get("message", "") for frame in live.frames[seen:]),
                             f"the answer to the probe after {shape!r:.80}")
            answers.append([frame for frame in live.frames[seen:] if frame["type"] == "error"])
        await live.close()
        return answers, live

    try:
        answers, live = run(scenario(), timeout=120)
        assert live.close_code is None
        broken = [(shape, answer) for shape, answer in zip(shapes, answers)
                  if any(frame["code"] == "INTERNAL_ERROR" for frame in answer)]
        assert broken == []
        wait_for(lambda: viewers(api, terminal) == before, 15, "the viewer count back to what it was")
        detached = wait_for(lambda: list(AuditEvent.objects.filter(terminal_id=uuid.UUID(terminal), action="detach")),
                            15, "the detach row")
        assert len(detached) == 1 and detached[0].details["closeCode"] in (1000, 1005)
    finally:
        api.cleanup()


# The REST routes' headers

ACCEPTS = ["text/plain", "text/html", "application/xml", "image/png", "*/*", "application/*", "text/*", "",
           "application/json; q=0", "application/x-asciicast", "text/event-stream", "application/vnd.oai.openapi",
           "garbage", "application/json;;;", "*/*;q=abc", "text/html, application/xhtml+xml;q=0.9, */*;q=0.8"]
CONTENT_TYPES = ["text/plain", "text/html", "application/xml", "application/x-www-form-urlencoded",
                 "multipart/form-data", "multipart/form-data; boundary=x", "application/json; charset=bogus",
                 "application/json; charset=latin-1", "application/json; charset=utf-16", "application/json;;;",
                 "", "garbage", "*/*", "application/octet-stream"]
ENDING = ("DELETE", "api/terminals/{pk}/kill")  # run last: they end the terminal the other requests reach


def rest_routes() -> list[tuple[str, str]]:
    """Every (path template, method) under /api/ from the URL configuration, those that end the terminal last."""
    found = [(path, method) for path, method in api_routes() if path.startswith("api/")]
    return sorted(found, key=lambda route: route[1] == "DELETE" or route[0].endswith("/kill"))


def body_for(path: str, method: str) -> bytes | None:
    if method != "POST":
        return None
    if path == "api/terminals":
        return json.dumps({"command": "true"}).encode()
    request = REQUESTS.get((path, method), {})
    return json.dumps(request.get("json", {})).replace("{marker}", "fuzz").encode()


@pytest.mark.parametrize("header", ["Accept", "Content-Type"])
def test_no_accept_or_content_type_answers_5xx_on_any_route(server, orm, header):
    """Every route under /api/, with and without a key, with every odd value of the header: never a 5xx."""
    _, key = make_key(name="fuzz-http")
    owner = Api(server.url, key)
    terminal = owner.create(command="sleep", args=["600"])["terminalId"]
    values = ACCEPTS if header == "Accept" else CONTENT_TYPES
    failures = []
    try:
        for (path, method), value, keyed in itertools.product(rest_routes(), values, (True, False)):
            url = "/" + path.replace("{pk}", terminal).replace("{command_id}", str(uuid.uuid4()))
            api = owner if keyed else Api(server.url, None)
            data = body_for(path, method)
            headers = {header: value}
            if header == "Accept" and data is not None:
                headers["Content-Type"] = "application/json"
            response = api.request(method, url, data=data, headers=headers, stream=True)
            status = response.status_code
            if status == 201 and path == "api/terminals":
                owner.created.append(response.json()["data"]["terminalId"])
            response.close()
            if status >= 500 and not (path.startswith("api/health") and status == 503):
                failures.append((method, url, header, value, keyed, status))
    finally:
        owner.cleanup()
    assert failures == []
