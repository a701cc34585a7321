"""Requests run their sync code on reused threads: no thread per request, and an abandoned request blocks nobody."""

from __future__ import annotations

import os
import threading

import pytest
import requests

from terminals.plumbing.request_threads import ExecutorPool

from .client import Api


def test_an_executor_returns_to_the_pool_only_when_its_work_is_done():
    pool = ExecutorPool()
    release = threading.Event()
    busy = pool.take()
    running = busy.submit(release.wait, 10)
    pool.give_back(busy)  # as after a request whose client went away while its view runs
    other = pool.take()
    assert other is not busy  # the next request does not queue behind the abandoned view
    release.set()
    assert running.result(timeout=10) is True
    pool.give_back(other)
    busy.submit(lambda: None).result(timeout=10)  # its give-back marker has run by now
    assert pool.idle() == 2
    assert pool.take() is other  # the most recently used first
    assert pool.started == 2


def test_idle_executors_are_closed():
    pool = ExecutorPool(idle_seconds=0)
    first, second = pool.take(), pool.take()
    pool.give_back(first)
    first.submit(lambda: None).result(timeout=10)
    pool.give_back(second)  # makes idle after the first has been idle "too long"
    second.submit(lambda: None).result(timeout=10)
    pool.give_back(pool.take())
    with pytest.raises(RuntimeError):  # shut down: it takes no more work
        first.submit(lambda: None)


# Embedded only: these count the threads of the one process that serves requests and owns the terminals.
def test_sequential_requests_start_no_threads(embedded_server, keys):
    api = Api(embedded_server.url, keys["alice"])
    pid = embedded_server.processes[0].pid
    try:
        terminal = api.create(shell="/bin/bash")["terminalId"]
        for _ in range(20):
            assert api.get(f"/api/terminals/{terminal}/output", params={"mode": "tail"}).status_code == 200
        before = set(os.listdir(f"/proc/{pid}/task"))
        seen: set[str] = set()
        done = threading.Event()

        def watch_threads():  # a thread per request would come and go between two polls of the driver
            while not done.is_set():
                seen.update(os.listdir(f"/proc/{pid}/task"))

        watcher = threading.Thread(target=watch_threads)
        watcher.start()
        try:
            for _ in range(200):
                assert api.get(f"/api/terminals/{terminal}/output", params={"mode": "tail"}).status_code == 200
        finally:
            done.set()
            watcher.join()
        # Django's own handler starts two threads per request (an executor and its joiner).
        assert len(seen - before) <= 2, f"{len(seen - before)} threads started during 200 requests"
    finally:
        api.cleanup()


def test_a_request_abandoned_by_its_client_does_not_hold_up_the_next(embedded_server, keys):
    api = Api(embedded_server.url, keys["alice"])
    try:
        terminal = api.create(shell="/bin/bash")["terminalId"]
        with pytest.raises(requests.ReadTimeout):
            requests.post(f"{embedded_server.url}/api/terminals/{terminal}/commands",
                          json={"command": "sleep 8", "timeoutMs": 30000},
                          headers={"X-API-Key": keys["alice"]}, timeout=0.5)
        # The abandoned view still waits for `sleep 8`; these answer meanwhile, the command still running.
        for _ in range(5):
            assert api.get(f"/api/terminals/{terminal}/output", params={"mode": "tail"}, timeout=5).status_code == 200
        detail = api.get(f"/api/terminals/{terminal}").json()["data"]
        assert detail["runningCommand"] is not None, detail
    finally:
        api.cleanup()
