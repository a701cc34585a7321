"""Several worker hosts (docs/operations.md, adding a worker host): each worker here runs in its own UTS and PID
namespaces, so it has a hostname of its own and sees only its own processes, as on a separate machine. Terminals
run on their worker's host; a host that dies loses only its terminals, found by heartbeat; and two hosts that share
a hostname do not take each other for dead."""

from __future__ import annotations

import signal
import subprocess
import sys
from datetime import timedelta

import pytest

from terminals.models import AuditEvent, TerminalSession, Worker

from .client import Api
from .servers import ROOT, Server, ServiceProcess, free_port, service_env, start_redis, wait_for, wait_healthy

HEARTBEAT_MS = 300


class HostProcess(ServiceProcess):
    def stop(self, signum: int = signal.SIGKILL, timeout: float = 15.0) -> int:
        # unshare waits out SIGTERM; killed, it takes its child, the namespace's first process, and so everything
        # the "host" ran (--kill-child): a power cut.
        return super().stop(signum, timeout)


def start_host(server: Server, hostname: str, env: dict[str, str]) -> ServiceProcess:
    """A terminal worker on a "host" of its own; stopping it kills everything in it at once, as a power cut would."""
    number = len(server.processes)
    # Separate hosts give their workers different pids; a few short processes first make sure they differ here too
    # (the same pid on two hosts would hide a worker that takes another host's pid for one of its own).
    worker = HostProcess(
        f"host-{hostname}-{number}",
        ["unshare", "--uts", "--pid", "--fork", "--mount-proc", "--kill-child", "sh", "-c",
         'hostname "$0" && for _ in $(seq "$2"); do /bin/true; done && "$1" manage.py terminal_worker; exit $?',
         hostname, sys.executable, str(number)],
        env,
    )
    server.processes.insert(0, worker)
    worker.wait_for_log("ready on")
    return worker


@pytest.fixture
def hosts(orm):
    """Redis, a web process on this host, and a function that adds worker hosts; one terminal per worker."""
    redis, redis_url = start_redis()
    # A busy machine may take a few seconds to pass a creation from a full worker on; a request to a dead host waits
    # this long too before the heartbeat gives it away, so it stays well under the clients' 30 s.
    env = service_env(REDIS_URL=redis_url, TERMINALS_HEARTBEAT_INTERVAL_MS=str(HEARTBEAT_MS), TERMINALS_MAX_TOTAL="1",
                      TERMINALS_WORKER_TIMEOUT_MS="20000")
    subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v0"], cwd=ROOT, env=env, check=True)
    port = free_port()
    server = Server(url=f"http://127.0.0.1:{port}", mode="split", redis=redis, redis_url=redis_url)
    server.processes.append(ServiceProcess(
        "web0", [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "config.asgi:application"], env))
    server.env = env
    yield server, lambda hostname: start_host(server, hostname, env)
    server.stop()


def one_terminal_on_each(server: Server, key: str, count: int) -> tuple[Api, dict[str, str]]:
    """With room for one terminal per worker, count creations land one on each host: terminal id by host."""
    wait_healthy(server)
    api = Api(server.url, key)
    terminals = [api.create(shell="/bin/bash")["terminalId"] for _ in range(count)]
    on = {}
    for terminal in terminals:
        on[api.run(terminal, "hostname")] = terminal
    return api, on


def test_terminals_run_on_their_workers_host_and_a_dead_host_loses_only_its_own(hosts, keys):
    """A worker on this host holds a terminal before two more hosts join; joining, each looks for the control groups
    of killed workers of its own host, and must not take this host's groups (same cgroup tree, other pids) for
    those: the first terminal lives on. Then each host gets a terminal, and one host dies."""
    server, add_host = hosts
    here = ServiceProcess("worker-here", [sys.executable, "manage.py", "terminal_worker"], server.env)
    server.processes.insert(0, here)
    here.wait_for_log("ready on")
    wait_healthy(server)
    api = Api(server.url, keys["alice"])
    local = api.create(shell="/bin/bash")["terminalId"]
    first = add_host("host-a")
    add_host("host-b")
    _, on = one_terminal_on_each(server, keys["alice"], 2)
    api.created += list(on.values())
    assert set(on) == {"host-a", "host-b"}, on
    assert api.run(local, "echo here-$((3+3))") == "here-6"
    report = {worker["hostname"]: worker for worker in api.get("/api/health").json()["data"]["workers"]}
    assert report["host-a"]["alive"] and report["host-b"]["alive"]
    assert {worker: report[worker]["activeTerminals"] for worker in ("host-a", "host-b")} == {"host-a": 1, "host-b": 1}

    first.stop()  # host-a goes away: its worker and everything it ran, at once
    # host-b cannot see host-a's processes, so it goes by the heartbeat: lost after three missed beats.
    api.wait_status(on["host-a"], "lost", timeout=60)  # the first read may wait out the worker timeout
    assert AuditEvent.objects.filter(terminal_id=on["host-a"], action="lost").count() == 1
    assert api.run(on["host-b"], "echo still-$((1+1))") == "still-2"
    assert TerminalSession.objects.get(pk=on["host-b"]).status == "active"
    api.cleanup()


def test_two_hosts_with_one_hostname_do_not_take_each_other_for_dead(hosts, keys):
    """A hostname says nothing about which pids a worker can see: two hosts both called "twin" each hold a
    terminal, and while both beat, neither marks the other's terminal lost (the pid of one means nothing to the
    other). Before, the second treated the first's pid, absent from its own processes, as a crash."""
    server, add_host = hosts
    add_host("twin"), add_host("twin")
    api, on = one_terminal_on_each(server, keys["alice"], 2)
    assert list(on) == ["twin"] and len(TerminalSession.objects.filter(pk__in=api.created).values("worker")
                                            .distinct()) == 2
    workers = list(Worker.objects.filter(hostname="twin", stopped__isnull=True))
    assert len(workers) == 2 and workers[0].process_space != workers[1].process_space

    # Let each worker beat, and so look for lost terminals, at least five more times.
    seen = {worker.id: worker.last_seen for worker in workers}
    wait_for(lambda: all(Worker.objects.get(pk=worker).last_seen >= seen[worker] + timedelta(milliseconds=5 * HEARTBEAT_MS)
                         for worker in seen), 30, "five more heartbeats of each worker")
    assert sorted(TerminalSession.objects.filter(pk__in=api.created).values_list("status", flat=True)) == ["active"] * 2
    for terminal in api.created:
        assert api.run(terminal, "echo alive-$((2+2))") == "alive-4"
    api.cleanup()
