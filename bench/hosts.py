"""The multi-host split deployment of figure 11 on this machine: PostgreSQL, Redis, worker "hosts" (each worker in a
UTS and PID namespace of its own, as tests/test_worker_hosts.py runs them) and several daphne web processes, all on
127.0.0.1; and what each kind of process costs, read from /proc, Redis's INFO and PostgreSQL's statistics."""

from __future__ import annotations

import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from urllib.parse import urlencode

import requests

from tests import servers

from . import service
from .common import ROOT, log

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


class HostProcess(servers.ServiceProcess):
    """`unshare ... terminal_worker`: killed, it takes the namespace's first process and so everything the "host"
    ran (--kill-child), as a power cut would. unshare waits out SIGTERM, so SIGKILL is how it stops."""

    def stop(self, signum: int = signal.SIGKILL, timeout: float = 15.0) -> int:
        return super().stop(signum, timeout)


@dataclass
class Endpoint:
    """One web process, as the WebSocket clients of bench/live.py need it (a url, a key, ws_url)."""

    url: str
    key: str

    def ws_url(self, terminal_id: str, **query) -> str:
        suffix = f"?{urlencode(query)}" if query else ""
        return f"{self.url.replace('http://', 'ws://', 1)}/ws/terminals/{terminal_id}/{suffix}"


@dataclass
class Deployment:
    mode: str  # "split" (several hosts) or "embedded"
    key: str
    endpoints: list[Endpoint]
    kinds: dict[str, list[int]]  # process kind -> pids of the service's own processes (shells found below them)
    redis_url: str = ""
    database_url: str = ""
    hosts: dict[str, HostProcess] = field(default_factory=dict)  # hostname -> its unshare process
    stoppers: list = field(default_factory=list)
    environment: dict[str, str] = field(default_factory=dict)  # the worker hosts' environment
    started: list = field(default_factory=list)  # the ServiceProcesses it started (their logs go with it)

    def restart_host(self, hostname: str) -> None:
        """Starts a worker on a host that was stopped (killed): a new namespace with the same hostname."""
        old = self.hosts[hostname]
        if old.alive():
            raise RuntimeError(f"{hostname} is still running")
        host = start_host(hostname, len(self.stoppers), self.environment)
        self.hosts[hostname] = host
        self.stoppers.append(host.stop)
        self.started.append(host)
        workers = self.kinds["worker"]
        workers[:] = [pid for pid in workers if os.path.exists(f"/proc/{pid}")] + [_worker_below(host.pid)]

    @property
    def url(self) -> str:
        return self.endpoints[0].url

    def stop(self) -> None:
        for stopper in reversed(self.stoppers):
            try:
                stopper()
            except Exception as error:  # noqa: BLE001 - stop everything else all the same
                log(f"stopping part of the {self.mode} deployment failed: {error!r}")
        for process in self.started:  # their logs, as bench/service.py removes its servers' logs
            process.log_path.unlink(missing_ok=True)


def start_postgres() -> tuple[str, str] | None:
    """(folder, DATABASE_URL) of a throwaway cluster (scripts/postgres.sh); None when PostgreSQL is not installed."""
    started = subprocess.run([str(ROOT / "scripts" / "postgres.sh"), "start"], capture_output=True, text=True)
    if started.returncode != 0:
        log(f"no PostgreSQL ({started.stderr.strip()}): the multi-host deployment uses SQLite")
        return None
    folder, url = started.stdout.split()
    return folder, url


def stop_postgres(folder: str) -> None:
    subprocess.run([str(ROOT / "scripts" / "postgres.sh"), "stop", folder], capture_output=True, check=False)


def start_split(hosts: int, webs: int, settings: dict[str, str]) -> Deployment:
    """PostgreSQL (SQLite when it is not installed), Redis, `hosts` worker hosts and `webs` daphne processes."""
    deployment = Deployment(mode="split", key="", endpoints=[], kinds={"web": [], "worker": []})
    try:
        _start_split(deployment, hosts, webs, settings)
    except BaseException:
        deployment.stop()
        raise
    return deployment


def _start_split(deployment: Deployment, hosts: int, webs: int, settings: dict[str, str]) -> None:
    data_dir = tempfile.mkdtemp(prefix="bench-hosts-")
    deployment.stoppers.append(lambda: shutil.rmtree(data_dir, ignore_errors=True))
    env = {"TERMINALS_DATA_DIR": data_dir, **service.SERVICE_SETTINGS, **settings}
    postgres = start_postgres()
    if postgres:
        deployment.stoppers.append(lambda: stop_postgres(postgres[0]))
        env["DATABASE_URL"] = deployment.database_url = postgres[1]
        deployment.kinds["postgres"] = [_postmaster(postgres[0])]
    deployment.key = service._create_key(env)  # migrates, then makes the staff key
    redis, deployment.redis_url = servers.start_redis()
    deployment.stoppers.append(redis.stop)
    deployment.started.append(redis)
    deployment.kinds["redis"] = [redis.pid]
    environment = deployment.environment = servers.service_env(REDIS_URL=deployment.redis_url, **env)
    for number in range(hosts):
        host = start_host(f"host-{chr(ord('a') + number)}", number, environment)
        deployment.stoppers.append(host.stop)
        deployment.started.append(host)
        deployment.hosts[host.hostname] = host
        deployment.kinds["worker"].append(_worker_below(host.pid))
    for number in range(webs):
        port = servers.free_port()
        web = servers.ServiceProcess(
            f"web{number}",
            [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "config.asgi:application"],
            environment,
        )
        deployment.stoppers.append(web.stop)
        deployment.started.append(web)
        deployment.kinds["web"].append(web.pid)
        deployment.endpoints.append(Endpoint(f"http://127.0.0.1:{port}", ""))
    for endpoint in deployment.endpoints:
        endpoint.key = deployment.key
        servers.wait_healthy(servers.Server(url=endpoint.url, mode="split"))
    log(f"split: {hosts} worker hosts, {webs} web processes on {', '.join(e.url for e in deployment.endpoints)}, "
        f"{'PostgreSQL' if postgres else 'SQLite'}, Redis at {deployment.redis_url}")


def start_host(hostname: str, number: int, environment: dict[str, str]) -> HostProcess:
    """A terminal worker on a "host" of its own (tests/test_worker_hosts.py): its own hostname and process space.
    A few short processes first give each host's worker a different pid, as on separate machines."""
    host = HostProcess(
        f"host-{hostname}",
        ["unshare", "--uts", "--pid", "--fork", "--mount-proc", "--kill-child", "sh", "-c",
         'hostname "$0" && for _ in $(seq "$2"); do /bin/true; done && "$1" manage.py terminal_worker; exit $?',
         hostname, sys.executable, str(number + 1)],
        environment,
    )
    host.hostname = hostname
    host.wait_for_log("ready on")
    return host


def start_embedded(settings: dict[str, str]) -> Deployment:
    """`manage.py serve` (tests/servers.py), as every other figure starts it: one process, SQLite."""
    embedded = service.start("embedded", settings)
    return Deployment(
        mode="embedded",
        key=embedded.key,
        endpoints=[Endpoint(embedded.url, embedded.key)],
        kinds={"web+worker": embedded.pids},
        stoppers=[embedded.stop],
    )


# --- what the processes cost -------------------------------------------------------------------------------------


def _children() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    parent = int(stat.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry))
    return children


def _descendants(pid: int, children: dict[int, list[int]]) -> list[int]:
    found, todo = [], list(children.get(pid, []))
    while todo:
        child = todo.pop()
        found.append(child)
        todo.extend(children.get(child, []))
    return found


def _worker_below(host_pid: int) -> int:
    """The terminal_worker process inside a host's namespace (unshare -> sh -> python)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        for pid in _descendants(host_pid, _children()):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                    if b"terminal_worker" in cmdline.read() and _comm(pid).startswith("python"):
                        return pid
            except OSError:
                continue
        time.sleep(0.05)
    raise RuntimeError(f"no terminal_worker process below {host_pid}")


def _postmaster(folder: str) -> int:
    with open(os.path.join(folder, "data", "postmaster.pid")) as pidfile:
        return int(pidfile.readline())


def _comm(pid: int) -> str:
    with open(f"/proc/{pid}/comm") as comm:
        return comm.read().strip()


def _ticks_and_memory(pid: int) -> tuple[int, int] | None:
    """CPU ticks and PSS bytes (resident memory with each shared page divided among its sharers, so PostgreSQL's
    shared buffers and the forked shells' common pages count once), or None for a process that ended meanwhile."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        with open(f"/proc/{pid}/smaps_rollup") as rollup:
            pss = next(int(line.split()[1]) * 1024 for line in rollup if line.startswith("Pss:"))
        return int(fields[11]) + int(fields[12]), pss
    except (OSError, IndexError, ValueError, StopIteration):
        return None


def process_snapshot(kinds: dict[str, list[int]]) -> dict[str, dict[int, tuple[int, int]]]:
    """kind -> pid -> (CPU ticks, PSS bytes). PostgreSQL's kind holds every backend below the postmaster; the
    shells, every process below the workers (their terminals and what runs in them); bench, this client."""
    children = _children()
    groups = {kind: list(pids) for kind, pids in kinds.items()}
    if "postgres" in groups:
        groups["postgres"] += _descendants(groups["postgres"][0], children)
    workers = kinds.get("worker") or kinds.get("web+worker") or []
    groups["shells"] = [pid for worker in workers for pid in _descendants(worker, children)]
    groups["bench client"] = [os.getpid()]
    snapshot = {}
    for kind, pids in groups.items():
        snapshot[kind] = {pid: read for pid in pids if (read := _ticks_and_memory(pid)) is not None}
    return snapshot


def process_costs(before: dict, after: dict, seconds: float) -> dict[str, dict[str, float]]:
    """kind -> {"cpu": % of one core over the interval, "rss_mb": PSS at its end, "count": processes}.
    A process born in the interval counts all its CPU time; one that ended in it counts none (short shells)."""
    costs = {}
    for kind, now in after.items():
        earlier = before.get(kind, {})
        ticks = sum(cpu - earlier.get(pid, (0, 0))[0] for pid, (cpu, _) in now.items())
        costs[kind] = {
            "cpu": 100 * ticks / CLOCK_TICKS / seconds,
            "rss_mb": sum(rss for _, rss in now.values()) / 1e6,
            "count": len(now),
        }
    return costs


def redis_info(url: str) -> dict | None:
    if not url:
        return None
    import redis

    client = redis.Redis.from_url(url, socket_timeout=5)
    try:
        info = client.info()
    finally:
        client.close()
    return {"commands": info["total_commands_processed"], "memory_mb": info["used_memory"] / 1e6,
            "clients": info["connected_clients"]}


def postgres_stats(url: str) -> dict | None:
    """Transactions (every statement is one under Django's autocommit) and rows written, from pg_stat_database."""
    if not url:
        return None
    import psycopg

    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute("SELECT pg_stat_clear_snapshot()")
        row = connection.execute(
            "SELECT xact_commit + xact_rollback, tup_inserted + tup_updated + tup_deleted "
            "FROM pg_stat_database WHERE datname = current_database()"
        ).fetchone()
        # Counted, not from the statistics: a backend may report its counts up to seconds late.
        audit = connection.execute("SELECT count(*) FROM terminals_auditevent").fetchone()[0]
        clients = connection.execute("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'"
                                     ).fetchone()[0]
        limit = int(connection.execute("SHOW max_connections").fetchone()[0])
    return {"transactions": row[0], "rows_written": row[1], "audit_rows": audit, "connections": clients,
            "max_connections": limit}


def machine_ticks() -> tuple[int, int]:
    """(busy, all) CPU ticks of the whole machine since boot, from /proc/stat (iowait counts as idle)."""
    with open("/proc/stat") as stat:
        fields = [int(value) for value in stat.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return sum(fields) - idle, sum(fields)


def stats_snapshot(deployment: Deployment) -> dict:
    return {
        "at": time.monotonic(),
        "machine": machine_ticks(),
        "processes": process_snapshot(deployment.kinds),
        "redis": _quietly(redis_info, deployment.redis_url),
        "postgres": _quietly(postgres_stats, deployment.database_url),
    }


def stats_between(before: dict, after: dict) -> dict:
    seconds = after["at"] - before["at"]
    measured = {"processes": process_costs(before["processes"], after["processes"], seconds)}
    busy, every = (after["machine"][0] - before["machine"][0]), (after["machine"][1] - before["machine"][1])
    cores = os.cpu_count() or 1
    measured["machine_busy"] = 100 * cores * busy / every if every else math.nan  # % of one core, like the rest
    measured["others_cpu"] = measured["machine_busy"] - sum(cost["cpu"] for cost in measured["processes"].values())
    if before["redis"] and after["redis"]:
        measured["redis_ops"] = (after["redis"]["commands"] - before["redis"]["commands"]) / seconds
        measured["redis_mb"] = after["redis"]["memory_mb"]
    if before["postgres"] and after["postgres"]:
        measured["pg_tps"] = (after["postgres"]["transactions"] - before["postgres"]["transactions"]) / seconds
        measured["pg_writes"] = (after["postgres"]["rows_written"] - before["postgres"]["rows_written"]) / seconds
        measured["audit_rows"] = (after["postgres"]["audit_rows"] - before["postgres"]["audit_rows"]) / seconds
        measured["pg_connections"] = f"{after['postgres']['connections']} of {after['postgres']['max_connections']}"
    return measured


def _quietly(read, *args):
    try:
        return read(*args)
    except Exception as error:  # noqa: BLE001 - a missing statistic leaves its cell empty, the run goes on
        log(f"{read.__name__} failed: {error!r}")
        return None


def wait_for_workers(endpoint: Endpoint, count: int, timeout: float = 30.0) -> dict[str, str]:
    """Worker id -> hostname once count workers are alive (GET /api/health)."""

    def alive():
        answer = requests.get(f"{endpoint.url}/api/health", timeout=5).json()["data"]
        workers = {w["id"]: w["hostname"] for w in answer.get("workers", []) if w.get("alive")}
        return workers if len(workers) >= count else None

    return servers.wait_for(alive, timeout, f"{count} live workers", interval=0.2)


def totals_between(before: dict, after: dict) -> dict:
    """The raw amounts between two snapshots: seconds, CPU seconds by kind, Redis commands, PostgreSQL transactions
    and rows written (the per-unit costs of figure 11 divide these)."""
    seconds = after["at"] - before["at"]
    costs = process_costs(before["processes"], after["processes"], seconds)
    amounts = {"seconds": seconds, **{f"cpu:{kind}": cost["cpu"] * seconds / 100 for kind, cost in costs.items()}}
    if before["redis"] and after["redis"]:
        amounts["redis"] = after["redis"]["commands"] - before["redis"]["commands"]
    if before["postgres"] and after["postgres"]:
        amounts["pg_xacts"] = after["postgres"]["transactions"] - before["postgres"]["transactions"]
        amounts["pg_rows"] = after["postgres"]["rows_written"] - before["postgres"]["rows_written"]
        amounts["audit_rows"] = after["postgres"]["audit_rows"] - before["postgres"]["audit_rows"]
    return amounts


# Causes the processes' logs name, in words for the table (the first that matches is given).
KNOWN_CAUSES = (
    ("too many clients already", "PostgreSQL out of connections, workers' heartbeats failed; "),
)


def known_cause(deployment: Deployment) -> str:
    """A known reason for a failure, read from the worker hosts' logs ("" when none is found)."""
    logs = []
    for host in deployment.hosts.values():
        try:
            logs.append(host.log())
        except OSError:
            continue
    return next((cause for text, cause in KNOWN_CAUSES if any(text in log for log in logs)), "")
