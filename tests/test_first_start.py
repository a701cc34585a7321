"""The first start of `manage.py serve` on an empty database, as a newcomer meets it: the banner's key, web login,
"Try it" line and hints all work as printed, and a second start prints no secret."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import tempfile

import requests

from .servers import ROOT, ServiceProcess, service_env


def start(data_dir: str) -> ServiceProcess:
    return ServiceProcess("serve-first", [sys.executable, "manage.py", "serve", "--host", "127.0.0.1", "--port", "0"],
                          service_env(TERMINALS_DATA_DIR=data_dir, DATABASE_URL=None))


def banner_of(process: ServiceProcess) -> str:
    return process.wait_for_log("Listening on", 120)


def log_in(url: str, username: str, password: str) -> requests.Session:
    http = requests.Session()
    page = http.get(f"{url}/admin/login/", timeout=30)
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)[1]
    answer = http.post(f"{url}/admin/login/?next=/admin/", timeout=30, allow_redirects=False,
                       data={"csrfmiddlewaretoken": token, "username": username, "password": password},
                       headers={"Referer": f"{url}/admin/login/"})
    assert answer.status_code == 302, answer.text
    return http


def test_the_first_start_prints_working_credentials_once():
    data_dir = tempfile.mkdtemp(prefix="terminals-first-")
    server = start(data_dir)
    try:
        banner = banner_of(server)
        url = re.search(r"Listening on (http://\S+)", banner)[1]
        key = re.search(r"API key:\s+(tk_\S+)", banner)[1]
        password = re.search(r"Web: +\S+/\s+\(the dashboard; user admin, password (\S+);", banner)[1]

        assert requests.get(f"{url}/api/terminals", headers={"X-API-Key": key}, timeout=30).status_code == 200
        admin = log_in(url, "admin", password)
        index = admin.get(f"{url}/admin/", timeout=30)
        assert index.status_code == 200 and "Terminals administration" in index.text

        # "Try it", run as printed: a terminal in /tmp, not in the service's own checkout.
        try_it = re.search(r"^  (curl .*)$", banner, re.M)[1]
        created = subprocess.run(try_it, shell=True, capture_output=True, text=True, timeout=60, check=True)
        terminal = re.search(r'"terminalId":\s*"([^"]+)"', created.stdout)[1]
        record = requests.get(f"{url}/api/terminals/{terminal}", headers={"X-API-Key": key}, timeout=30).json()
        assert record["data"]["cwd"] == "/tmp", record

        # "More keys", run as printed from the project folder.
        hint = re.search(r"More keys: (.*) manage.py create_api_key USERNAME", banner)[1]
        made = subprocess.run([*shlex.split(hint), "manage.py", "create_api_key", "second-user"], cwd=ROOT,
                              env=service_env(TERMINALS_DATA_DIR=data_dir, DATABASE_URL=None), capture_output=True,
                              text=True, timeout=60)
        assert made.returncode == 0, made.stderr
        second = made.stdout.strip().splitlines()[-1]
        assert requests.get(f"{url}/api/terminals", headers={"X-API-Key": second}, timeout=30).status_code == 200
    finally:
        server.stop()

    again = start(data_dir)
    try:
        later = banner_of(again)
    finally:
        again.stop()
    assert "password" not in later and "API key" not in later and key not in later and password not in later
