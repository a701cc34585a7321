"""The split deployment when Redis goes away: fast 503s in the error envelope, and service back by itself after.

The tests share a deployment of their own (its own redis-server, two web processes, one worker), so stopping its
Redis affects no other test's servers. Redis comes back empty, on the same port, and no service process is restarted.
"""

from __future__ import annotations

import json
import signal
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from .client import Api
from .servers import start_redis, start_split, wait_for

OUTAGE_SECONDS = 30.0  # how long Redis stays dead: the outage the promise names
FREEZE_SECONDS = 4.0  # how long Redis stays frozen (SIGSTOP) in the second test
WORKER_TIMEOUT_MS = 2000  # how long a web process waits for a worker's reply (TERMINALS_WORKER_TIMEOUT_MS)
ANSWER_WITHIN = 3.0  # every request while Redis is dead is answered within this many seconds
# A frozen Redis accepts connections and never answers, so only timeouts end a request: the throttle cache's
# socket timeout (1 s, once; then the cache is skipped) and the worker timeout, plus slack for a busy machine.
FROZEN_ANSWER_WITHIN = 1 + WORKER_TIMEOUT_MS / 1000 + 2
RECOVERY_WITHIN = 15.0  # the whole service works again this soon after Redis is back


@pytest.fixture(scope="module")
def deployment(django_db_setup):
    server = start_split(webs=2, workers=1, TERMINALS_WORKER_TIMEOUT_MS=str(WORKER_TIMEOUT_MS))
    yield server
    server.stop()


@pytest.fixture
def outage_server(deployment):
    """The module's deployment, with its Redis running again after each test, however the test ended."""
    yield deployment
    if deployment.redis.alive():
        deployment.redis.process.send_signal(signal.SIGCONT)
    else:
        deployment.redis, _ = start_redis(_redis_port(deployment))


def _redis_port(server) -> int:
    return int(server.redis_url.rsplit(":", 1)[1].split("/")[0])


def _call(url: str, key: str, method: str, path: str, body=None) -> tuple[requests.Response, float]:
    """One request on a connection of its own (the probes run in threads); returns the answer and its time."""
    started = time.monotonic()
    response = requests.request(method, f"{url}{path}", json=body, headers={"X-API-Key": key}, timeout=30)
    return response, time.monotonic() - started


def _assert_unavailable(response: requests.Response, what: str) -> None:
    """503 WORKER_UNAVAILABLE in the documented envelope."""
    assert response.status_code == 503, f"{what}: {response.status_code} {response.text}"
    body = response.json()
    assert set(body) == {"success", "error"} and body["success"] is False, f"{what}: {body}"
    error = body["error"]
    assert set(error) == {"code", "message", "details"}, f"{what}: {body}"
    assert error["code"] == "WORKER_UNAVAILABLE", f"{what}: {body}"
    assert isinstance(error["message"], str) and error["message"] and isinstance(error["details"], dict), body


def _probe(urls: list[str], key: str, terminal_id: str, limit: float, timings: list[float]) -> None:
    """Every endpoint on every web process at once, while Redis is away: each answers within limit, never 500.

    Creating, typing and reading need a worker, so they answer 503 WORKER_UNAVAILABLE; health answers 503
    degraded. The list reads only the database and still answers 200: the throttle fails open (throttling.py).
    """
    calls = []
    for url in urls:
        calls += [
            (url, "POST", "/api/terminals", {"shell": "/bin/sh"}),
            (url, "POST", f"/api/terminals/{terminal_id}/input", {"input": "echo during"}),
            (url, "GET", f"/api/terminals/{terminal_id}/output", None),
            (url, "GET", "/api/health", None),
            (url, "GET", "/api/terminals", None),
        ]
    with ThreadPoolExecutor(len(calls)) as pool:
        answers = list(pool.map(lambda call: _call(call[0], key, *call[1:]), calls))
    for (url, method, path, _), (response, took) in zip(calls, answers):
        what = f"{method} {url}{path}"
        timings.append(took)
        assert took < limit, f"{what} took {took:.2f} s"
        if path == "/api/health":
            assert response.status_code == 503, f"{what}: {response.text}"
            data = response.json()["data"]
            assert data["status"] == "degraded", f"{what}: {data}"
            assert data["worker"]["ok"] is False and data["worker"]["error"] == "WORKER_UNAVAILABLE", data
            assert data["database"]["ok"] is True
        elif path == "/api/terminals" and method == "GET":
            assert response.status_code == 200, f"{what}: {response.text}"
            listed = {row["terminalId"]: row["status"] for row in response.json()["data"]["terminals"]}
            assert listed.get(terminal_id) == "active"  # its worker still beats: nothing is marked lost
        else:
            _assert_unavailable(response, what)


def _events(response: requests.Response):
    """The events of a text/event-stream response as they arrive: (name, data)."""
    name = None
    for line in response.iter_lines(chunk_size=1, decode_unicode=True):
        if line.startswith("event: "):
            name = line[len("event: "):]
        elif line.startswith("data: ") and name:
            yield name, json.loads(line[len("data: "):])
            name = None


def _recovered(apis: list[Api], old: str) -> bool:
    """Whether every web process creates a terminal, types into it and reads it, reaches the terminal made
    before the outage, and streams its live output; False while creating still answers 503."""
    for api in apis:
        response = api.post("/api/terminals", json={"shell": "/bin/bash"})
        if response.status_code == 503:
            return False
        assert response.status_code == 201, response.text
        fresh = response.json()["data"]["terminalId"]
        api.created.append(fresh)
        assert api.run(fresh, "echo fresh-$((20+3))") == "fresh-23"
        assert api.run(old, "echo old-$((40+2))") == "old-42"
        with api.get(f"/api/terminals/{old}/output", params={"follow": "true"}, stream=True,
                     timeout=(5, 10)) as stream:
            events = _events(stream)
            assert next(events)[0] == "attached"
            api.send(old, "echo live-$((5+5))")
            text = ""
            for name, data in events:
                text += data.get("data", "") if name == "output" else ""
                if "live-10" in text:
                    break
            assert "live-10" in text
    return True


def test_requests_fail_fast_while_redis_is_down_and_service_resumes_when_it_returns(outage_server, keys):
    """Redis killed for OUTAGE_SECONDS: every web process answers at once (503 WORKER_UNAVAILABLE, health 503,
    the list 200); Redis back, empty, on the same port: creating, typing and
    reading work again, the terminal made before the outage included, with no service process restarted."""
    server = outage_server
    apis = [Api(url, keys["alice"]) for url in server.urls]
    old = apis[0].create(shell="/bin/bash")["terminalId"]
    assert apis[1].run(old, "echo before") == "before"
    pids = {process.name: process.pid for process in server.processes}

    server.redis.stop(signal.SIGKILL)
    down = time.monotonic()
    timings: list[float] = []

    def outage_over() -> bool:
        _probe(server.urls, keys["alice"], old, ANSWER_WITHIN, timings)
        return time.monotonic() - down >= OUTAGE_SECONDS

    wait_for(outage_over, OUTAGE_SECONDS + 60, "the outage to last its time", interval=1.0)
    assert all(process.alive() for process in server.processes)

    server.redis, _ = start_redis(_redis_port(server))
    back = time.monotonic()
    wait_for(lambda: _recovered(apis, old), RECOVERY_WITHIN, "service to resume after Redis returned", interval=0.2)
    recovery = time.monotonic() - back
    assert {process.name: process.pid for process in server.processes} == pids
    assert all(process.alive() for process in server.processes)
    print(f"\nRedis dead {OUTAGE_SECONDS:g} s: {len(timings)} answers, slowest {max(timings):.3f} s; "
          f"all working {recovery:.2f} s after Redis returned")
    for api in apis:
        api.cleanup()


def test_requests_fail_fast_while_redis_is_frozen_and_service_resumes_after(outage_server, keys):
    """Redis stopped with SIGSTOP (it accepts connections and answers nothing): requests still end within the
    timeouts with 503 (health 503, the list 200) instead of waiting on the socket; after SIGCONT service resumes."""
    server = outage_server
    apis = [Api(url, keys["alice"]) for url in server.urls]
    old = apis[0].create(shell="/bin/bash")["terminalId"]
    assert apis[1].run(old, "echo before") == "before"

    server.redis.process.send_signal(signal.SIGSTOP)
    frozen = time.monotonic()
    timings: list[float] = []
    try:
        def freeze_over() -> bool:
            _probe(server.urls, keys["alice"], old, FROZEN_ANSWER_WITHIN, timings)
            return time.monotonic() - frozen >= FREEZE_SECONDS

        wait_for(freeze_over, FREEZE_SECONDS + 60, "the freeze to last its time", interval=0.1)
    finally:
        server.redis.process.send_signal(signal.SIGCONT)
    thawed = time.monotonic()
    wait_for(lambda: _recovered(apis, old), RECOVERY_WITHIN, "service to resume after Redis thawed", interval=0.2)
    assert all(process.alive() for process in server.processes)
    print(f"\nRedis frozen {time.monotonic() - frozen:.1f} s: {len(timings)} answers, slowest {max(timings):.3f} s; "
          f"all working {time.monotonic() - thawed:.2f} s after SIGCONT")
    for api in apis:
        api.cleanup()


def test_live_clients_are_closed_with_4503_and_a_clean_log_line_when_redis_dies_and_resume_from_their_byte(
        outage_server, keys):
    """Redis killed under open WebSockets (interactive and read-only, on both web processes): each is closed with
    4503 after an error frame naming the byte to reconnect from, and the web processes log one line per connection,
    no traceback. With Redis back, a client reconnecting with ?fromByte= continues exactly there."""
    import asyncio

    from .test_live import Live

    server = outage_server
    api = Api(server.urls[0], keys["alice"])
    terminal = api.create(shell="/bin/bash")["terminalId"]
    webs = [process for process in server.processes if process.name.startswith("web")]
    logged = {process.name: len(process.log()) for process in webs}

    async def attach_then_lose_redis():
        clients = [await Live.open(url, terminal, keys["alice"], **query)
                   for url in server.urls for query in ({}, {"mode": "view"})]
        for client in clients:
            await client.until(lambda live: live.next > 0, "the first prompt")
        server.redis.stop(signal.SIGKILL)
        return [(await client.closed(ANSWER_WITHIN + 2), client) for client in clients]

    for code, client in asyncio.run(attach_then_lose_redis()):
        assert code == 4503
        error = [frame for frame in client.frames if frame["type"] == "error"][-1]
        assert error["code"] == "WORKER_UNAVAILABLE" and f"?fromByte={client.next}" in error["message"], error
    for process in webs:
        since = process.log()[logged[process.name]:]
        assert "Traceback" not in since, since
        assert since.count("live connection closed: the channel layer failed") == 2, since
    resume_from = client.next

    server.redis, _ = start_redis(_redis_port(server))
    wait_for(lambda: api.post("/api/terminals/{}/input".format(terminal), json={"input": "echo back-$((1+1))"})
             .status_code == 200, RECOVERY_WITHIN, "input to work again")

    async def reconnect():
        client = await Live.open(server.urls[1], terminal, keys["alice"], fromByte=resume_from)
        assert client.attached["fromByte"] == resume_from
        await client.until_text("back-2")
        await client.close()

    asyncio.run(reconnect())
    api.cleanup()
