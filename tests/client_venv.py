"""The Python client (clients/python) installed as its users install it: a fresh virtualenv, `pip install` of the
package from the checkout, and nothing of the server importable there. Tests run scripts and the `terminals`
command in it, as subprocesses, against the real servers."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "clients" / "python"
# Left out of the copy that is installed: what an earlier build or check left in the checkout.
BUILD_LEFTOVERS = shutil.ignore_patterns("build", "dist", "*.egg-info", ".mypy_cache", "__pycache__")


@dataclass
class ClientVenv:
    folder: Path

    @property
    def python(self) -> str:
        return str(self.folder / "bin" / "python")

    @property
    def terminals(self) -> str:
        return str(self.folder / "bin" / "terminals")

    def install(self, *requirements: str) -> None:
        env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
        env.pop("PYTHONPATH", None)
        installed = subprocess.run([self.python, "-m", "pip", "install", "-q", *requirements], capture_output=True,
                                   text=True, env=env, cwd=self.folder)
        assert installed.returncode == 0, f"pip install {requirements} failed:\n{installed.stdout}\n{installed.stderr}"

    def env(self, url: str, key: str | None, **extra: str) -> dict[str, str]:
        """A clean environment: the service's URL and key, no PYTHONPATH, no Django settings."""
        env = {"PATH": f"{self.folder / 'bin'}:/usr/bin:/bin", "HOME": str(self.folder), "LANG": "C.UTF-8",
               "TERMINALS_URL": url, **extra}
        if key is not None:
            env["TERMINALS_API_KEY"] = key
        return env

    def script(self, source: str, url: str, key: str | None, timeout: float = 120, **extra: str):
        """Runs a Python script in the virtualenv, from a folder outside the checkout (so `terminals` there is not
        the server's package); returns the CompletedProcess, output as text."""
        return subprocess.run([self.python, "-c", textwrap.dedent(source)], cwd=self.folder, capture_output=True,
                              text=True, timeout=timeout, env=self.env(url, key, **extra))

    def command(self, args: list[str], url: str, key: str | None, *, stdin: bytes | None = None,
                timeout: float = 120):
        """Runs the `terminals` command; output as bytes."""
        return subprocess.run([self.terminals, *args], cwd=self.folder, capture_output=True,
                              input=stdin if stdin is not None else b"", timeout=timeout, env=self.env(url, key))


def create() -> ClientVenv:
    folder = Path(tempfile.mkdtemp(prefix="terminals-client-venv-"))
    # TERMINALS_TEST_CLIENT_PYTHON runs the client on another interpreter, e.g. a Python 3.9, its oldest.
    python = os.environ.get("TERMINALS_TEST_CLIENT_PYTHON") or sys.executable
    subprocess.run([python, "-m", "venv", str(folder)], check=True, capture_output=True)
    source = folder / "src"
    shutil.copytree(PACKAGE, source, ignore=BUILD_LEFTOVERS)
    venv = ClientVenv(folder)
    venv.install(str(source))
    return venv


def pinned(name: str) -> str:
    """The requirement line pinning `name` in requirements-dev.txt (e.g. "mypy==2.4.1")."""
    for line in (ROOT / "requirements-dev.txt").read_text().splitlines():
        requirement = line.split("#")[0].strip()
        if requirement.lower().startswith(name + "=="):
            return requirement
    raise AssertionError(f"{name} is not pinned in requirements-dev.txt")


class CuttingProxy:
    """A TCP forwarder in front of a server whose WebSocket connections the test can cut at any moment, as a
    network that drops them would: no close frame, the sockets just end."""

    def __init__(self, target_url: str) -> None:
        import socket
        import threading

        host, port = target_url.split("://", 1)[1].split(":")
        self.target = (host, int(port))
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.lock = threading.Lock()
        self.websockets: list[tuple[object, object]] = []
        self.websockets_opened = 0
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        import socket
        import threading

        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            threading.Thread(target=self._serve, args=(client, upstream), daemon=True).start()

    def _serve(self, client, upstream) -> None:
        import threading

        first = client.recv(65536)
        if first.startswith(b"GET /ws/"):
            with self.lock:
                self.websockets.append((client, upstream))
                self.websockets_opened += 1
        upstream.sendall(first)
        threading.Thread(target=self._pump, args=(upstream, client), daemon=True).start()
        self._pump(client, upstream)

    @staticmethod
    def _pump(source, target) -> None:
        try:
            while data := source.recv(65536):
                target.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, target):
                try:
                    sock.close()
                except OSError:
                    pass

    def cut_websockets(self) -> int:
        """Ends every open WebSocket connection abruptly; returns how many there were."""
        import socket

        with self.lock:
            cut, self.websockets = self.websockets, []
        for pair in cut:
            for sock in pair:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        return len(cut)

    def close(self) -> None:
        self.closed = True
        self.listener.close()
        self.cut_websockets()
