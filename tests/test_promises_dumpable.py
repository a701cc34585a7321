"""Every service process is non-dumpable (PR_SET_DUMPABLE 0): a process of the same account without CAP_SYS_PTRACE
cannot read its /proc/<pid>/environ or open its /proc/<pid>/mem.

The service runs as root here, and root reads anything, so the probe is root without the capabilities that pass
over dumpability (CAP_SYS_PTRACE; this kernel also lets CAP_SYS_ADMIN and CAP_PERFMON through). The kernel also
refuses a reader that lacks a capability its target has, dumpable or not, so the service processes are started
without those same capabilities: then whether the probe reads them depends on dumpability alone. Control processes
show that the probe reads a dumpable process and not a non-dumpable one.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from .servers import ROOT, START_TIMEOUT, Server, ServiceProcess, free_port, service_env, start_redis, wait_healthy

DROPPED = "-sys_ptrace,-sys_admin,-perfmon"


def without_ptrace(args: list[str]) -> list[str]:
    """args run as root without the capabilities that read a non-dumpable process."""
    return ["setpriv", f"--inh-caps={DROPPED}", f"--bounding-set={DROPPED}", "--", *args]


PROBE = """
import sys
pid = sys.argv[1]
try:
    open(f"/proc/{pid}/environ", "rb").read()
    print("environ-read")
except PermissionError:
    print("environ-refused")
try:
    open(f"/proc/{pid}/mem", "rb").close()
    print("mem-opened")
except PermissionError:
    print("mem-refused")
"""


def probe(pid: int) -> set[str]:
    """What the probe could do with the process's /proc entries."""
    result = subprocess.run(without_ptrace([sys.executable, "-c", PROBE, str(pid)]), capture_output=True, text=True,
                            timeout=30)
    assert result.returncode == 0, result.stderr
    return set(result.stdout.split())


HOLD = """
import ctypes, sys, time
if sys.argv[1] == "undumpable":
    assert ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0) == 0  # PR_SET_DUMPABLE
print("ready", flush=True)
time.sleep(120)
"""


@pytest.fixture
def controls():
    """Two processes started like the service, one left dumpable and one made non-dumpable."""
    started = {}
    for kind in ("dumpable", "undumpable"):
        process = subprocess.Popen(without_ptrace([sys.executable, "-c", HOLD, kind]), stdout=subprocess.PIPE,
                                   text=True)
        assert process.stdout.readline().strip() == "ready"
        started[kind] = process
    yield {kind: process.pid for kind, process in started.items()}
    for process in started.values():
        process.kill()
        process.wait()


def start_embedded_without_ptrace() -> Server:
    process = ServiceProcess("serve-undumpable", without_ptrace(
        [sys.executable, "manage.py", "serve", "--host", "127.0.0.1", "--port", "0", "--no-bootstrap"]),
        service_env())
    log = process.wait_for_log("Listening on http://")
    server = Server(url=log.split("Listening on ", 1)[1].split()[0], mode="embedded", processes=[process])
    wait_healthy(server)
    return server


def start_split_without_ptrace(webs: int = 2, workers: int = 2) -> Server:
    redis, redis_url = start_redis()
    environment = service_env(REDIS_URL=redis_url)
    subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v0"], cwd=ROOT, env=environment, check=True)
    server = Server(url="", mode="split", redis=redis, redis_url=redis_url)
    for number in range(workers):
        worker = ServiceProcess(f"worker-undumpable{number}",
                                without_ptrace([sys.executable, "manage.py", "terminal_worker"]), environment)
        server.processes.append(worker)
    for worker in server.processes:
        worker.wait_for_log("ready on", START_TIMEOUT)
    for number in range(webs):
        port = free_port()
        daphne = [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "config.asgi:application"]
        server.processes.append(ServiceProcess(f"web-undumpable{number}", without_ptrace(daphne), environment))
        server.urls.append(f"http://127.0.0.1:{port}")
    server.url = server.urls[0]
    for url in server.urls:
        wait_healthy(Server(url=url, mode="split"))
    return server


def test_the_probe_reads_a_dumpable_process_and_not_a_non_dumpable_one(controls):
    assert probe(controls["dumpable"]) == {"environ-read", "mem-opened"}
    assert probe(controls["undumpable"]) == {"environ-refused", "mem-refused"}


@pytest.mark.parametrize("mode", ["embedded", "split"])
def test_every_service_process_is_non_dumpable(mode, controls, django_db_setup):
    """The embedded server; in split mode each web process and each worker. Each answered requests first, so the
    check is of a process that has done its work, not one caught starting."""
    server = start_embedded_without_ptrace() if mode == "embedded" else start_split_without_ptrace()
    try:
        assert probe(controls["dumpable"]) == {"environ-read", "mem-opened"}  # the probe works right now
        for process in server.processes:
            assert process.alive(), process.log()
            assert probe(process.pid) == {"environ-refused", "mem-refused"}, process.name
    finally:
        server.stop()
