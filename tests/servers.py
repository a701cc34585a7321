"""Real service processes for the tests: the embedded server, and redis-server, workers and daphne for the split mode."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parent.parent
START_TIMEOUT = 30.0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_for(predicate, timeout: float, what: str, interval: float = 0.02):
    """Polls predicate until it returns something truthy; fails the test after timeout seconds."""
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(interval)


# Everything the run started and every API key it made, for tests/test_zz_no_secrets.py to check at the end.
STARTED: list[ServiceProcess] = []
KEYS_MADE: list[str] = []


class ServiceProcess:
    """A child process whose output goes to a log file the tests can read."""

    def __init__(self, name: str, args: list[str], env: dict[str, str]) -> None:
        self.name = name
        self.env = env
        # scripts/test.sh gathers every log of a run in one folder (TERMINALS_TEST_LOGS), removed when the run passes.
        folder = os.environ.get("TERMINALS_TEST_LOGS") or None
        self.log_path = Path(tempfile.mkstemp(prefix=f"{name}-", suffix=".log", dir=folder)[1])
        STARTED.append(self)
        self._log = open(self.log_path, "wb")
        self.process = subprocess.Popen(args, cwd=ROOT, env=env, stdout=self._log, stderr=subprocess.STDOUT)

    @property
    def pid(self) -> int:
        return self.process.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def alive(self) -> bool:
        return self.process.poll() is None

    def wait_for_log(self, text: str, timeout: float = START_TIMEOUT) -> str:
        def seen():
            if not self.alive():
                raise AssertionError(f"{self.name} exited with {self.process.returncode}:\n{self.log()}")
            return text in self.log()

        wait_for(seen, timeout, f"{text!r} in the log of {self.name}")
        return self.log()

    def stop(self, signum: int = signal.SIGTERM, timeout: float = 15.0) -> int:
        if self.alive():
            self.process.send_signal(signum)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()
        return self.process.returncode


# Shells in the tests start from an empty home, so the machine's own dotfiles
# (a pyenv init waiting on a rehash lock, say) cannot change what they print.
TEST_HOME = tempfile.mkdtemp(prefix="terminals-home-")


def service_env(**overrides: str | None) -> dict[str, str]:
    """The environment of a service process: the test run's, with overrides (None removes a variable)."""
    env = dict(os.environ)
    env["HOME"] = TEST_HOME
    env["DJANGO_SETTINGS_MODULE"] = "config.settings"
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("TERMINALS_THROTTLE_RATE", "100000/min")
    env.setdefault("TERMINALS_CREATE_THROTTLE_RATE", "100000/min")
    env.setdefault("TERMINALS_ACCESS_LOG", "true")  # every URL lands in the log, where the secrets test looks
    env.update({name: value for name, value in overrides.items() if value is not None})
    for name in [name for name, value in overrides.items() if value is None]:
        env.pop(name, None)
    return env


@dataclass
class Server:
    """A running deployment: its base URL and its processes."""

    url: str
    mode: str
    processes: list[ServiceProcess] = field(default_factory=list)
    redis: ServiceProcess | None = None
    redis_url: str = ""
    urls: list[str] = field(default_factory=list)

    def process(self, name: str) -> ServiceProcess:
        return next(process for process in self.processes if process.name == name)

    def stop(self) -> None:
        for process in reversed(self.processes):
            process.stop()
        if self.redis is not None:
            self.redis.stop()


def start_embedded(**env: str) -> Server:
    """`manage.py serve` on a free port, exactly as the README runs it."""
    process = ServiceProcess(
        "serve",
        [sys.executable, "manage.py", "serve", "--host", "127.0.0.1", "--port", "0", "--no-bootstrap"],
        service_env(**env),
    )
    log = process.wait_for_log("Listening on http://")
    url = log.split("Listening on ", 1)[1].split()[0]
    server = Server(url=url, mode="embedded", processes=[process])
    wait_healthy(server)
    return server


def start_redis(port: int | None = None, *options: str) -> tuple[ServiceProcess, str]:
    """redis-server on a free port, or on port (to bring back a Redis that was stopped), empty either way; options
    are more of redis-server's."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise RuntimeError("redis-server is not installed (apt-get install redis-server)")
    port = port or free_port()
    process = ServiceProcess(
        "redis",
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", *options],
        dict(os.environ),
    )
    process.wait_for_log("Ready to accept connections")
    return process, f"redis://127.0.0.1:{port}/0"


def start_split(*, webs: int = 1, workers: int = 1, **env: str) -> Server:
    """redis-server, terminal_worker processes and daphne processes: the split deployment."""
    redis, redis_url = start_redis()
    environment = service_env(REDIS_URL=redis_url, **env)
    subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v0"], cwd=ROOT, env=environment, check=True)
    server = Server(url="", mode="split", redis=redis, redis_url=redis_url)
    for number in range(workers):
        worker = ServiceProcess(f"worker{number}", [sys.executable, "manage.py", "terminal_worker"], environment)
        server.processes.append(worker)
        worker.wait_for_log("ready on")
    urls = []
    for number in range(webs):
        port = free_port()
        web = ServiceProcess(
            f"web{number}",
            [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "config.asgi:application"],
            environment,
        )
        server.processes.append(web)
        urls.append(f"http://127.0.0.1:{port}")
    server.url, server.urls = urls[0], urls
    for url in urls:
        wait_healthy(Server(url=url, mode="split"))
    return server


def wait_healthy(server: Server, timeout: float = START_TIMEOUT) -> None:
    def healthy():
        try:
            return requests.get(f"{server.url}/api/health", timeout=2).status_code == 200
        except requests.ConnectionError:
            return False

    wait_for(healthy, timeout, f"{server.url}/api/health to answer 200")
