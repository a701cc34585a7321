"""Taking access away ends live access (terminals/access.py): a share removed, a staff flag removed, a key revoked, a
user disabled, each while a WebSocket, a Server-Sent Events follow, MCP waits (a use case's poll loop and a
worker's wait) and a REST wait are open. Each ends within 5 s (one check a round, every 2 s), with the documented code (docs/live.md:
4401 for the credential, 4404 for the terminal), delivers nothing after its end, and leaves an audit row naming why.
The authorization matrix's live cases (tests/test_authorization_matrix.py covers who may open them)."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import pytest
import requests

from terminals import keys as key_admin
from terminals import sessions
from terminals.audit import Actor
from terminals.models import ApiKey, AuditEvent

from .client import Api
from .conftest import make_key
from .servers import wait_for
from .test_live import Live, run
from .test_mcp import connect

BOUND = 5.0  # seconds from the change to each connection's end: one 2 s round, and room for a loaded machine
TICKER = "while :; do echo tick; sleep 0.2; done"
NEVER = "never-printed-3f9c"
# What is taken away, what the connection then answers (its WebSocket close code), and the mode of its WebSocket.
CHANGES = {
    "share removed": ("TERMINAL_NOT_FOUND", 4404, "view"),
    "staff flag removed": ("TERMINAL_NOT_FOUND", 4404, "view"),
    "key revoked": ("UNAUTHORIZED", 4401, "interactive"),
    "user disabled": ("UNAUTHORIZED", 4401, "interactive"),
}


def owner_of(key: str):
    return ApiKey.objects.for_key(key).user


def take_away(change: str, user, terminal: str, alice) -> None:
    """The change, made as the admin commands and the dashboard make it (terminals/keys.py, sessions/sharing.py)."""
    admin = Actor(source="test")
    if change == "share removed":
        sessions.session_unshare(actor=Actor(user=alice), terminal_id=terminal, username=user.username)
    elif change == "staff flag removed":
        key_admin.set_user(admin, user.username, staff=False)
    elif change == "key revoked":
        key_admin.revoke_key(admin, ApiKey.objects.get(user=user))
    else:
        key_admin.set_user(admin, user.username, active=False)


class Follow(threading.Thread):
    """A follow stream read on a thread: each event with when it came, until the stream ends."""

    def __init__(self, url: str, key: str, terminal: str) -> None:
        super().__init__(daemon=True)
        self.url, self.key, self.terminal = url, key, terminal
        self.events: list[tuple[float, str, dict]] = []
        self.ended_at: float | None = None

    def run(self) -> None:
        name = None
        with requests.get(f"{self.url}/api/terminals/{self.terminal}/output", params={"follow": "true"},
                          headers={"X-API-Key": self.key}, stream=True, timeout=(5, 30)) as response:
            assert response.status_code == 200, response.text
            for line in response.iter_lines(chunk_size=1, decode_unicode=True):
                if line.startswith("event: "):
                    name = line[len("event: "):]
                elif line.startswith("data: "):
                    self.events.append((time.monotonic(), name, json.loads(line[len("data: "):])))
        self.ended_at = time.monotonic()

    def saw(self, name: str) -> bool:
        return any(event == name for _, event, _ in self.events)


def rest_wait(url: str, key: str, terminal: str):
    """POST .../output/wait for what is never printed: its answer and when it came."""
    answer = requests.post(f"{url}/api/terminals/{terminal}/output/wait", headers={"X-API-Key": key}, timeout=60,
                           json={"pattern": NEVER, "timeoutMs": 120_000, "untilInput": False})
    return answer, time.monotonic()


async def mcp_wait(url: str, key: str, tool: str, arguments: dict):
    """A tool call's answer and when it came."""
    async with connect(url, key) as client:
        answer = await client.call_tool(tool, arguments)
    return answer, time.monotonic()


@pytest.mark.parametrize("change", list(CHANGES))
def test_taking_access_away_ends_every_live_connection(server, keys, orm, change):
    reason, close_code, mode = CHANGES[change]
    user, key = make_key(name=change.split()[0], staff=change == "staff flag removed")
    alice = owner_of(keys["alice"])
    owns = change in ("key revoked", "user disabled")
    owner = Api(server.url, key if owns else keys["alice"])
    terminal = owner.create(shell="/bin/bash")["terminalId"]
    shared_only = change == "share removed"  # a share lets its user watch the WebSocket, nothing more
    if shared_only:
        sessions.session_share(actor=Actor(user=alice), terminal_id=terminal, username=user.username)
    follow = Follow(server.url, key, terminal)
    before = AuditEvent.objects.order_by("-id").values_list("id", flat=True).first() or 0

    async def scenario():
        live = await Live.open(server.url, terminal, key, **({"mode": "view"} if mode == "view" else {}))
        waits = []
        if shared_only:
            owner.send(terminal, TICKER)
        else:
            # A wait in the worker (the ticker as run_command, or for staff, who only watch another user's
            # terminal, wait_for_exit with the owner typing the ticker), beside a wait in a use case's poll loop
            # (wait_for_output) that nothing printed can end.
            if owns:
                worker_wait = mcp_wait(server.url, key, "run_command", {
                    "terminal_id": terminal, "command": TICKER, "timeout_ms": 120_000})
            else:
                owner.send(terminal, TICKER)
                worker_wait = mcp_wait(server.url, key, "wait_for_exit", {"terminal_id": terminal,
                                                                         "timeout_ms": 120_000})
            waits = [asyncio.ensure_future(worker_wait),
                     asyncio.ensure_future(mcp_wait(server.url, key, "wait_for_output", {
                         "terminal_id": terminal, "pattern": NEVER, "timeout_ms": 120_000, "until_input": False})),
                     asyncio.ensure_future(asyncio.to_thread(rest_wait, server.url, key, terminal))]
            follow.start()
            await asyncio.to_thread(wait_for, lambda: follow.saw("output") and AuditEvent.objects.filter(
                terminal_id=terminal, action="wait_output", username=user.username).count() == 2, 30, "the waits open")
        await live.until_text("tick")
        assert not [wait for wait in waits if wait.done()], "a wait ended before anything was taken away"
        await asyncio.to_thread(take_away, change, user, terminal, alice)
        changed = time.monotonic()
        code = await live.closed(timeout=BOUND + 10)
        closed = time.monotonic()
        answers = [await asyncio.wait_for(wait, BOUND + 10) for wait in waits]
        return changed, code, closed, answers, live.frames

    try:
        changed, code, closed, answers, frames = run(scenario(), timeout=120)
        assert code == close_code, (change, code)
        assert closed - changed < BOUND, f"the WebSocket closed {closed - changed:.1f} s after the change"
        assert frames[-1]["type"] == "error" and frames[-1]["code"] == reason, frames[-1]  # nothing after it
        detach = wait_for(lambda: AuditEvent.objects.filter(
            id__gt=before, terminal_id=terminal, action="detach", username=user.username,
            details__has_key="closeCode").first(), 10, "the WebSocket's detach row")
        assert detach.outcome == reason and detach.details["closeCode"] == close_code, (detach.outcome, detach.details)
        if shared_only:
            return
        *mcp_answers, (rest, rest_answered) = answers
        for answer, answered in mcp_answers:
            assert answer.is_error and f": {reason}: " in answer.content[0].text, answer.content[0].text
            assert answered - changed < BOUND, f"an MCP wait answered {answered - changed:.1f} s after the change"
        assert (rest.status_code, rest.json()["error"]["code"]) == (close_code - 4000, reason), rest.text
        assert rest_answered - changed < BOUND, f"the REST wait answered {rest_answered - changed:.1f} s after"
        follow.join(BOUND + 10)
        assert follow.ended_at is not None and follow.ended_at - changed < BOUND, "the follow stream did not end"
        last_at, last, data = follow.events[-1]
        assert (last, data["code"]) == ("error", reason), follow.events[-3:]
        rows = AuditEvent.objects.filter(id__gt=before, terminal_id=terminal, username=user.username)
        assert rows.filter(action="detach", outcome=reason, details__stream="sse").count() == 1
        tools = sorted(rows.filter(action="mcp", outcome=reason).values_list("details__tool", flat=True))
        assert tools == ["run_command" if owns else "wait_for_exit", "wait_for_output"], tools
        assert rows.filter(action="output_wait", outcome=reason).count() == 1, list(rows.values_list("action", "outcome"))
    finally:
        staff = Api(server.url, keys["staff"])  # the change may have left the owner without a usable key
        staff.created = [terminal]
        staff.cleanup()
