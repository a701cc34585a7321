"""A server on a database of its own: a fresh SQLite file (on a PostgreSQL run, that database unless told otherwise),
keys made for it by `manage.py create_api_key`, and its audit table read straight from the database."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

from .servers import KEYS_MADE, ROOT, service_env


def own_database(*, sqlite: bool = False, **overrides: str) -> dict[str, str]:
    """Settings for start_embedded(): a fresh data folder, so a fresh SQLite file and secret key. On a PostgreSQL run
    (DATABASE_URL set) the server uses that database, unless sqlite is true."""
    database_url = "" if sqlite else os.environ.get("DATABASE_URL", "")
    return {"TERMINALS_DATA_DIR": tempfile.mkdtemp(prefix="terminals-own-"), "DATABASE_URL": database_url, **overrides}


def sqlite_path(settings: dict[str, str]) -> Path:
    return Path(settings["TERMINALS_DATA_DIR"]) / "terminals.sqlite3"


def manage(settings: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=service_env(**settings),
                          capture_output=True, text=True, timeout=120)


def create_key(settings: dict[str, str], name: str) -> tuple[str, str]:
    """A new user with an API key in the server's database; returns the username and the key."""
    username = f"{name}-{uuid.uuid4().hex[:8]}"
    made = manage(settings, "create_api_key", username)
    assert made.returncode == 0, made.stderr
    key = made.stdout.strip().splitlines()[-1]
    KEYS_MADE.append(key)
    return username, key


def audit_rows(settings: dict[str, str], username: str) -> list[dict]:
    """The user's audit events in id order, read from the database itself (SQLite opened read-only)."""
    query = "SELECT id, action, outcome, terminal_id, details FROM terminals_auditevent WHERE username = {} ORDER BY id"
    if settings["DATABASE_URL"]:
        import psycopg

        with psycopg.connect(settings["DATABASE_URL"]) as database:
            rows = database.execute(query.format("%s"), [username]).fetchall()
    else:
        database = sqlite3.connect(f"file:{sqlite_path(settings)}?mode=ro", uri=True)
        try:
            rows = database.execute(query.format("?"), [username]).fetchall()
        finally:
            database.close()
    return [
        {"id": row[0], "action": row[1], "outcome": row[2], "terminal": row[3] and str(row[3]).replace("-", ""),
         "details": json.loads(row[4]) if isinstance(row[4], str) else row[4]}
        for row in rows
    ]
