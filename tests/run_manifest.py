"""What a pytest process of a parallel run leaves for the secrets check that runs after all of them.

Each xdist worker starts its own servers and makes its own keys, in its own data folder. scripts/test.sh runs
tests/test_zz_no_secrets.py once more at the end, in a process of its own, and it must search what every worker
produced: so each worker writes, when its session ends, the keys it made, the logs of the processes it started
and where its databases are, into TERMINALS_TEST_MANIFESTS (a folder the script makes and removes).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

FOLDER_VARIABLE = "TERMINALS_TEST_MANIFESTS"
# The variables of a process's environment the secrets check looks at.
RECORDED_ENV = ("SECRET_KEY", "TERMINALS_DATA_DIR", "DATABASE_URL")


@dataclass
class RecordedProcess:
    """A service process another pytest process started: its name, its log on disk and its environment."""

    name: str
    log_path: Path
    env: dict[str, str]

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


@dataclass
class Manifest:
    keys: list[str]
    processes: list[RecordedProcess]
    environment: dict[str, str]  # the pytest process's own
    database: str  # its test database (an SQLite file, or a PostgreSQL name)
    secret_key: str


def _subset(env: dict[str, str]) -> dict[str, str]:
    return {name: env[name] for name in RECORDED_ENV if env.get(name)}


def write(worker: str, *, keys, started, database: str, secret_key: str) -> None:
    folder = os.environ.get(FOLDER_VARIABLE)
    if not folder:
        return
    manifest = {
        "keys": list(keys),
        "processes": [{"name": p.name, "log_path": str(p.log_path), "env": _subset(p.env)} for p in started],
        "environment": _subset(dict(os.environ)),
        "database": database,
        "secret_key": secret_key,
    }
    Path(folder, f"{worker}.json").write_text(json.dumps(manifest))


def read_all() -> list[Manifest]:
    """The manifests of the run's other pytest processes (none when the variable is not set)."""
    folder = os.environ.get(FOLDER_VARIABLE)
    if not folder:
        return []
    manifests = []
    for path in sorted(Path(folder).glob("*.json")):
        raw = json.loads(path.read_text())
        processes = [RecordedProcess(p["name"], Path(p["log_path"]), p["env"]) for p in raw["processes"]]
        manifests.append(Manifest(raw["keys"], processes, raw["environment"], raw["database"], raw["secret_key"]))
    return manifests
