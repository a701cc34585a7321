"""One helper to drive the REST API the way a client does: create, type, read until a marker, delete."""

from __future__ import annotations

import itertools
import time

import requests

from .servers import wait_for

_markers = itertools.count(1)


class Api:
    """A client with one API key; remembers the terminals it made so the test can clean up."""

    def __init__(self, url: str, key: str | None) -> None:
        self.url = url
        self.key = key
        self.http = requests.Session()
        if key is not None:
            self.http.headers["X-API-Key"] = key
        self.created: list[str] = []

    def request(self, method: str, path: str, **kwargs) -> requests.Response:
        kwargs.setdefault("timeout", 30)
        return self.http.request(method, f"{self.url}{path}", **kwargs)

    def get(self, path: str, **kwargs) -> requests.Response:
        return self.request("GET", path, **kwargs)

    def post(self, path: str, json=None, **kwargs) -> requests.Response:
        return self.request("POST", path, json=json, **kwargs)

    def delete(self, path: str, **kwargs) -> requests.Response:
        return self.request("DELETE", path, **kwargs)

    # Terminals

    def create(self, **body) -> dict:
        response = self.post("/api/terminals", json=body)
        assert response.status_code == 201, response.text
        data = response.json()["data"]
        self.created.append(data["terminalId"])
        return data

    def send(self, terminal_id: str, text: str, **extra) -> requests.Response:
        response = self.post(f"/api/terminals/{terminal_id}/input", json={"input": text, **extra})
        assert response.status_code == 200, response.text
        return response

    def output(self, terminal_id: str, **params) -> dict:
        response = self.get(f"/api/terminals/{terminal_id}/output", params=params)
        assert response.status_code == 200, response.text
        return response.json()["data"]

    def full_output(self, terminal_id: str) -> str:
        return self.output(terminal_id, maxLines=10000)["output"]

    def wait_output(self, terminal_id: str, predicate, timeout: float = 15.0, what: str = "output") -> str:
        """Polls the terminal's output until predicate(output) holds; returns that output."""
        return wait_for(
            lambda: (lambda text: text if predicate(text) else None)(self.full_output(terminal_id)),
            timeout,
            what,
        )

    def run(self, terminal_id: str, command: str, timeout: float = 15.0) -> str:
        """Types a command and returns what it printed, between two markers the typed line cannot contain."""
        number = next(_markers)
        begin, end = f"__begin_{number}__", f"__end_{number}__"
        self.send(terminal_id, f"echo __begin_''{number}__; {command}; echo __end_''{number}__")
        # The typed line shows __end_''N__, so the plain marker appears only once the command has run.
        text = self.wait_output(terminal_id, lambda out: end in out, timeout, f"{end} after {command!r}")
        between = text.split(begin, 1)[1].split(end, 1)[0]
        return between.split("\n", 1)[1].rsplit("\n", 1)[0] if between.count("\n") >= 2 else ""

    def command(self, terminal_id: str, command: str, **body) -> dict:
        """Runs a command through the commands endpoint (the call itself must succeed); returns its data."""
        response = self.post(f"/api/terminals/{terminal_id}/commands", json={"command": command, **body})
        assert response.status_code == 200, response.text
        return response.json()["data"]

    def wait_status(self, terminal_id: str, status: str, timeout: float = 15.0) -> dict:
        def reached():
            record = self.get(f"/api/terminals/{terminal_id}").json()["data"]
            return record if record["status"] == status else None

        return wait_for(reached, timeout, f"terminal {terminal_id} to become {status}")

    def cleanup(self) -> None:
        for terminal_id in self.created:
            try:
                self.delete(f"/api/terminals/{terminal_id}", timeout=10)
            except requests.RequestException:
                pass


def elapsed(start: float) -> float:
    return time.monotonic() - start
