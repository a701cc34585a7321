"""The split deployment when a worker goes away: fast 503s, lost terminals, and a new worker taking over."""

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
    wait_for(lambda: ESCAPED <= set(_left_running(terminal["terminalId"]).values()), 10, "the escapees to start")
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
    # Relabelled before the kill, so no check can see the process gone: only the silence counts.
    Worker.objects.filter(pk=host).update(hostname="elsewhere.invalid")
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


def _unmarked_escapee(api: Api, terminal: str, name: str) -> int:
    """Starts a setsid child without the terminal's environment marker, so only its control groups tie it to the
    terminal; returns its pid."""
    api.send(terminal, f"env -u TERMINALS_TERMINAL_ID setsid bash -c 'exec -a {name} sleep 1004' >/dev/null 2>&1 &")

    def started():
        return [pid for pid in map(int, filter(str.isdigit, os.listdir("/proc"))) if command_line(pid).startswith(f"{name} ")]

    (pid,) = wait_for(started, 10, "the unmarked escapee to start")
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
        groups = [path for path in CGROUP_ROOT.glob(f"*/terminals-worker-{dead.pid}/{terminal}")]
        assert groups and all(str(escapee) in (group / "cgroup.procs").read_text().split() for group in groups)
        assert escapee not in marked_processes(MARKER).get(terminal, [])  # only the groups know it

        dead.stop(signal.SIGKILL)
        assert os.path.exists(f"/proc/{escapee}"), "the escapee should outlive the worker's kill"

        start_worker(server, TERMINALS_HEARTBEAT_INTERVAL_MS=str(HEARTBEAT_MS))
        wait_for(lambda: not os.path.exists(f"/proc/{escapee}") or command_line(escapee) == "", 10,
                 "the escapee to be killed")
        wait_for(lambda: not list(CGROUP_ROOT.glob(f"*/terminals-worker-{dead.pid}")), 10,
                 "the dead worker's groups removed")
        api.cleanup()
    finally:
        server.stop()
