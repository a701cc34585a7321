"""The shell examples of the README and docs/ run as written against a live server, so they cannot drift from the
API: each page's ```bash blocks that call the API run in order in one shell (variables carry from block to block, as
for a reader following the page), with KEY (a staff key), ID (a fresh shell terminal) and BASE set at the top, and
the page's server address pointed at the test server. Every request must reach an endpoint that exists, with a key
that is accepted, by a method the endpoint has: an example may show an error on purpose, not a wrong path. Where a
block makes one request and the page shows its answer (a ```json block right after it), every field the page shows
must be in the real answer, at the same place. live.md's WebSocket script runs too, and must end as its transcript
does."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from .client import Api

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
DOCUMENTED_BASE = "http://127.0.0.1:3001"
# What an answer says when the example, not the service, is wrong.
DRIFT = ("No endpoint at", '"code":"UNAUTHORIZED"', '"code": "UNAUTHORIZED"', "METHOD_NOT_ALLOWED",
         "unknown query parameter", "Connection refused")
SEPARATOR = "@@docs-example-block-end@@"


def fenced(page: Path) -> list[tuple[str, str]]:
    """(language, text) of every fenced block of the page, in order."""
    return FENCE.findall(page.read_text())


def examples(page: Path) -> list[str]:
    """The page's shell blocks that talk to the API (curl); blocks that start servers or run tests are not run."""
    return [text for language, text in fenced(page) if language == "bash" and "curl" in text]


def shown_answers(page: Path) -> list[object | None]:
    """For each example, in order, the answer the page shows for it: the ```json block right after it, when the
    example makes one request and the block is whole JSON; else None."""
    blocks = fenced(page)
    shown = []
    for at, (language, text) in enumerate(blocks):
        if language != "bash" or "curl" not in text:
            continue
        following = blocks[at + 1] if at + 1 < len(blocks) else ("", "")
        shown.append(_json(following[1]) if following[0] == "json" and text.count("curl ") == 1 else None)
    return shown


def _json(text: str):
    try:
        return json.loads(text)
    except ValueError:
        return None


def same_outcome(shown, real) -> bool:
    """Whether both answers are the same kind: both successes, or the same error. A page's examples run back to back
    and some name ids of the run they were written from, so a step may be refused here that worked for the page
    (a command still running, an id this run never had); its fields are not comparable then."""
    if not isinstance(shown, dict) or not isinstance(real, dict):
        return type(shown) is type(real)
    return (shown.get("success"), (shown.get("error") or {}).get("code")) == \
        (real.get("success"), (real.get("error") or {}).get("code"))


def missing_fields(shown, real, where: str = "") -> list[str]:
    """The fields the shown answer has and the real one lacks, by their path (objects compared key by key, a list
    by its first item)."""
    if isinstance(shown, dict) and isinstance(real, dict):
        return [found for key, value in shown.items()
                for found in ([f"{where}.{key}"] if key not in real else missing_fields(value, real[key],
                                                                                         f"{where}.{key}"))]
    if isinstance(shown, list) and isinstance(real, list) and shown and real:
        return missing_fields(shown[0], real[0], f"{where}[0]")
    return []


@pytest.mark.embedded_only("the examples describe the embedded default")
@pytest.mark.parametrize("page", [page for page in PAGES if examples(page)], ids=lambda page: page.name)
def test_the_examples_of_a_page_run_as_written(server, keys, page, tmp_path):
    api = Api(server.url, keys["staff"])
    try:
        terminal = api.create(shell="/bin/bash", cwd="/tmp")["terminalId"]
        script = "\n".join(block.replace(DOCUMENTED_BASE, server.url) + f"\necho; echo {SEPARATOR}"
                           for block in examples(page))
        prelude = f"KEY={keys['staff']}\nID={terminal}\nBASE={server.url}\n"
        finished = subprocess.run(["bash", "-c", prelude + script], capture_output=True, text=True, timeout=300,
                                  cwd=tmp_path, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
        said = finished.stdout + finished.stderr
        drifted = [said[max(0, at - 200):at + 100] for sign in DRIFT for at in _positions(said, sign)]
        assert not drifted, f"{page.name}: examples that no longer match the API:\n" + "\n".join(drifted)
        answers = finished.stdout.split(SEPARATOR)
        unlike = [f"example {number + 1}: {missing} (real answer: {answers[number].strip()[:300]})"
                  for number, shown in enumerate(shown_answers(page)) if shown is not None
                  for real in [_json(answers[number])] if real is not None and same_outcome(shown, real)
                  for missing in [missing_fields(shown, real)] if missing]
        assert not unlike, f"{page.name}: answers shown with fields the service no longer sends:\n" + "\n".join(unlike)
    finally:
        api.cleanup()


def _positions(text: str, sign: str) -> list[int]:
    return [match.start() for match in re.finditer(re.escape(sign), text)]


def test_the_pages_show_answers_the_examples_are_compared_with():
    """The field comparison above has something to compare: the pages show the answers of many single requests."""
    shown = [answer for page in PAGES for answer in shown_answers(page) if answer is not None]
    assert len(shown) >= 20, len(shown)
    assert missing_fields({"data": {"a": 1, "b": [{"c": 1}]}}, {"data": {"a": 2, "b": [{}]}}) == [".data.b[0].c"]


@pytest.mark.embedded_only("the examples describe the embedded default")
def test_the_websocket_script_of_live_md_ends_as_its_transcript_does(server, keys, tmp_path):
    """live.md's client, run as written on a new bash terminal: the frames its transcript shows other than output
    (whose split into frames varies) come, the exit code is the one typed, and it ends with the close shown."""
    blocks = fenced(ROOT / "docs" / "live.md")
    at = next(at for at, (language, text) in enumerate(blocks) if language == "python" and "websockets" in text)
    script, transcript = blocks[at][1], blocks[at + 1][1].splitlines()
    api = Api(server.url, keys["staff"])
    try:
        terminal = api.create(shell="/bin/bash", cwd="/tmp")["terminalId"]
        program = tmp_path / "client.py"
        program.write_text(script.replace(DOCUMENTED_BASE.replace("http://", "ws://"),
                                          server.url.replace("http://", "ws://")))
        finished = subprocess.run([sys.executable, str(program), terminal], capture_output=True, text=True,
                                  timeout=120, env={**os.environ, "KEY": keys["staff"]})
        assert finished.returncode == 0, finished.stderr
        printed = finished.stdout.splitlines()
        assert printed[-1] == transcript[-1] == "closed 1000", printed[-5:]
        exits = [json.loads(line[3:]) for line in printed if line.startswith('<- {"type": "exit"')]
        assert [frame["exitCode"] for frame in exits] == [7], printed[-5:]
        frames = [_frame(line) for line in transcript if line.startswith(("->", '<- {"type": "error"'))]
        assert [_frame(line) for line in printed if line.startswith(("->", '<- {"type": "error"'))] == frames, printed
    finally:
        api.cleanup()


def _frame(line: str) -> tuple[str, dict]:
    """A transcript line's direction and frame, without the byte offsets (they follow the prompt's length)."""
    frame = json.loads(line[3:])
    frame.pop("offset", None)
    return line[:2], frame
