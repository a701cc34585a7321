"""Only a hash of each API key is stored: after keys are made and used, neither a whole key nor its secret part is
anywhere in the database, neither in the bytes of the SQLite file and its WAL nor in any text column of any table."""

from __future__ import annotations

import hashlib
import sqlite3
import uuid
from pathlib import Path

from .client import Api
from .own_database import manage, own_database, sqlite_path
from .servers import KEYS_MADE, start_embedded


def make_keys(settings: dict[str, str]) -> list[str]:
    """Keys made as an operator makes them: plain, staff, labelled, expiring, a second key for one user."""
    username = f"hashed-{uuid.uuid4().hex[:8]}"
    variants = [[username], [f"{username}-staff", "--staff"], [username, "--name", "laptop"],
                [f"{username}-expiring", "--expires-days", "3"]]
    keys = []
    for arguments in variants:
        made = manage(settings, "create_api_key", *arguments)
        assert made.returncode == 0, made.stderr
        keys.append(made.stdout.strip().splitlines()[-1])
    KEYS_MADE.extend(keys)
    return keys


def use_keys(url: str, keys: list[str]) -> None:
    """Each key authenticates requests that write rows (a terminal, input, audit); a wrong secret is refused."""
    for number, key in enumerate(keys):
        api = Api(url, None)
        api.http.headers["Authorization" if number % 2 else "X-API-Key"] = f"Bearer {key}" if number % 2 else key
        terminal = api.create(command="cat")["terminalId"]
        api.send(terminal, f"hello from key {number}")
        assert api.get("/api/audit").status_code == 200
        api.cleanup()
        forged = Api(url, key[:-4] + ("AAAA" if not key.endswith("AAAA") else "BBBB"))
        assert forged.get("/api/terminals").status_code == 401


def secrets_of(keys: list[str]) -> list[str]:
    """Each whole key and its secret part (after the dot), the strings that must never be stored."""
    return [*keys, *(key.split(".", 1)[1] for key in keys)]


def database_files(settings: dict[str, str]) -> dict[str, bytes]:
    path = sqlite_path(settings)
    files = {name: Path(f"{path}{suffix}") for name, suffix in (("file", ""), ("wal", "-wal"), ("shm", "-shm"))}
    return {name: file.read_bytes() for name, file in files.items() if file.exists()}


def text_columns(settings: dict[str, str]) -> list[tuple[str, str, str]]:
    """(table, column, value) for every non-null value of every column of every table, as text."""
    database = sqlite3.connect(f"file:{sqlite_path(settings)}?mode=ro", uri=True)
    try:
        tables = [row[0] for row in database.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        found = []
        for table in tables:
            columns = [row[1] for row in database.execute(f'PRAGMA table_info("{table}")')]
            for column in columns:
                query = f'SELECT CAST("{column}" AS TEXT) FROM "{table}" WHERE "{column}" IS NOT NULL'
                found.extend((table, column, value) for (value,) in database.execute(query))
        return found
    finally:
        database.close()


def assert_nowhere(secrets: list[str], settings: dict[str, str]) -> None:
    """Fails naming where a secret was found, without printing the secret or the bytes around it."""
    for name, content in database_files(settings).items():
        leaked = [secret for secret in secrets if secret.encode() in content]
        assert not leaked, f"{len(leaked)} key secret(s) in the database's {name} bytes"
    for table, column, value in text_columns(settings):
        leaked = [secret for secret in secrets if secret in value]
        assert not leaked, f"{len(leaked)} key secret(s) in {table}.{column}"


def test_only_a_hash_of_each_key_is_stored():
    """Neither the keys nor their secrets are in the file, the WAL or any column, while the server runs and after it
    stops; what is stored is the SHA-256 of each key."""
    settings = own_database(sqlite=True)
    server = start_embedded(**settings)
    try:
        keys = make_keys(settings)
        use_keys(server.url, keys)
        assert "wal" in database_files(settings), "the server writes through its WAL, which is scanned too"
        assert_nowhere(secrets_of(keys), settings)
    finally:
        server.stop()
    assert_nowhere(secrets_of(keys), settings)
    stored = {value for table, column, value in text_columns(settings) if column == "hashed_key"}
    assert {hashlib.sha256(key.encode()).hexdigest() for key in keys} <= stored
