"""The shell examples of the README and docs/ run as written against a live server, so they cannot drift from the
API: each page's ```bash blocks that call the API run in order in one shell (variables carry from block to block, as
for a reader following the page), with KEY (a staff key), ID (a fresh shell terminal) and BASE set at the top, and
the page's server address pointed at the test server. Every request must reach an endpoint that exists, with a key
that is accepted, by a method the endpoint has: an example may show an error on purpose, not a wrong path."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from .client import Api

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```bash\n(.*?)^```", re.S | re.M)
DOCUMENTED_BASE = "http://127.0.0.1:3001"
# What an answer says when the example, not the service, is wrong.
DRIFT = ("No endpoint at", '"code":"UNAUTHORIZED"', '"code": "UNAUTHORIZED"', "METHOD_NOT_ALLOWED",
         "unknown query parameter", "Connection refused")


def examples(page: Path) -> list[str]:
    """The page's shell blocks that talk to the API (curl); blocks that start servers or run tests are not run."""
    return [block for block in BLOCK.findall(page.read_text()) if "curl" in block]


@pytest.mark.embedded_only("the examples describe the embedded default")
@pytest.mark.parametrize("page", [page for page in PAGES if examples(page)], ids=lambda page: page.name)
def test_the_examples_of_a_page_run_as_written(server, keys, page, tmp_path):
    api = Api(server.url, keys["staff"])
    try:
        terminal = api.create(shell="/bin/bash", cwd="/tmp")["terminalId"]
        script = "\n".join(block.replace(DOCUMENTED_BASE, server.url) for block in examples(page))
        prelude = f"KEY={keys['staff']}\nID={terminal}\nBASE={server.url}\n"
        finished = subprocess.run(["bash", "-c", prelude + script], capture_output=True, text=True, timeout=300,
                                  cwd=tmp_path, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
        said = finished.stdout + finished.stderr
        drifted = [said[max(0, at - 200):at + 100] for sign in DRIFT for at in _positions(said, sign)]
        assert not drifted, f"{page.name}: examples that no longer match the API:\n" + "\n".join(drifted)
    finally:
        api.cleanup()


def _positions(text: str, sign: str) -> list[int]:
    return [match.start() for match in re.finditer(re.escape(sign), text)]
