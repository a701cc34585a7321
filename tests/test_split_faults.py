"""The split deployment when a worker goes away: fast 503s, lost terminals, and a new worker taking over."""

import contextlib
import os
import signal
import sys
import time
import uuid
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from terminals.runtime.processes import command_line, marked_processes, session_members

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


def start_worker(server, **env: str) -> ServiceProcess:
    environment = service_env(**{
        "REDIS_URL": server.redis_url, "TERMINALS_WORKER_TIMEOUT_MS": str(TIMEOUT_MS),
        "TERMINALS_HEARTBEAT_INTERVAL_MS": "300", **env,
    })
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
    wait_for(lambda: session_members(terminal["pid"]) == [], 30, "the orphaned shell to end")


def test_a_new_worker_marks_the_old_terminals_lost_and_serves_new_ones(split, keys):
    """After a worker dies, the next one marks its terminals lost (409 afterwards) and hosts new terminals."""
    api = Api(split.url, keys["alice"])
    old = api.create(shell="/bin/bash")["terminalId"]
    split.process("worker0").stop(signal.SIGKILL)
    # Lost is decided by the heartbeat: wait until the dead worker's beat is stale. Its terminal answers 503, or 409
    # once a live worker of another deployment sharing the database has marked it lost (a CI run saw that first).
    wait_for(lambda: api.get(f"/api/terminals/{old}/output").status_code in (503, 409), 30,
             "503 (or 409) for the dead worker's terminal")
    wait_for(lambda: _stale(api, old), 30, "the dead worker's heartbeat to go stale")
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


# A killed worker's terminals: lost by heartbeat, and nothing of theirs left running


MARKER = "TERMINALS_TERMINAL_ID"  # in the environment of every process a terminal starts
LOST_WITHIN = 30.0  # the promise, at the default heartbeat interval (5 s: lost after three silent ones, 15 s)
# Two seconds here: the same three silent intervals, in less of the suite's time.
HEARTBEAT_MS = 2000
CGROUP_ROOT = Path("/sys/fs/cgroup")
# Three ways out of the shell's reach: immune to the hangup, a session of its own, a parent that is gone.
ESCAPES = "nohup sleep 1001 >/dev/null 2>&1 & setsid sleep 1002 & (sleep 1003 &)"
ESCAPED = {"sleep 1001", "sleep 1002", "sleep 1003"}


# Without control groups: the processes carry only their marker, which is what the workers go by here. (With
# cgroups, any worker starting on this host, of any deployment, also empties a dead worker's groups.)
NO_CGROUPS = {"TERMINALS_CGROUPS": "false"}


@pytest.fixture
def two_workers(orm):
    """Two workers beating every HEARTBEAT_MS."""
    server = start_split(webs=1, workers=2, TERMINALS_HEARTBEAT_INTERVAL_MS=str(HEARTBEAT_MS), **NO_CGROUPS)
    yield server
    server.stop()


def _left_running(terminal_id: str) -> dict[int, str]:
    """The live processes on this host that carry the terminal's marker, with their command lines."""
    return {pid: command_line(pid) for pid in marked_processes(MARKER).get(terminal_id, [])}


def _terminal_with_escapees(api: Api) -> tuple[str, str]:
    """A bash terminal that has started ESCAPED (and checked that they did escape); returns its id and worker."""
    terminal = api.create(shell="/bin/bash")
    api.send(terminal["terminalId"], ESCAPES)
    wait_for(lambda: ESCAPED <= set(_left_running(terminal["terminalId"]).values()), 30, "the escapees to start")
    by_command = {command: pid for pid, command in _left_running(terminal["terminalId"]).items()}
    assert by_command["sleep 1002"] not in session_members(terminal["pid"])  # setsid: a session of its own
    assert _parent(by_command["sleep 1003"]) != terminal["pid"]  # double fork: the shell is not its parent
    return terminal["terminalId"], api.get(f"/api/terminals/{terminal['terminalId']}").json()["data"]["worker"]


def _parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as stat:
        return int(stat.read().rsplit(")", 1)[1].split()[1])


def _process_of(server, worker_id: str) -> ServiceProcess:
    return next(process for process in server.processes if f"terminal worker {worker_id} ready" in process.log())


def test_a_killed_workers_terminals_are_lost_by_heartbeat_and_a_restart_ends_what_they_left(two_workers, keys):
    """SIGKILL a worker whose row says it ran on another host, so the survivor has only its heartbeat to go by:
    the terminal is lost three intervals after the last beat (15 s, within the 30 s promised, at the default). Its nohup,
    setsid and double-forked processes outlive the kill; a worker starting on this host ends them all."""
    from terminals.models import Worker

    server = two_workers
    api = Api(server.url, keys["alice"])
    terminal, host = _terminal_with_escapees(api)
    # Relabelled as another host's (hostname and process space) before the kill, so no check can see the process
    # gone: only the silence counts.
    Worker.objects.filter(pk=host).update(hostname="elsewhere.invalid", process_space="elsewhere")
    _process_of(server, host).stop(signal.SIGKILL)
    killed = time.monotonic()

    record = api.wait_status(terminal, "lost", timeout=LOST_WITHIN)
    took = time.monotonic() - killed
    ended = datetime.fromisoformat(record["ended"].replace("Z", "+00:00"))
    last_beat = Worker.objects.get(pk=host).last_seen
    assert ended - last_beat >= timedelta(milliseconds=3 * HEARTBEAT_MS - 10), (ended, last_beat)
    # The survivor cannot reach another host's processes; here they are still running.
    assert ESCAPED <= set(_left_running(terminal).values())

    started = time.monotonic()
    start_worker(server, TERMINALS_HEARTBEAT_INTERVAL_MS=str(HEARTBEAT_MS), **NO_CGROUPS)
    assert _left_running(terminal) == {}
    print(f"\nlost {took:.1f} s after SIGKILL; leftovers gone {time.monotonic() - started:.1f} s after the restart")
    assert api.run(api.create(shell="/bin/bash")["terminalId"], "echo alive") == "alive"
    api.cleanup()


def test_a_worker_on_the_same_host_ends_what_a_killed_workers_terminals_left_when_it_marks_them_lost(
        two_workers, keys):
    """SIGKILL a worker on this host: the surviving worker sees its process gone at its next beat, marks the
    terminal lost and kills its nohup, setsid and double-forked processes at once, with no restart."""
    server = two_workers
    api = Api(server.url, keys["alice"])
    terminal, host = _terminal_with_escapees(api)
    _process_of(server, host).stop(signal.SIGKILL)
    killed = time.monotonic()
    api.wait_status(terminal, "lost", timeout=HEARTBEAT_MS / 1000 + 5)
    wait_for(lambda: _left_running(terminal) == {}, 5, "the lost terminal's processes to be killed")
    print(f"\nlost and reaped {time.monotonic() - killed:.1f} s after SIGKILL")
    api.cleanup()


# Every terminal of a killed worker gets a final state, whatever it was doing


def _create_on(api: Api, worker_id: str, **body) -> dict:
    """Creates terminals until one lands on worker_id; deletes the others."""
    def landed():
        created = api.create(**body)
        if api.get(f"/api/terminals/{created['terminalId']}").json()["data"]["worker"] == worker_id:
            return created
        api.delete(f"/api/terminals/{created['terminalId']}")
        return None

    return wait_for(landed, 30, f"a terminal on worker {worker_id}", interval=0)


def test_a_killed_workers_ended_terminals_answer_409_like_any_ended_terminal(two_workers, keys):
    """A killed worker's terminals that had already ended (exited, killed, output still held) are released when a
    survivor marks its active ones lost: output, delete and kill then answer 409 TERMINAL_INACTIVE, never 503 again;
    each keeps its own status and exit code, and the active one is lost, with a `lost` audit event for each."""
    from terminals.models import AuditEvent

    server = two_workers
    api = Api(server.url, keys["alice"])
    active = api.create(shell="/bin/bash")["terminalId"]
    host = api.get(f"/api/terminals/{active}").json()["data"]["worker"]
    exited = _create_on(api, host, command="/bin/sh", args=["-c", "echo bye; exit 3"])["terminalId"]
    api.wait_status(exited, "exited")
    killed = _create_on(api, host, command="/bin/sleep", args=["600"])["terminalId"]
    assert api.post(f"/api/terminals/{killed}/kill").status_code == 200
    assert "bye" in api.full_output(exited)  # its output is held, so its requests go to the worker

    _process_of(server, host).stop(signal.SIGKILL)
    api.wait_status(active, "lost", timeout=HEARTBEAT_MS / 1000 + 10)
    for terminal, status, exit_code in [(exited, "exited", 3), (killed, "killed", None), (active, "lost", None)]:
        for method, path in [("GET", "/output"), ("GET", "/output?fromByte=0"), ("POST", "/kill"), ("DELETE", "")]:
            response = api.request(method, f"/api/terminals/{terminal}{path}")
            assert (response.status_code, response.json()["error"]["code"]) == (409, "TERMINAL_INACTIVE"), \
                (status, method, path, response.text)
        record = api.get(f"/api/terminals/{terminal}").json()["data"]
        assert (record["status"], record["exitCode"]) == (status, exit_code), record
        assert record["released"] is not None and record["ended"] is not None, record
        assert AuditEvent.objects.filter(terminal_id=terminal, action="lost").count() == 1
    api.cleanup()


def test_a_zombie_worker_counts_as_gone_at_the_next_beat(two_workers, keys):
    """A worker killed but not yet reaped by its parent (a zombie: its pid still answers kill(pid, 0)) is gone: the
    surviving worker on the same host marks its terminal lost at its next beat, without waiting for three silent
    heartbeats. Both times are the database's, so the check is the process check, not the stale heartbeat."""
    import os

    from terminals.models import TerminalSession, Worker

    server = two_workers
    api = Api(server.url, keys["alice"])
    terminal = api.create(shell="/bin/bash")["terminalId"]
    host = api.get(f"/api/terminals/{terminal}").json()["data"]["worker"]
    process = _process_of(server, host)
    os.kill(process.pid, signal.SIGKILL)  # and nobody waits for it: it stays a zombie
    wait_for(lambda: _state(process.pid) == "Z", 30, "the killed worker to be a zombie")

    api.wait_status(terminal, "lost", timeout=3 * HEARTBEAT_MS / 1000 + 10)
    assert _state(process.pid) == "Z"
    silent = TerminalSession.objects.get(pk=terminal).ended - Worker.objects.get(pk=host).last_seen
    assert silent < timedelta(milliseconds=3 * HEARTBEAT_MS), f"lost only after {silent}: judged by the heartbeat"
    api.cleanup()


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0]


# A creation goes to a worker that has room


def test_a_full_worker_passes_creations_to_one_with_room_and_429_comes_only_when_all_are_full():
    """Two workers of TERMINALS_MAX_TOTAL=3, one of them full: the next three creations all succeed, on the other
    worker, whichever worker takes them from the shared queue; with both full, the next one answers 429.
    (On a database of its own: the workers of other deployments sharing the test database are not reachable.)"""
    from .own_database import create_key, own_database

    database = own_database(sqlite=True)
    server = start_split(webs=1, workers=2, TERMINALS_MAX_TOTAL="3", **database, **NO_CGROUPS)
    try:
        api = Api(server.url, create_key(database, "alice")[1])
        first = api.create(command="/bin/sleep", args=["600"])["terminalId"]
        full = api.get(f"/api/terminals/{first}").json()["data"]["worker"]
        for _ in range(2):
            _create_on(api, full, command="/bin/sleep", args=["600"])
        hosts = []
        for _ in range(3):
            response = api.post("/api/terminals", json={"command": "/bin/sleep", "args": ["600"]})
            assert response.status_code == 201, response.text
            api.created.append(response.json()["data"]["terminalId"])
            hosts.append(api.get(f"/api/terminals/{api.created[-1]}").json()["data"]["worker"])
        assert full not in hosts and len(set(hosts)) == 1, hosts
        refused = api.post("/api/terminals", json={"command": "/bin/sleep", "args": ["600"]})
        assert refused.status_code == 429, refused.text
        assert refused.json()["error"]["code"] == "LIMIT_REACHED"
        api.cleanup()
    finally:
        server.stop()


# Live clients of a killed worker are told


@pytest.fixture
def lone_worker():
    """One worker beating every 300 ms, on a database of its own: no worker of another deployment sharing the
    test database can mark its terminals lost, so what the web process sees is its heartbeat going stale.
    Yields the deployment and a key."""
    from .own_database import create_key, own_database

    database = own_database(sqlite=True)
    server = start_split(webs=1, workers=1, TERMINALS_WORKER_TIMEOUT_MS=str(TIMEOUT_MS),
                         TERMINALS_HEARTBEAT_INTERVAL_MS="300", **database)
    yield server, create_key(database, "alice")[1]
    server.stop()


WATCH_SECONDS = 2.0  # how often a web process checks the workers of its live connections (terminals/remote/watch.py)


async def _attach_both(url: str, key: str, terminal: str):
    from .test_live import Live

    return await Live.open(url, terminal, key), await Live.open(url, terminal, key, mode="view")


async def _closing(live, within: float) -> tuple[int, dict | None]:
    """The close code, and the error frame that came just before it."""
    code = await live.closed(within)
    errors = [frame for frame in live.frames if frame["type"] == "error"]
    return code, errors[-1] if errors else None


def test_live_clients_of_a_killed_worker_are_closed_with_4409_once_its_terminal_is_lost(two_workers, keys):
    """SIGKILL the worker of a terminal with an interactive and a read-only WebSocket attached: once the surviving
    worker has marked the terminal lost (at its next beat), both are closed with 4409 within WATCH_SECONDS, after
    an error frame that says the output is gone, without typing anything."""
    import asyncio

    server = two_workers
    api = Api(server.url, keys["alice"])
    terminal = api.create(shell="/bin/bash")["terminalId"]
    host = api.get(f"/api/terminals/{terminal}").json()["data"]["worker"]

    async def scenario():
        interactive, viewer = await _attach_both(server.url, keys["alice"], terminal)
        _process_of(server, host).stop(signal.SIGKILL)
        within = HEARTBEAT_MS / 1000 + WATCH_SECONDS + 5
        return await asyncio.gather(_closing(interactive, within), _closing(viewer, within))

    for code, error in asyncio.run(scenario()):
        assert code == 4409
        assert error is not None and error["code"] == "TERMINAL_INACTIVE", error
    assert api.get(f"/api/terminals/{terminal}").json()["data"]["status"] == "lost"
    api.cleanup()


def test_live_clients_are_closed_with_4503_when_their_worker_stops_beating(lone_worker):
    """The only worker killed, so nobody marks its terminal lost: once its heartbeat is stale (three intervals, by
    the database's clock), both WebSockets are closed with 4503 within WATCH_SECONDS, after an error frame that
    says from which byte to reconnect."""
    import asyncio

    split, key = lone_worker
    api = Api(split.url, key)
    terminal = api.create(shell="/bin/bash")["terminalId"]

    async def scenario():
        interactive, viewer = await _attach_both(split.url, key, terminal)
        # Each has the whole first prompt (its chunks may differ: a CI run saw the viewer get in one frame what the
        # interactive client got in two), and so the same next byte.
        for live in (interactive, viewer):
            await live.until(lambda live: live.text.endswith("# "), "the whole first prompt")
        assert viewer.next == interactive.next
        split.process("worker0").stop(signal.SIGKILL)
        within = 3 * 0.3 + WATCH_SECONDS + 5
        return [(await _closing(live, within), live.next) for live in (interactive, viewer)]

    for (code, error), next_byte in asyncio.run(scenario()):
        assert code == 4503
        assert error is not None and error["code"] == "WORKER_UNAVAILABLE", error
        assert f"?fromByte={next_byte}" in error["message"], error


# Liveness by one clock: the database's


SKEW = "-60s"  # the skewed worker's clock runs a minute behind everyone else's


def _skewed_worker(server, **env: str) -> ServiceProcess:
    """A worker whose clock runs SKEW off (libfaketime preloaded into the worker itself, so signals reach it)."""
    import glob

    library = glob.glob("/usr/lib/*/faketime/libfaketime.so.1")
    assert library, "libfaketime is not installed (apt-get install faketime)"
    environment = service_env(REDIS_URL=server.redis_url, LD_PRELOAD=library[0], FAKETIME=SKEW,
                              FAKETIME_DONT_FAKE_MONOTONIC="1", **env)
    worker = ServiceProcess("skewed-worker", [sys.executable, "manage.py", "terminal_worker"], environment)
    server.processes.insert(0, worker)
    worker.wait_for_log("ready on")
    return worker


@pytest.fixture
def postgres_cluster():
    """A throwaway PostgreSQL cluster (scripts/postgres.sh): its directory and its DATABASE_URL."""
    import subprocess

    from .servers import ROOT

    started = subprocess.run(["bash", "scripts/postgres.sh", "start"], cwd=ROOT, capture_output=True, text=True,
                             check=True, timeout=120)
    directory, url = started.stdout.split()
    yield directory, url
    subprocess.run(["bash", "scripts/postgres.sh", "stop", directory], cwd=ROOT, check=False, timeout=120)


@pytest.fixture
def postgres(postgres_cluster):
    """A throwaway PostgreSQL cluster's DATABASE_URL: its clock is the one every host shares."""
    return postgres_cluster[1]


def _postgres(command: str, directory: str) -> None:
    """Stops (down) or starts (up) the cluster, on the same port and data: an outage as a restart makes one."""
    import subprocess

    from .servers import ROOT

    subprocess.run(["bash", "scripts/postgres.sh", command, directory], cwd=ROOT, check=True, timeout=120)


def test_a_worker_whose_clock_runs_behind_stays_alive_and_keeps_its_terminals(postgres, tmp_path):
    """Split deployment on PostgreSQL with a second worker whose clock runs a minute behind (libfaketime):
    heartbeats carry the database's time, so for several heartbeat intervals its terminal stays active and readable,
    nothing is marked lost, and its last beat is recent by the database's clock."""
    import psycopg

    from .own_database import create_key

    database = {"DATABASE_URL": postgres, "TERMINALS_DATA_DIR": str(tmp_path)}
    # A beat a second: three silent ones (a worker gone) are far from a busy machine's pauses, and six of them
    # are still a tenth of the skew.
    server = start_split(webs=1, workers=1, TERMINALS_HEARTBEAT_INTERVAL_MS="1000", **database, **NO_CGROUPS)
    try:
        _, key = create_key(database, "alice")
        skewed = _skewed_worker(server, TERMINALS_HEARTBEAT_INTERVAL_MS="1000", **database, **NO_CGROUPS)
        skewed_id = skewed.log().split("terminal worker ", 1)[1].split()[0]
        api = Api(server.url, key)
        terminal = _create_on(api, skewed_id, shell="/bin/bash")["terminalId"]

        with psycopg.connect(postgres, autocommit=True) as connection:
            def database_seconds() -> float:
                return connection.execute("SELECT extract(epoch FROM clock_timestamp())").fetchone()[0]

            start = float(database_seconds())
            # Six heartbeat intervals by the database's clock: three silent ones would make a worker gone.
            wait_for(lambda: float(database_seconds()) - start >= 6 * 1.0, 30, "six heartbeat intervals")
            behind = connection.execute("SELECT extract(epoch FROM clock_timestamp() - last_seen) FROM "
                                        "terminals_worker WHERE id = %s", [skewed_id]).fetchone()[0]
            lost = connection.execute("SELECT count(*) FROM terminals_auditevent WHERE action = 'lost'").fetchone()[0]
        assert float(behind) < 3 * 1.0, f"the skewed worker's last beat is {behind} s old by the database's clock"
        assert lost == 0
        assert api.get(f"/api/terminals/{terminal}").json()["data"]["status"] == "active"
        assert api.run(terminal, "echo still-$((6*7))") == "still-42"
        api.cleanup()
    finally:
        server.stop()


def test_an_sse_follow_ends_with_an_error_event_when_its_worker_stops_beating(lone_worker):
    """The only worker killed under an SSE follow: once its heartbeat is stale the stream ends with an `error`
    event (WORKER_UNAVAILABLE, reconnect with Last-Event-ID) within WATCH_SECONDS, not a keepalive every 15 s."""
    import json

    split, key = lone_worker
    api = Api(split.url, key)
    terminal = api.create(shell="/bin/bash")["terminalId"]
    within = 3 * 0.3 + WATCH_SECONDS + 5
    with api.get(f"/api/terminals/{terminal}/output", params={"follow": "true"}, stream=True,
                 timeout=(5, within)) as stream:
        lines = stream.iter_lines(chunk_size=1, decode_unicode=True)
        assert next(line for line in lines if line.startswith("event: ")) == "event: attached"
        split.process("worker0").stop(signal.SIGKILL)
        events = [line for line in lines if line.startswith(("event: ", "data: "))]
    assert events[-2] == "event: error", events
    error = json.loads(events[-1].removeprefix("data: "))
    assert error["code"] == "WORKER_UNAVAILABLE" and "Last-Event-ID" in error["message"], error


def test_a_worker_judged_gone_while_frozen_takes_its_terminals_back_when_it_resumes(orm, keys):
    """A worker on this host frozen (SIGSTOP) for longer than three heartbeats is judged gone and its terminal
    marked lost by the other worker, which leaves its processes alone (the frozen worker's process still runs), as
    does a worker starting on this host meanwhile. It was only out of sight, so when it resumes it re-registers at
    its next beat and takes the terminal back: active again with the same pid and its shell, a `lost` and a
    `readopt` audit row, no exit, and /api/health shows the worker alive again."""
    from terminals.models import AuditEvent

    server = start_split(webs=1, workers=2, TERMINALS_HEARTBEAT_INTERVAL_MS="300", **NO_CGROUPS)
    try:
        api = Api(server.url, keys["alice"])
        terminal = api.create(shell="/bin/bash")
        terminal_id = terminal["terminalId"]
        host = api.get(f"/api/terminals/{terminal_id}").json()["data"]["worker"]
        frozen = _process_of(server, host)
        frozen.process.send_signal(signal.SIGSTOP)
        try:
            api.wait_status(terminal_id, "lost", timeout=15)
            assert not _health_of(api, host)["alive"]
            start_worker(server, **NO_CGROUPS)  # it ends what lost terminals of dead workers left on this host
            assert session_members(terminal["pid"]), "the frozen worker's shell was ended"
        finally:
            frozen.process.send_signal(signal.SIGCONT)
        record = api.wait_status(terminal_id, "active", timeout=15)
        assert (record["pid"], record["ended"], record["released"]) == (terminal["pid"], None, None), record
        assert api.run(terminal_id, "echo back-$((6*7))") == "back-42"
        actions = list(AuditEvent.objects.filter(terminal_id=terminal_id, action__in=["lost", "readopt", "exit"])
                       .order_by("id").values_list("action", flat=True))
        assert actions == ["lost", "readopt"], actions
        assert "was judged gone" in frozen.log()
        wait_for(lambda: _health_of(api, host)["alive"], 10, "the worker to show alive again")
        assert _health_of(api, host)["lost"] is None
        api.cleanup()
    finally:
        server.stop()


def _health_of(api: Api, worker_id: str) -> dict:
    """The worker's entry in /api/health."""
    workers = api.get("/api/health").json()["data"]["workers"]
    return next(worker for worker in workers if worker["id"] == worker_id)


def test_health_shows_a_killed_worker_dead_as_soon_as_its_terminals_are_lost(orm, keys):
    """SIGKILL a worker on this host: the survivor marks its terminal lost at its next beat, and from then on
    /api/health shows that worker `alive: false`, with when it was judged gone, although its last heartbeat is not
    three intervals old yet (the default 5 s interval: stale only after 15 s)."""
    server = start_split(webs=1, workers=2, TERMINALS_HEARTBEAT_INTERVAL_MS="5000", **NO_CGROUPS)
    try:
        api = Api(server.url, keys["alice"])
        terminal = api.create(shell="/bin/bash")["terminalId"]
        host = api.get(f"/api/terminals/{terminal}").json()["data"]["worker"]
        _process_of(server, host).stop(signal.SIGKILL)
        api.wait_status(terminal, "lost", timeout=15)
        entry = _health_of(api, host)
        assert entry["alive"] is False, entry
        assert entry["lost"] is not None, entry
        print(f"\nshown dead with a heartbeat {entry['heartbeatAgeMs']} ms old (stale after 15000 ms)")
        api.cleanup()
    finally:
        server.stop()


def test_a_creation_its_caller_gave_up_on_never_runs_on_a_worker_whose_clock_runs_behind(postgres, tmp_path):
    """Request deadlines are set and judged in the database's time: a worker whose clock runs a minute behind,
    frozen while a creation waits for it, drops that creation when it resumes (the caller got 503 and holds no id),
    instead of starting a terminal nobody knows of."""
    from .own_database import create_key

    database = {"DATABASE_URL": postgres, "TERMINALS_DATA_DIR": str(tmp_path)}
    timing = {"TERMINALS_WORKER_TIMEOUT_MS": str(TIMEOUT_MS), "TERMINALS_HEARTBEAT_INTERVAL_MS": "300"}
    server = start_split(webs=1, workers=1, **timing, **database, **NO_CGROUPS)
    try:
        _, key = create_key(database, "alice")
        skewed = _skewed_worker(server, **timing, **database, **NO_CGROUPS)
        server.process("worker0").stop()  # the skewed worker is the only one left to take creations
        api = Api(server.url, key)

        skewed.process.send_signal(signal.SIGSTOP)
        try:
            refused = api.post("/api/terminals", json={"shell": "/bin/bash"})
        finally:
            skewed.process.send_signal(signal.SIGCONT)
        assert (refused.status_code, refused.json()["error"]["code"]) == (503, "WORKER_UNAVAILABLE"), refused.text
        skewed.wait_for_log("dropped terminal.create: its caller gave up", timeout=10)
        fresh = api.create(shell="/bin/bash")["terminalId"]
        listed = api.get("/api/terminals", params={"status": "all"}).json()["data"]["terminals"]
        assert [row["terminalId"] for row in listed] == [fresh], listed
        api.cleanup()
    finally:
        server.stop()


def _unmarked_escapee(api: Api, terminal: str, name: str) -> int:
    """Starts a setsid child without the terminal's environment marker, so only its control groups tie it to the
    terminal; returns its pid."""
    api.send(terminal, f"env -u TERMINALS_TERMINAL_ID setsid bash -c 'exec -a {name} sleep 1004' >/dev/null 2>&1 &")

    def started():
        return [pid for pid in map(int, filter(str.isdigit, os.listdir("/proc"))) if command_line(pid).startswith(f"{name} ")]

    (pid,) = wait_for(started, 30, "the unmarked escapee to start")
    return pid


def test_a_new_worker_empties_a_killed_workers_cgroups(orm, keys):
    """A process that left its terminal's session and dropped the marker is still in the terminal's control groups:
    SIGKILL the worker, and the next worker starting on this host kills what is in the dead worker's groups and
    removes them."""
    server = start_split(webs=1, workers=1, TERMINALS_HEARTBEAT_INTERVAL_MS=str(HEARTBEAT_MS))
    try:
        api = Api(server.url, keys["alice"])
        terminal = api.create(shell="/bin/bash")["terminalId"]
        escapee = _unmarked_escapee(api, terminal, f"cgroup-escapee-{uuid.uuid4().hex[:8]}")
        dead = server.process("worker0")
        groups = [path for path in CGROUP_ROOT.glob(f"*/terminals-worker-*-{dead.pid}/{terminal}")]
        assert groups and all(str(escapee) in (group / "cgroup.procs").read_text().split() for group in groups)
        assert escapee not in marked_processes(MARKER).get(terminal, [])  # only the groups know it

        dead.stop(signal.SIGKILL)
        assert os.path.exists(f"/proc/{escapee}"), "the escapee should outlive the worker's kill"

        start_worker(server, TERMINALS_HEARTBEAT_INTERVAL_MS=str(HEARTBEAT_MS))
        wait_for(lambda: not os.path.exists(f"/proc/{escapee}") or command_line(escapee) == "", 10,
                 "the escapee to be killed")
        wait_for(lambda: not list(CGROUP_ROOT.glob(f"*/terminals-worker-*-{dead.pid}")), 10,
                 "the dead worker's groups removed")
        api.cleanup()
    finally:
        server.stop()


# A database outage: every heartbeat stops at once, and nobody is lost


# Three silent heartbeat intervals make a worker gone. Twelve seconds at a 1 s interval is twelve intervals, as a
# 60 s restart is at the default 5 s: either way every heartbeat is four times the threshold old when the database
# returns, which is what made every worker look dead. Nothing else in the outage scales with its wall time (a
# stopped PostgreSQL refuses connections at once). Not shorter intervals: a beat's own round trips after the restart
# (new connections) take a good part of 300 ms on a busy machine, long enough to hide the bug by luck.
OUTAGE_SECONDS = 12.0
OUTAGE_HEARTBEAT_MS = 1000
COUNTER = "i=0; while :; do printf 'n%d\\n' $i; i=$((i+1)); sleep 0.1; done"


def _counted(text: str) -> list[int]:
    import re

    return [int(number) for number in re.findall(r"n(\d+)\r?\n", text)]


def _worker_ids(server) -> list[str]:
    return [process.log().split("terminal worker ", 1)[1].split()[0]
            for process in server.processes if "terminal worker " in process.log()]


def test_a_database_outage_ends_no_terminal_and_loses_no_output(postgres_cluster, tmp_path):
    """PostgreSQL stopped for 12 heartbeat intervals (60 s at the default) under three workers, two with a terminal
    printing a counter every 0.1 s, one of them followed over a WebSocket: when it is back, and for six intervals
    more, both terminals are active with the same pid, nothing was marked lost, every number printed meanwhile is in
    the output, in order, and the WebSocket got them all, with no exit and no close."""
    import asyncio

    import psycopg
    import websockets

    from .own_database import create_key
    from .test_live import Live

    directory, url = postgres_cluster
    database = {"DATABASE_URL": url, "TERMINALS_DATA_DIR": str(tmp_path)}
    # A third worker, idle: before the fix, whichever worker beat first after the outage marked the others'
    # terminals lost unless they beat within a few milliseconds of it; with three, that luck is rare.
    server = start_split(webs=1, workers=3, TERMINALS_HEARTBEAT_INTERVAL_MS=str(OUTAGE_HEARTBEAT_MS), **database,
                         **NO_CGROUPS)
    try:
        _, key = create_key(database, "alice")
        api = Api(server.url, key)
        printing, followed = (_create_on(api, worker_id, command="/bin/bash", args=["-c", COUNTER])
                              for worker_id in _worker_ids(server)[:2])

        async def scenario(live: Live) -> None:
            await live.until(lambda live: len(_counted(live.text)) >= 5, "the first numbers")

            async def follow():
                with contextlib.suppress(websockets.ConnectionClosed):
                    while True:
                        await live.frame(timeout=3600)

            reading = asyncio.ensure_future(follow())
            # The outage itself, no request meanwhile: the fault's length is the point, so a plain sleep.
            await asyncio.to_thread(_postgres, "halt", directory)
            await asyncio.sleep(OUTAGE_SECONDS)
            await asyncio.to_thread(_postgres, "resume", directory)
            await asyncio.to_thread(_heartbeat_intervals_pass, url, 6)
            last = _counted(live.text)[-1]
            try:
                await asyncio.wait_for(_until(lambda: _counted(live.text)[-1] >= last + 10), 30)
            except TimeoutError:
                raise AssertionError(f"the followed terminal stopped printing at {last}: {live.frames[-3:]}") from None
            finally:
                reading.cancel()

        live = asyncio.run(_opened(server.url, followed["terminalId"], key, scenario))
        assert live.close_code is None and not [frame for frame in live.frames if frame["type"] in ("exit", "error")]
        streamed = _counted(live.text)
        assert streamed == list(range(streamed[-1] + 1)), "the WebSocket missed numbers"
        assert streamed[-1] >= (OUTAGE_SECONDS + 2) / 0.1 * 0.5  # it ran through the outage

        for terminal in (printing, followed):
            record = api.get(f"/api/terminals/{terminal['terminalId']}").json()["data"]
            assert (record["status"], record["pid"]) == ("active", terminal["pid"]), record
            os.kill(terminal["pid"], 0)  # still running
            numbers = _counted(api.full_output(terminal["terminalId"]))
            assert numbers == list(range(numbers[-1] + 1)), "numbers missing from the output"
        with psycopg.connect(url, autocommit=True) as connection:
            lost = connection.execute("SELECT count(*) FROM terminals_auditevent WHERE action = 'lost'").fetchone()[0]
        assert lost == 0
        api.cleanup()
    finally:
        server.stop()


async def _opened(url: str, terminal: str, key: str, scenario):
    from .test_live import Live

    live = await Live.open(url, terminal, key)
    await scenario(live)
    return live


async def _until(condition) -> None:
    import asyncio

    while not condition():
        await asyncio.sleep(0.05)


def _heartbeat_intervals_pass(url: str, intervals: int) -> None:
    """Waits (connecting until the database answers) until that many heartbeat intervals passed by its clock."""
    import psycopg

    def connected():
        try:
            return psycopg.connect(url, autocommit=True)
        except psycopg.OperationalError:
            return None

    with wait_for(connected, 30, "PostgreSQL to answer") as connection:
        def seconds() -> float:
            return float(connection.execute("SELECT extract(epoch FROM clock_timestamp())").fetchone()[0])

        start = seconds()
        wait_for(lambda: seconds() - start >= intervals * OUTAGE_HEARTBEAT_MS / 1000, 30,
                 f"{intervals} heartbeat intervals")


def test_a_worker_on_the_same_host_empties_a_killed_workers_cgroups_when_it_marks_its_terminals_lost(orm, keys):
    """A process that left its terminal's session and dropped the marker (`env -u`, as `env -i` does) is found only
    in the terminal's control groups: SIGKILL its worker, and the surviving worker on this host, marking the
    terminal lost, kills it and removes the dead worker's groups, with no worker starting."""
    server = start_split(webs=1, workers=2, TERMINALS_HEARTBEAT_INTERVAL_MS=str(HEARTBEAT_MS))
    try:
        api = Api(server.url, keys["alice"])
        terminal = api.create(shell="/bin/bash")["terminalId"]
        host = api.get(f"/api/terminals/{terminal}").json()["data"]["worker"]
        escapee = _unmarked_escapee(api, terminal, f"cgroup-escapee-{uuid.uuid4().hex[:8]}")
        dead = _process_of(server, host)
        groups = [path for path in CGROUP_ROOT.glob(f"*/terminals-worker-*-{dead.pid}/{terminal}")]
        assert groups and all(str(escapee) in (group / "cgroup.procs").read_text().split() for group in groups)

        dead.stop(signal.SIGKILL)
        api.wait_status(terminal, "lost", timeout=HEARTBEAT_MS / 1000 + 10)
        # In the same beat as the marking: soon, and before a worker starting on this host would (any worker of any
        # deployment does, and tests running alongside start them).
        wait_for(lambda: not os.path.exists(f"/proc/{escapee}") or command_line(escapee) == "", 2,
                 "the escapee to be killed")
        wait_for(lambda: not list(CGROUP_ROOT.glob(f"*/terminals-worker-*-{dead.pid}")), 2,
                 "the dead worker's groups removed")
        api.cleanup()
    finally:
        server.stop()
