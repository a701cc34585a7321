"""The last tests of the run (conftest.py keeps them last): no API key or secret appears in a URL, a log line, an
error page or an audit row.

First keys are sent in the wrong places (query parameters, the path, malformed Authorization headers) to both
deployments, and no answer may quote them. Then everything the run produced is searched for the secrets it used:
the log of every process tests/servers.py started (daphne's access log included, so every URL is there), and every
column of every audit row, in the test database and in the databases of the servers that had their own.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import requests
from django.conf import settings
from django.db import connection

from . import run_manifest
from .servers import KEYS_MADE, STARTED

# The other pytest processes of a parallel run (scripts/test.sh runs this file after them): their keys, processes
# and databases are searched too.
EARLIER = run_manifest.read_all()

# Requests with a key in the wrong place: (method, path, headers); KEY is the misplaced key, GOOD a valid one.
PROBES = [
    ("GET", "/api/terminals?api_key=KEY", {}),
    ("GET", "/api/terminals?key=KEY&status=all", {"X-API-Key": "GOOD"}),
    ("GET", "/api/terminals/KEY", {"X-API-Key": "GOOD"}),
    ("POST", "/api/terminals/KEY/input", {"X-API-Key": "GOOD"}),
    ("GET", "/api/KEY", {"X-API-Key": "GOOD"}),
    ("GET", "/api/health?token=KEY", {}),
    ("GET", "/api/terminals", {"Authorization": "KEY"}),
    ("GET", "/api/terminals", {"Authorization": "Token KEY"}),
    ("GET", "/api/terminals", {"Authorization": "Api-Key KEY KEY"}),
    ("GET", "/api/terminals", {"Authorization": "Basic KEY"}),
    ("GET", "/api/terminals", {"X-API-Key": "KEY-and-more"}),
    ("DELETE", "/api/terminals/KEY?signal=SIGKILL", {"X-API-Key": "GOOD"}),
]


def secret(key: str) -> str:
    return key.split(".", 1)[1]


def answer_text(response: requests.Response) -> str:
    return response.text + "".join(f"{name}: {value}\n" for name, value in response.headers.items())


@pytest.mark.parametrize("probe", PROBES, ids=[f"{method} {path} {sorted(headers.values())}"
                                               for method, path, headers in PROBES])
def test_a_key_in_the_wrong_place_is_not_echoed(server, keys, probe):
    """The answer neither quotes the misplaced key nor accepts it as credentials."""
    method, path, headers = probe
    misplaced, good = keys["bob"], keys["alice"]
    headers = {name: value.replace("KEY", misplaced).replace("GOOD", good) for name, value in headers.items()}
    body = {"input": "echo not-typed"} if method == "POST" else None
    response = requests.request(method, f"{server.url}{path.replace('KEY', misplaced)}", headers=headers, json=body,
                                timeout=30)
    assert secret(misplaced) not in answer_text(response), response.text
    if "GOOD" not in probe[2].values() and "health" not in path:
        assert response.status_code == 401, response.text  # a key anywhere but its headers is no key at all


def test_audit_refuses_a_key_in_its_query_without_echoing_it(server, keys):
    """The audit list refuses a parameter it does not take, a key put in one included, without quoting the key;
    its next-page link repeats the query string, which then holds no key."""
    response = requests.get(f"{server.url}/api/audit", params={"pageSize": 1, "api_key": keys["bob"]},
                            headers={"X-API-Key": keys["staff"]}, timeout=30)
    assert response.status_code == 400, response.text
    assert secret(keys["bob"]) not in answer_text(response)
    paged = requests.get(f"{server.url}/api/audit", params={"pageSize": 1}, headers={"X-API-Key": keys["staff"]},
                         timeout=30)
    assert paged.status_code == 200 and paged.json()["data"]["next"], paged.text


def test_acp_errors_do_not_echo_a_key(server, keys):
    """A JSON-RPC call that names a key as a terminal id gets an error without it."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "terminal/output",
            "params": {"sessionId": "s", "terminalId": keys["bob"]}}
    response = requests.post(f"{server.url}/api/acp", json=body, headers={"X-API-Key": keys["alice"]}, timeout=30)
    assert response.status_code == 200, response.text
    assert "error" in response.json()
    assert secret(keys["bob"]) not in answer_text(response)


def secrets_of_the_run() -> dict[str, str]:
    """What must never be written anywhere, by a name that can be printed."""
    keys = KEYS_MADE + [key for manifest in EARLIER for key in manifest.keys]
    found = {f"API key {key.split('.')[0]}": secret(key) for key in keys}
    found["SECRET_KEY"] = settings.SECRET_KEY
    for number, manifest in enumerate(EARLIER):
        found[f"SECRET_KEY of pytest process {number}"] = manifest.secret_key
    environments = [dict(os.environ)] + [process.env for process in all_started()]
    environments += [manifest.environment for manifest in EARLIER]
    for number, env in enumerate(environments):
        if env.get("SECRET_KEY"):
            found[f"SECRET_KEY of process {number}"] = env["SECRET_KEY"]
        key_file = Path(env.get("TERMINALS_DATA_DIR") or settings.DATA_DIR) / "secret_key"
        if key_file.exists():
            found[f"SECRET_KEY in {key_file}"] = key_file.read_text().strip()
        password = urlsplit(env.get("DATABASE_URL") or "").password
        if password:
            found["the DATABASE_URL password"] = password
    return found


def audit_tables() -> dict[str, str]:
    """Every column of every audit row, in the test database and in each SQLite file a server of its own used."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT * FROM terminals_auditevent")
        tables = {f"audit table of the test database ({connection.vendor})": "\n".join(map(repr, cursor.fetchall()))}
    own = {Path(process.env["TERMINALS_DATA_DIR"]) / "terminals.sqlite3" for process in all_started()
           if process.env.get("TERMINALS_DATA_DIR") and not process.env.get("DATABASE_URL")}
    own |= {Path(manifest.database) for manifest in EARLIER if manifest.database.endswith(".sqlite3")}
    for path in sorted(own - {Path(settings.DATABASES["default"]["NAME"])}):
        if path.exists():
            database = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
            try:
                rows = database.execute("SELECT * FROM terminals_auditevent")
                tables[f"audit table of {path}"] = "\n".join(map(repr, rows))
            except sqlite3.OperationalError:
                pass  # a server that stopped before it migrated
            finally:
                database.close()
    return tables


def all_started() -> list:
    """The service processes this pytest process started, and those the other processes of the run did."""
    return list(STARTED) + [process for manifest in EARLIER for process in manifest.processes]


def test_no_secret_in_any_log_or_audit_row(orm):
    """Every secret of the run is absent from every server log (URLs included) and every audit row."""
    haystacks = {f"log of {process.name} ({process.log_path})": process.log() for process in all_started()}
    haystacks.update(audit_tables())
    secrets_found = secrets_of_the_run()
    leaks = [
        f"{name} in {where}: ...{text[max(0, text.index(value) - 80):text.index(value)]}<{name}>..."
        for name, value in secrets_found.items() for where, text in haystacks.items() if value in text
    ]
    assert not leaks, "\n".join(leaks)
    assert len(KEYS_MADE) >= 4
    if os.environ.get(run_manifest.FOLDER_VARIABLE):
        assert EARLIER, "the parallel run left no manifests: what its workers produced went unsearched"
    # The access logs are on, and the probes' URLs are in them with the key masked: URLs really are searched.
    logs = "".join(text for name, text in haystacks.items() if name.startswith("log of"))
    assert '"GET /api/terminals?api_key=[redacted]"' in logs, "no access log line of the probes: are access logs on?"
