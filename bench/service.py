"""Our service for the benchmark: started embedded or split (tests/servers.py) on a fresh database with a fresh key."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
import tempfile
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Self
from urllib.parse import urlencode

import aiohttp

from tests import servers

from .common import ROOT, log

# Every server of the run gets these: limits high enough for 1,000 terminals, throttles out of the way.
SERVICE_SETTINGS = {
    "TERMINALS_MAX_TOTAL": "2000",
    "TERMINALS_MAX_PER_USER": "2000",
    "TERMINALS_THROTTLE_RATE": "1000000/min",
    "TERMINALS_CREATE_THROTTLE_RATE": "1000000/min",
}
SHELL_HOME = servers.TEST_HOME  # an empty home: no dotfiles change what shells print or how fast they start


@dataclass
class Service:
    mode: str
    url: str
    key: str
    server: servers.Server
    data_dir: str

    @property
    def pids(self) -> list[int]:
        """The processes that make up the service (not redis-server, not the shells)."""
        return [process.pid for process in self.server.processes]

    def rss_bytes(self) -> int:
        return sum(rss_bytes(pid) for pid in self.pids)

    def ws_url(self, terminal_id: str, **query) -> str:
        suffix = f"?{urlencode(query)}" if query else ""
        return f"{self.url.replace('http://', 'ws://', 1)}/ws/terminals/{terminal_id}/{suffix}"

    def rest(self, connections: int = 64) -> Rest:
        return Rest(self.url, self.key, connections)

    def stop(self) -> None:
        self.server.stop()
        shutil.rmtree(self.data_dir, ignore_errors=True)
        for process in [*self.server.processes, *([self.server.redis] if self.server.redis else [])]:
            process.log_path.unlink(missing_ok=True)


def rss_bytes(pid: int) -> int:
    """VmRSS of one process, from /proc/<pid>/status."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def open_files_limit(pid: int) -> str:
    with open(f"/proc/{pid}/limits") as limits:
        for line in limits:
            if line.startswith("Max open files"):
                return "/".join(line.split()[3:5])
    return "unknown"


def start(mode: str, settings: dict[str, str] | None = None) -> Service:
    """Starts the service on a free port, with a copy of a freshly migrated SQLite database and its staff API key."""
    template, key = _template()
    data_dir = tempfile.mkdtemp(prefix=f"bench-{mode}-")
    shutil.copytree(template, data_dir, dirs_exist_ok=True)
    env = {"TERMINALS_DATA_DIR": data_dir, **SERVICE_SETTINGS, **(settings or {})}
    if mode == "embedded":
        server = servers.start_embedded(**env)
    elif mode == "split":
        server = servers.start_split(webs=1, workers=1, **env)
    else:
        raise ValueError(f"unknown mode {mode!r}")
    log(f"{mode} service on {server.url} (pids {', '.join(str(process.pid) for process in server.processes)})")
    return Service(mode=mode, url=server.url, key=key, server=server, data_dir=data_dir)


_templates: list[tuple[str, str]] = []


def _template() -> tuple[str, str]:
    """A data folder migrated once, holding one staff key; every server starts from a copy (migrating takes seconds)."""
    if not _templates:
        folder = tempfile.mkdtemp(prefix="bench-template-")
        _templates.append((folder, _create_key({"TERMINALS_DATA_DIR": folder})))
    return _templates[0]


def clean_up() -> None:
    """Removes the template database and the shells' home folder."""
    while _templates:
        shutil.rmtree(_templates.pop()[0], ignore_errors=True)
    shutil.rmtree(SHELL_HOME, ignore_errors=True)


def _create_key(env: dict[str, str]) -> str:
    environment = servers.service_env(**env)
    manage = [sys.executable, "manage.py"]
    subprocess.run([*manage, "migrate", "--noinput", "-v0"], cwd=ROOT, env=environment, check=True)
    created = subprocess.run(
        [*manage, "create_api_key", "bench", "--staff"],
        cwd=ROOT,
        env=environment,
        check=True,
        capture_output=True,
        text=True,
    )
    return created.stdout.strip().splitlines()[-1]


@asynccontextmanager
async def running(mode: str, settings: dict[str, str] | None = None):
    """The service for the length of a block; stopped (its terminals ended) afterwards."""
    service = await asyncio.to_thread(start, mode, settings)
    try:
        yield service
    finally:
        await asyncio.to_thread(service.stop)


class Rest:
    """The REST API with one key, over a pool of keep-alive connections."""

    def __init__(self, url: str, key: str, connections: int) -> None:
        self.http = aiohttp.ClientSession(
            base_url=url,
            headers={"X-API-Key": key},
            connector=aiohttp.TCPConnector(limit=connections),
            timeout=aiohttp.ClientTimeout(total=120),
        )

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.http.close()

    async def call(self, method: str, path: str, *, json=None, params=None) -> dict:
        """The `data` of a successful answer; raises naming the status and error code otherwise."""
        async with self.http.request(method, path, json=json, params=params) as response:
            body = await response.json(content_type=None)
            if response.status >= 300 or not body.get("success"):
                error = (body or {}).get("error") or {}
                status = f"HTTP {response.status} {error.get('code')} {error.get('message')}"
                raise RuntimeError(f"{method} {path}: {status}")
            return body.get("data", {})

    async def create(self, **body) -> str:
        body.setdefault("shell", "bash")
        return (await self.call("POST", "/api/terminals", json=body))["terminalId"]

    async def type(self, terminal_id: str, text: str) -> dict:
        """Types text exactly as given (no newline added)."""
        return await self.call(
            "POST", f"/api/terminals/{terminal_id}/input", json={"input": text, "appendNewline": False}
        )

    async def stats(self, terminal_id: str) -> dict:
        return await self.call("GET", f"/api/terminals/{terminal_id}/stats")

    async def output(self, terminal_id: str, **params) -> dict:
        return await self.call("GET", f"/api/terminals/{terminal_id}/output", params=params)

    async def command(self, terminal_id: str, command: str, **body) -> dict:
        return await self.call("POST", f"/api/terminals/{terminal_id}/commands", json={"command": command, **body})

    async def delete(self, terminal_id: str) -> dict:
        return await self.call("DELETE", f"/api/terminals/{terminal_id}")

    async def wait_for_prompt(self, terminal_id: str, timeout: float = 15.0) -> None:
        """Polls the terminal's output until its shell shows a prompt."""
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            text = (await self.output(terminal_id, mode="tail", tailLines=1))["output"]
            if ends_with_prompt(text):
                return
            if asyncio.get_running_loop().time() > deadline:
                raise TimeoutError(f"no prompt in terminal {terminal_id} after {timeout:g} s: {text[-80:]!r}")
            await asyncio.sleep(0.01)


def ends_with_prompt(text: str) -> bool:
    """Whether text ends with a shell prompt (bash's default: `bash-5.2$ `, or `# ` for root)."""
    return text.endswith(("$ ", "# "))
