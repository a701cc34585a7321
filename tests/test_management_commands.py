"""The management commands as an operator runs them: create_api_key, serve and terminal_worker."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import uuid
from datetime import timedelta

import pytest
import requests
from django.contrib.auth import get_user_model
from django.utils import timezone

from terminals.models import ApiKey

from .helpers import manage
from .servers import ROOT, ServiceProcess, service_env, wait_for

KEY = re.compile(r"^tk_[0-9a-f]{8}\.[A-Za-z0-9_-]{20,}$")
COMMAND_TIMEOUT = 60


def create_api_key(*args: str) -> tuple[str, subprocess.CompletedProcess]:
    """Runs create_api_key; returns the key on its last stdout line and the finished process."""
    finished = manage("create_api_key", *args)
    assert finished.returncode == 0, finished.stderr
    last_line = finished.stdout.rstrip("\n").splitlines()[-1]
    assert KEY.match(last_line), finished.stdout
    return last_line, finished


def username() -> str:
    return f"ops-{uuid.uuid4().hex[:8]}"


def list_terminals(server_url: str, key: str) -> requests.Response:
    return requests.get(f"{server_url}/api/terminals", headers={"X-API-Key": key}, timeout=30)


# create_api_key


# The key tests use the embedded server: the command writes the database, which every deployment reads alike.
def test_create_api_key_prints_a_working_key(orm, embedded_server):
    """create_api_key makes the user, prints the key alone on the last line, and the key works."""
    name = username()
    key, finished = create_api_key(name, "--name", "laptop")
    response = list_terminals(embedded_server.url, key)
    assert response.status_code == 200, response.text
    record = ApiKey.objects.for_key(key)
    assert record.user.username == name
    assert record.user.is_staff is False
    assert record.name == "laptop"
    assert record.expires_at is None
    assert key not in finished.stderr


def test_create_api_key_adds_a_key_to_an_existing_user(orm, embedded_server):
    """A second run for the same user adds a second key; both work."""
    name = username()
    first, _ = create_api_key(name)
    second, _ = create_api_key(name)
    assert first != second
    assert get_user_model().objects.filter(username=name).count() == 1
    assert ApiKey.objects.filter(user__username=name).count() == 2
    for key in (first, second):
        assert list_terminals(embedded_server.url, key).status_code == 200


def test_create_api_key_staff_makes_a_staff_user(orm, server, alice):
    """--staff makes the user staff, and the key sees other users' terminals."""
    key, _ = create_api_key(username(), "--staff")
    assert ApiKey.objects.for_key(key).user.is_staff is True
    terminal = alice.create()["terminalId"]
    listed = list_terminals(server.url, key).json()["data"]["terminals"]
    assert terminal in [item["terminalId"] for item in listed]


def test_create_api_key_expires_days_sets_the_expiry(orm, embedded_server):
    """--expires-days N makes a key that expires N days from now and works until then."""
    started = timezone.now()
    key, _ = create_api_key(username(), "--expires-days", "3")
    expires_at = ApiKey.objects.for_key(key).expires_at
    assert started + timedelta(days=3) <= expires_at <= timezone.now() + timedelta(days=3)
    assert list_terminals(embedded_server.url, key).status_code == 200


@pytest.mark.parametrize("days", ["0", "-2"])
def test_create_api_key_expires_days_below_one_fails(orm, days):
    """--expires-days 0 (or less) fails with a message, prints no key and creates no user."""
    name = username()
    finished = manage("create_api_key", name, "--expires-days", days)
    assert finished.returncode != 0
    assert "--expires-days" in finished.stderr
    assert not KEY.search(finished.stdout)
    assert get_user_model().objects.filter(username=name).exists() is False


# serve


def start_serve(data_dir: str, *extra: str) -> tuple[ServiceProcess, str]:
    """Starts `manage.py serve` on a free port with its data in data_dir; returns it and its URL."""
    process = ServiceProcess(
        "serve-fresh",
        [sys.executable, "manage.py", "serve", "--host", "127.0.0.1", "--port", "0", *extra],
        service_env(TERMINALS_DATA_DIR=data_dir),
    )
    log = process.wait_for_log("Listening on http://")
    return process, log.split("Listening on ", 1)[1].split()[0]


def printed_keys(log: str) -> list[str]:
    """The keys a banner shows on an "API key:" line."""
    return [match.group(1) for match in re.finditer(r"^\s*API key:\s+(\S+)$", log, re.M) if KEY.match(match.group(1))]


@pytest.fixture(scope="module")
def first_start(tmp_path_factory):
    """`serve` on a fresh data folder, as on a first install; yields its process, URL and log."""
    process, url = start_serve(str(tmp_path_factory.mktemp("first-start")))
    yield process, url, process.log()
    process.stop()


def test_serve_first_start_prints_a_working_key_once(first_start):
    """The first start prints one key, and that key creates a terminal."""
    _, url, log = first_start
    [key] = printed_keys(log)
    assert log.count(key) == 2  # on its own line and in the curl line
    headers = {"X-API-Key": key}
    created = requests.post(f"{url}/api/terminals", json={}, headers=headers, timeout=30)
    assert created.status_code == 201, created.text
    terminal = created.json()["data"]["terminalId"]
    ended = requests.delete(f"{url}/api/terminals/{terminal}", headers=headers, timeout=30)
    assert ended.status_code == 200, ended.text


def test_serve_first_start_prints_a_curl_line_for_this_server(first_start):
    """The printed curl line creates a terminal on the address the server listens on, with the printed key."""
    _, url, log = first_start
    [key] = printed_keys(log)
    [curl] = [line.strip() for line in log.splitlines() if line.strip().startswith("curl ")]
    assert f"X-API-Key: {key}" in curl
    assert "-X POST" in curl
    assert f"{url}/api/terminals " in curl, f"the curl line does not target {url}: {curl}"


def test_serve_second_start_prints_no_key(tmp_path):
    """A second start on the same data folder prints no key."""
    data_dir = str(tmp_path / "data")
    first, _ = start_serve(data_dir)
    assert len(printed_keys(first.log())) == 1
    assert first.stop() == 0
    second, url = start_serve(data_dir)
    try:
        assert requests.get(f"{url}/api/health", timeout=30).status_code == 200
        log = second.log()
        assert printed_keys(log) == []
        assert "curl" not in log
    finally:
        second.stop()


def test_serve_on_a_busy_port_exits_non_zero():
    """serve on a port another socket listens on exits with a non-zero status and says so."""
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        process = ServiceProcess(
            "serve-busy",
            [sys.executable, "manage.py", "serve", "--host", "127.0.0.1", "--port", str(port), "--no-bootstrap"],
            service_env(),
        )
        try:
            wait_for(lambda: not process.alive(), COMMAND_TIMEOUT, "serve on a busy port to exit")
        finally:
            returncode = process.stop()
    assert returncode not in (0, None), process.log()
    assert str(port) in process.log()
    assert "Listening on" not in process.log()


# terminal_worker


def test_terminal_worker_without_redis_url_fails_clearly():
    """terminal_worker without REDIS_URL exits non-zero and names REDIS_URL."""
    env = service_env()
    env.pop("REDIS_URL", None)
    finished = subprocess.run(
        [sys.executable, "manage.py", "terminal_worker"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT,
    )
    assert finished.returncode != 0
    assert "REDIS_URL" in finished.stderr
    assert "Traceback" not in finished.stderr
