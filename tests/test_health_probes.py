"""Health for load balancers: liveness asks nothing of anyone; readiness needs the database, the channel layer and
a live worker; /api/health lists every worker with its heartbeat, so one dead worker of two shows."""

from __future__ import annotations

import signal

import requests

from .servers import start_split, wait_for

HEARTBEAT_MS = 300


def get(url: str, path: str) -> requests.Response:
    return requests.get(f"{url}{path}", timeout=30)


def test_liveness_and_readiness_answer_without_a_key(server):
    live = get(server.url, "/api/health/live")
    assert live.status_code == 200 and live.json()["data"]["status"] == "alive", live.text
    ready = get(server.url, "/api/health/ready")
    assert ready.status_code == 200, ready.text
    data = ready.json()["data"]
    assert data["status"] == "ready"
    assert data["checks"] == {"accepting": True, "database": True, "channelLayer": True, "liveWorker": True}
    assert any(worker["alive"] for worker in data["workers"])


def test_a_dead_worker_shows_and_the_last_one_makes_the_service_not_ready(orm):
    """Two workers: SIGKILL one and health lists it as not alive within a few heartbeats while readiness holds;
    SIGKILL the other and readiness answers 503 naming liveWorker, while liveness still answers 200."""
    server = start_split(webs=1, workers=2, TERMINALS_HEARTBEAT_INTERVAL_MS=str(HEARTBEAT_MS))
    try:
        url = server.urls[0]
        first, second = [process for process in server.processes if process.name.startswith("worker")]
        wait_for(lambda: sum(w["alive"] for w in get(url, "/api/health").json()["data"]["workers"]) == 2, 30,
                 "both workers alive")
        first.process.send_signal(signal.SIGKILL)
        first.process.wait()

        def one_alive():
            workers = get(url, "/api/health").json()["data"]["workers"]
            return sorted((w["pid"], w["alive"]) for w in workers if w["pid"] in (first.pid, second.pid)) == sorted(
                [(first.pid, False), (second.pid, True)])

        wait_for(one_alive, 30, "the killed worker shown as not alive")
        assert get(url, "/api/health/ready").status_code == 200

        second.process.send_signal(signal.SIGKILL)
        second.process.wait()

        def not_ready():
            answer = get(url, "/api/health/ready")
            return answer.status_code == 503 and answer.json()["data"]["checks"]["liveWorker"] is False

        wait_for(not_ready, 30, "readiness to fail for want of a live worker")
        assert get(url, "/api/health/live").status_code == 200
    finally:
        server.stop()
