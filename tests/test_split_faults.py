"""The split deployment when a worker goes away: fast 503s, lost terminals, and a new worker taking over."""

import signal
import sys
import time

import pytest

from terminals.runtime.processes import session_members

from .client import Api
from .servers import ServiceProcess, service_env, start_split, wait_for

TIMEOUT_MS = 1500


@pytest.fixture
def split(orm, settings):
    # The test reads heartbeats with the same interval the servers use.
    settings.TERMINALS = {**settings.TERMINALS, "HEARTBEAT_INTERVAL_MS": 300}
    server = start_split(webs=1, workers=1, TERMINALS_WORKER_TIMEOUT_MS=str(TIMEOUT_MS), TERMINALS_HEARTBEAT_INTERVAL_MS="300")
    yield server
    server.stop()


def start_worker(server) -> ServiceProcess:
    environment = service_env(
        REDIS_URL=server.redis_url, TERMINALS_WORKER_TIMEOUT_MS=str(TIMEOUT_MS), TERMINALS_HEARTBEAT_INTERVAL_MS="300"
    )
    worker = ServiceProcess(f"worker{len(server.processes)}", [sys.executable, "manage.py", "terminal_worker"], environment)
    server.processes.insert(0, worker)
    worker.wait_for_log("ready on")
    return worker


def test_requests_fail_fast_when_the_worker_is_gone(split, keys):
    """With the worker killed, requests fail within the worker timeout: 503 WORKER_UNAVAILABLE, or 409 once
    a live worker of any deployment sharing the database has marked the terminal lost."""
    api = Api(split.url, keys["alice"])
    terminal = api.create(shell="/bin/bash")
    split.process("worker0").stop(signal.SIGKILL)
    for method, path, body in [
        ("GET", f"/api/terminals/{terminal['terminalId']}/output", None),
        ("POST", f"/api/terminals/{terminal['terminalId']}/input", {"input": "echo hi"}),
        ("POST", "/api/terminals", {}),
    ]:
        started = time.monotonic()
        response = api.request(method, path, json=body)
        code = response.json()["error"]["code"]
        if path == "/api/terminals":
            assert (response.status_code, code) == (503, "WORKER_UNAVAILABLE"), response.text
        else:
            assert (response.status_code, code) in {(503, "WORKER_UNAVAILABLE"), (409, "TERMINAL_INACTIVE")}
        assert time.monotonic() - started < TIMEOUT_MS / 1000 + 2
    health = api.get("/api/health")
    assert health.status_code == 503
    assert health.json()["data"]["worker"]["ok"] is False
    # The PTY closed with the worker, so the shell was hung up.
    wait_for(lambda: session_members(terminal["pid"]) == [], 10, "the orphaned shell to end")


def test_a_new_worker_marks_the_old_terminals_lost_and_serves_new_ones(split, keys):
    """After a worker dies, the next one marks its terminals lost (409 afterwards) and hosts new terminals."""
    api = Api(split.url, keys["alice"])
    old = api.create(shell="/bin/bash")["terminalId"]
    split.process("worker0").stop(signal.SIGKILL)
    # Lost is decided by the heartbeat: wait until the dead worker's beat is stale.
    wait_for(lambda: api.get(f"/api/terminals/{old}/output").status_code == 503, 10, "503 for the dead worker")
    wait_for(lambda: _stale(api, old), 10, "the dead worker's heartbeat to go stale")
    start_worker(split)
    record = api.wait_status(old, "lost")
    assert record["ended"] is not None
    refused = api.get(f"/api/terminals/{old}/output")
    assert refused.status_code == 409
    assert refused.json()["error"]["code"] == "TERMINAL_INACTIVE"
    fresh = api.create(shell="/bin/bash")["terminalId"]
    assert api.run(fresh, "echo alive") == "alive"
    api.cleanup()


def _stale(api, terminal_id) -> bool:
    from terminals.models import TerminalSession

    return not TerminalSession.objects.select_related("worker").get(pk=terminal_id).worker.is_live()


def test_terminals_spread_over_workers_and_every_web_process_reaches_them(orm, keys):
    """With two workers and two web processes, terminals land on both workers and each web reaches each terminal."""
    server = start_split(webs=2, workers=2)
    try:
        first, second = (Api(url, keys["alice"]) for url in server.urls)
        hosts = {}

        def both_workers_used():
            created = first.create(shell="/bin/sh")
            hosts[created["terminalId"]] = first.get(f"/api/terminals/{created['terminalId']}").json()["data"]["worker"]
            return len(set(hosts.values())) == 2

        wait_for(both_workers_used, 30, "terminals on both workers", interval=0)
        for terminal_id in hosts:
            assert second.run(terminal_id, "echo via-second") == "via-second"
        first.cleanup()
    finally:
        server.stop()
