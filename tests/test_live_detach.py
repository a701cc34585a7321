"""Every closed live connection is detached from its worker and audited, whatever closed it: a stopping web process
(4012), a Redis outage (4503), a killed worker (4409), or a web process SIGKILLed with nobody left to say so, which the
worker notices when the connection's lease is no longer renewed (terminals/remote/leases.py, docs/live.md). And a
request in flight on a killed worker answers 409 once its terminal is marked lost, not at its deadline."""

from __future__ import annotations

import asyncio
import signal
import threading
import time

import pytest

from terminals.models import AuditEvent

from .client import Api
from .servers import start_redis, start_split, wait_for
from .test_live import Live

LEASE_SECONDS = 10.0  # a subscriber not renewed for this long is dropped (terminals/remote/leases.py)
DROPPED_WITHIN = LEASE_SECONDS + 20  # the lease, the worker's next check, and slack for a busy machine


@pytest.fixture
def two_webs(orm):
    server = start_split(webs=2, workers=1)
    yield server
    server.stop()


def _viewers(api: Api, terminal: str) -> int | None:
    return api.get(f"/api/terminals/{terminal}").json()["data"].get("viewers")


def _detaches(terminal: str) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(terminal_id=terminal, action="detach"))


def _stays(predicate, seconds: float, what: str) -> None:
    """Fails as soon as predicate stops holding within seconds (an absence can only be checked over a while)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert predicate(), f"{what} no longer held"
        time.sleep(0.1)


async def _clients(url: str, terminal: str, key: str, count: int) -> list[Live]:
    """count WebSockets on the terminal, every other one read-only, each past the first prompt."""
    clients = [await Live.open(url, terminal, key, **({"mode": "view"} if number % 2 else {}))
               for number in range(count)]
    for client in clients:
        await client.until(lambda live: (live.next or 0) > 0, "the first prompt")
    return clients


def test_a_stopping_web_process_detaches_and_audits_every_connection_even_while_the_worker_is_slow(two_webs, keys):
    """Four WebSockets on the web process being stopped, their worker frozen meanwhile (busy, say): each client gets
    4012, each connection has exactly one detach row with 4012, and once the worker runs again the terminal's
    viewers count is the one client left (on the other web process)."""
    first, second = two_webs.urls
    api = Api(second, keys["alice"])
    terminal = api.create(shell="/bin/bash")["terminalId"]
    worker = two_webs.process("worker0")

    async def scenario():
        clients = await _clients(first, terminal, keys["alice"], 4)
        staying = (await _clients(second, terminal, keys["alice"], 1))[0]
        worker.process.send_signal(signal.SIGSTOP)
        try:
            stopping = asyncio.ensure_future(asyncio.to_thread(two_webs.process("web0").stop, signal.SIGTERM))
            codes = [await client.closed() for client in clients]
            await stopping
        finally:
            worker.process.send_signal(signal.SIGCONT)
        return codes, staying

    codes, staying = asyncio.run(scenario())
    assert codes == [4012] * 4
    rows = _detaches(terminal)
    assert sorted(row.details["closeCode"] for row in rows) == [4012] * 4, [row.details for row in rows]
    assert len({row.details["connection"] for row in rows}) == 4
    wait_for(lambda: _viewers(api, terminal) == 1, 20, "the viewers count to be the one client left")
    assert len(_detaches(terminal)) == 4
    api.cleanup()


def test_connections_closed_by_a_redis_outage_are_detached_once_and_leave_no_ghost_viewer(two_webs, keys):
    """Redis killed under two WebSockets: each gets 4503 and has one detach row with 4503. Their detaches could not
    reach the worker, yet once Redis is back the worker stops counting (and feeding) them within the lease."""
    first, second = two_webs.urls
    api = Api(second, keys["alice"])
    terminal = api.create(shell="/bin/bash")["terminalId"]

    async def scenario():
        clients = await _clients(first, terminal, keys["alice"], 2)
        two_webs.redis.stop(signal.SIGKILL)
        return [await client.closed() for client in clients]

    assert asyncio.run(scenario()) == [4503, 4503]
    port = int(two_webs.redis_url.rsplit(":", 1)[1].split("/")[0])
    two_webs.redis, _ = start_redis(port)
    wait_for(lambda: api.get(f"/api/terminals/{terminal}/output").status_code == 200, 20, "the service back")
    wait_for(lambda: _viewers(api, terminal) == 0, DROPPED_WITHIN, "the closed connections to stop counting")
    # (A detach sent while Redis was away may still go out when it is back; the lease drops the others.) The worker
    # found each dropped connection's row and wrote none of its own: no row comes for a while after the drop.
    _stays(lambda: len(_detaches(terminal)) == 2, 3.0, "two detach rows")
    rows = _detaches(terminal)
    assert sorted(row.details["closeCode"] for row in rows) == [4503, 4503], [row.details for row in rows]
    assert all(row.outcome == "ok" for row in rows)
    api.cleanup()


def test_the_viewers_of_a_sigkilled_web_process_are_dropped_and_audited_by_their_worker(two_webs, keys):
    """A web process SIGKILLed with two WebSockets and an SSE follow attached writes nothing more: its worker drops
    all three once their lease goes unrenewed, and writes each WebSocket's detach row (outcome LEASE_EXPIRED), so
    viewers is 0 again and nothing more is sent to the dead process's channels."""
    first, second = two_webs.urls
    api = Api(second, keys["alice"])
    terminal = api.create(shell="/bin/bash")["terminalId"]
    follow = Api(first, keys["alice"]).get(f"/api/terminals/{terminal}/output", params={"follow": "true"},
                                           stream=True, timeout=60)
    lines = follow.iter_lines(decode_unicode=True)
    assert next(line for line in lines if line.startswith("event: ")) == "event: attached"

    async def scenario():
        await _clients(first, terminal, keys["alice"], 2)
        two_webs.process("web0").stop(signal.SIGKILL)

    asyncio.run(scenario())
    follow.close()
    assert _viewers(api, terminal) == 3
    wait_for(lambda: _viewers(api, terminal) == 0, DROPPED_WITHIN, "the dead web process's viewers to be dropped")
    wait_for(lambda: len(_detaches(terminal)) == 2, 10, "a detach row for each connection")
    assert [row.outcome for row in _detaches(terminal)] == ["LEASE_EXPIRED"] * 2
    assert "stopped streaming terminal" in two_webs.process("worker0").log()
    api.cleanup()


# A killed worker: the 409 and the detach rows come as soon as the terminal is marked lost


SLOW_TIMEOUT_MS = 30000  # the worker timeout of this deployment: what the old behaviour waited for


@pytest.fixture
def two_workers(orm):
    server = start_split(webs=1, workers=2, TERMINALS_HEARTBEAT_INTERVAL_MS="1000",
                         TERMINALS_WORKER_TIMEOUT_MS=str(SLOW_TIMEOUT_MS), TERMINALS_CGROUPS="false")
    yield server
    server.stop()


def _process_of(server, worker_id: str):
    return next(process for process in server.processes if f"terminal worker {worker_id} ready" in process.log())


def test_a_command_in_flight_on_a_killed_worker_answers_409_once_the_terminal_is_lost(two_workers, keys):
    """A command waiting (timeout 20 s) when its worker is SIGKILLed: the other worker marks the terminal lost at
    its next beat, and the request answers 409 TERMINAL_INACTIVE well before its 20 s + 30 s deadline."""
    api = Api(two_workers.url, keys["alice"])
    terminal = api.create(shell="/bin/bash")["terminalId"]
    host = api.get(f"/api/terminals/{terminal}").json()["data"]["worker"]
    answers = []

    def run_command():
        started = time.monotonic()
        response = Api(two_workers.url, keys["alice"]).post(f"/api/terminals/{terminal}/commands", json={"command": "sleep 60", "timeoutMs": 20000},
                            timeout=120)
        answers.append((response, time.monotonic() - started))

    thread = threading.Thread(target=run_command, daemon=True)
    thread.start()
    wait_for(lambda: "sleep 60" in api.full_output(terminal), 15, "the command to be typed")
    _process_of(two_workers, host).stop(signal.SIGKILL)
    killed = time.monotonic()
    thread.join(120)
    response, _ = answers[0]
    took = time.monotonic() - killed
    assert (response.status_code, response.json()["error"]["code"]) == (409, "TERMINAL_INACTIVE"), response.text
    assert took < 15, f"answered {took:.1f} s after the kill"
    assert api.get(f"/api/terminals/{terminal}").json()["data"]["status"] == "lost"
    # One message for the lost terminal, whichever endpoint tells it.
    for method, path in [("GET", "/output"), ("POST", "/input"), ("DELETE", "")]:
        other = api.request(method, f"/api/terminals/{terminal}{path}", json={"input": "x"} if path else None)
        assert other.status_code == 409 and other.json()["error"]["message"] == response.json()["error"]["message"]
    api.cleanup()


def test_the_detach_rows_of_a_killed_workers_clients_are_written_when_they_are_closed(two_workers, keys):
    """Two WebSockets on a terminal whose worker is SIGKILLed get 4409 once it is lost; their detach rows (4409) are
    on record within seconds of the close, not after a request to the dead worker times out (30 s here)."""
    api = Api(two_workers.url, keys["alice"])
    terminal = api.create(shell="/bin/bash")["terminalId"]
    host = api.get(f"/api/terminals/{terminal}").json()["data"]["worker"]

    async def scenario():
        clients = await _clients(two_workers.url, terminal, keys["alice"], 2)
        _process_of(two_workers, host).stop(signal.SIGKILL)
        return [await client.closed(30) for client in clients]

    assert asyncio.run(scenario()) == [4409, 4409]
    wait_for(lambda: len(_detaches(terminal)) == 2, 10, "the detach rows")
    assert [row.details["closeCode"] for row in _detaches(terminal)] == [4409, 4409]
    api.cleanup()


def test_a_worker_paused_longer_than_a_lease_keeps_its_viewers(two_webs, keys):
    """A worker frozen (SIGSTOP) for longer than a lease, with a WebSocket attached: the renewals wait unread in its
    channel meanwhile, so when it resumes it keeps the viewer instead of dropping it, and output still reaches it."""
    first, second = two_webs.urls
    api = Api(second, keys["alice"])
    terminal = api.create(shell="/bin/bash")["terminalId"]
    worker = two_webs.process("worker0")

    async def scenario():
        (client,) = await _clients(first, terminal, keys["alice"], 1)
        worker.process.send_signal(signal.SIGSTOP)
        try:
            await asyncio.sleep(LEASE_SECONDS + 1)  # the outage under test: longer than a lease
        finally:
            worker.process.send_signal(signal.SIGCONT)
        await asyncio.to_thread(api.send, terminal, "echo still-$((6*7))")
        await client.until_text("still-42", 30)
        return client

    client = asyncio.run(scenario())
    assert not any(frame["type"] == "error" for frame in client.frames), client.frames[-3:]
    assert _viewers(api, terminal) == 1
    assert "stopped streaming terminal" not in worker.log()
    api.cleanup()
