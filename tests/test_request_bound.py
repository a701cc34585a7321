"""A web process runs at most TERMINALS_REQUEST_THREADS requests at once (each holds a thread and a database
connection), each user's waits are capped below that bound, and a request that finds every thread busy answers 503
SERVER_BUSY with Retry-After in time instead of queueing for ever (docs/settings.md, docs/capacity.md)."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor, as_completed

import pytest
import requests

from .client import Api
from .conftest import make_key
from .servers import start_embedded, wait_for

THREADS = 4
WAITS_PER_USER = 2
QUEUE_MS = 1000
WAIT_MS = 8000  # how long each held wait lasts: long enough for the checks made while they hold their threads


@pytest.fixture(scope="module")
def bounded_server(django_db_setup):
    server = start_embedded(TERMINALS_REQUEST_THREADS=str(THREADS), TERMINALS_MAX_WAITS_PER_USER=str(WAITS_PER_USER),
                            TERMINALS_REQUEST_QUEUE_MS=str(QUEUE_MS))
    yield server
    server.stop()


def user(server, name: str) -> tuple[Api, str]:
    _, key = make_key(name=name)
    api = Api(server.url, key)
    return api, api.create(shell="/bin/sh")["terminalId"]


def long_wait(api: Api, terminal: str, timeout_ms: int = WAIT_MS) -> requests.Response:
    return api.post(f"/api/terminals/{terminal}/output/wait", json={"pattern": "never-printed", "timeoutMs": timeout_ms},
                    timeout=60)


def test_waits_are_capped_per_user_and_a_full_process_answers_server_busy(bounded_server, orm):
    """With 4 request threads and 2 waits per user: Alice's third wait is refused 429 naming the setting while Bob
    is served; once Alice's and Bob's waits hold all 4 threads, Carol's request answers 503 SERVER_BUSY with
    Retry-After after the queue's second; when the waits end, every request is served again, and the waits
    themselves answered in full."""
    (alice, a), (bob, b), (carol, c) = (user(bounded_server, name) for name in ("alice-w", "bob-w", "carol-w"))
    background = ThreadPoolExecutor(2 * WAITS_PER_USER + 1)
    try:
        # One more than the cap, at once: whichever comes third finds the other two waiting, for WAIT_MS.
        alices = [background.submit(long_wait, alice, a) for _ in range(WAITS_PER_USER + 1)]
        refused = next(as_completed(alices, timeout=WAIT_MS / 1000)).result()
        error = refused.json()["error"]
        assert (refused.status_code, error["code"]) == (429, "LIMIT_REACHED"), refused.text
        assert "TERMINALS_MAX_WAITS_PER_USER" in error["message"], error
        assert bob.get(f"/api/terminals/{b}").status_code == 200  # two threads held, two free

        # Bob's two waits take the last two threads; a third request of his would queue, as Carol's does.
        bobs = [background.submit(long_wait, bob, b) for _ in range(WAITS_PER_USER)]

        def carol_busy() -> list[requests.Response] | None:
            response = carol.get(f"/api/terminals/{c}")
            return [response] if response.status_code == 503 else None  # a listed one: a 503 Response is falsy

        started = time.monotonic()
        [busy] = wait_for(carol_busy, WAIT_MS / 1000, "a request to find every thread busy")
        assert busy.json()["error"]["code"] == "SERVER_BUSY", busy.text
        assert "TERMINALS_REQUEST_THREADS" in busy.json()["error"]["message"]
        assert busy.headers["Retry-After"] == "1"
        assert time.monotonic() - started >= QUEUE_MS / 1000  # it waited its turn before giving up

        answers = sorted((wait.result(timeout=60) for wait in alices + bobs), key=lambda answer: answer.status_code)
        assert [answer.status_code for answer in answers] == [200] * 2 * WAITS_PER_USER + [429]
        for answered in answers[:-1]:
            assert answered.json()["data"]["outcome"] == "timeout", answered.text
        assert carol.get(f"/api/terminals/{c}").status_code == 200
    finally:
        background.shutdown(wait=True)
        for api in (alice, bob, carol):
            api.cleanup()


def test_follow_streams_do_not_hold_request_threads(bounded_server, orm):
    """More follow streams (SSE) than there are request threads stay open together, and plain requests are still
    served beside them: a stream runs on the event loop, not on the thread that started it."""
    api, terminal = user(bounded_server, "follower")
    streams = []
    try:
        for _ in range(THREADS + 2):
            stream = requests.get(f"{bounded_server.url}/api/terminals/{terminal}/output", params={"follow": "true"},
                                  headers={"X-API-Key": api.key}, stream=True, timeout=30)
            assert stream.status_code == 200, stream.text
            streams.append(stream)
        assert api.get(f"/api/terminals/{terminal}").status_code == 200
        api.send(terminal, "echo still-served")
        assert api.get(f"/api/terminals/{terminal}/output").status_code == 200
    finally:
        for stream in streams:
            stream.close()
        api.cleanup()
