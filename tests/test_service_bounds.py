"""No request of one user can hang the service for the others (issue 29, part 1): every window size goes through
one check whatever the interface, every pattern through the one bounded matcher, and each user's live connections
are capped (docs/live.md, docs/settings.md)."""

from __future__ import annotations

import asyncio
import statistics
import threading
import time
import uuid

import pytest
import requests
from django.contrib.auth import get_user_model

from terminals.models import AuditEvent, TerminalSession

from .client import Api
from .conftest import make_key
from .servers import start_embedded, wait_for
from .test_live import Live, refusal
from .test_live import run as run_live
from .test_mcp import connect, data, run, text

HUGE_SIZES = [({"cols": 65535, "rows": 65535}, "cols"), ({"cols": 70000, "rows": 24}, "cols"),
              ({"cols": 1001, "rows": 24}, "cols"), ({"cols": 80, "rows": 501}, "rows")]


def terminal_size(api: Api, terminal: str) -> tuple[int, int]:
    record = api.get(f"/api/terminals/{terminal}").json()["data"]
    return record["cols"], record["rows"]


# One window-size check, whatever the interface


def test_mcp_resize_past_the_limits_is_refused_and_the_size_stays(server, keys, orm):
    """65535 x 65535 answered "resized" and the next screen read took the server down; 70000 was a struct.error
    (500). Through /mcp each is INVALID_INPUT naming the field and its bound, audited, and the terminal keeps its
    size; its screen still answers."""
    async def scenario():
        async with connect(server.url, keys["alice"]) as client:
            terminal = data(await client.call_tool("create_terminal", {"cols": 100, "rows": 30}))["terminal_id"]
            answers = [await client.call_tool("resize_terminal", {"terminal_id": terminal, **size})
                       for size, _ in HUGE_SIZES]
            screen = data(await client.call_tool("get_screen", {"terminal_id": terminal}))
            return terminal, answers, screen

    terminal, answers, screen = run(scenario())
    api = Api(server.url, keys["alice"])
    try:
        for (size, field), answer in zip(HUGE_SIZES, answers, strict=True):
            assert answer.is_error, size
            assert f"INVALID_INPUT: {field}: must be a whole number from 1 to" in text(answer), text(answer)
            assert ("1000" if field == "cols" else "500") in text(answer)
            assert f"TERMINALS_MAX_{field.upper()}" in text(answer)  # the core's check, not only the worker's
        assert terminal_size(api, terminal) == (100, 30)
        assert (screen["cols"], screen["rows"]) == (100, 30)
        refused = AuditEvent.objects.filter(terminal_id=uuid.UUID(terminal), action="mcp", outcome="INVALID_INPUT")
        assert refused.count() == len(HUGE_SIZES)
        assert not AuditEvent.objects.filter(terminal_id=uuid.UUID(terminal), action="resize").exists()
    finally:
        api.delete(f"/api/terminals/{terminal}")


def test_every_mcp_profile_refuses_to_create_a_huge_terminal(server, keys, orm):
    """create_terminal of /mcp and of /mcp/persistent-terminal take cols and rows: past the limits, INVALID_INPUT
    and no terminal."""
    before = TerminalSession.objects.count()

    async def scenario():
        async with connect(server.url, keys["alice"]) as ours:
            first = await ours.call_tool("create_terminal", {"cols": 65535, "rows": 65535})
        async with connect(server.url, keys["alice"], "/mcp/persistent-terminal") as seed_000:
            second = await seed_000.call_tool("create_terminal", {"cols": 80, "rows": 70000})
        return first, second

    first, second = run(scenario())
    assert first.is_error and "INVALID_INPUT: cols:" in text(first) and "TERMINALS_MAX_COLS" in text(first), text(first)
    assert second.is_error and "INVALID_INPUT: rows:" in text(second) and "TERMINALS_MAX_ROWS" in text(second), text(second)
    assert TerminalSession.objects.count() == before


@pytest.mark.embedded_only("the form and the use case are the same on both deployments; one login is enough")
def test_the_dashboards_create_form_refuses_900_rows_with_a_message(server, orm):
    """The form accepted up to 1000 rows (limit 500): now the core refuses, and the page says why."""
    username, password = f"bounds-{uuid.uuid4().hex[:8]}", "a-long-enough-password"
    get_user_model().objects.create_user(username=username, password=password)
    browser = requests.Session()
    page = browser.get(f"{server.url}/login/", timeout=10)
    answer = browser.post(f"{server.url}/login/", data={"username": username, "password": password,
                                                        "csrfmiddlewaretoken": browser.cookies["csrftoken"]},
                          headers={"Referer": page.url}, timeout=10, allow_redirects=False)
    assert answer.status_code == 302
    answer = browser.post(f"{server.url}/terminals/new",
                          data={"kind": "shell", "cols": "80", "rows": "900",
                                "csrfmiddlewaretoken": browser.cookies["csrftoken"]},
                          headers={"Referer": f"{server.url}/", "Origin": server.url}, timeout=30)
    assert answer.status_code == 200
    assert "Not created: rows: must be a whole number from 1 to 500 (TERMINALS_MAX_ROWS)" in answer.text
    assert not TerminalSession.objects.filter(owner__username=username).exists()


# Screens are rendered off the event loop


def test_reading_the_largest_screen_over_and_over_stalls_no_other_user(server, keys):
    """A 1000 x 500 screen full of output takes about 150 ms to render (and 60 ms more to rebuild), on the worker's
    event loop, which every terminal shares: 16 clients reading it in a loop held another user's reads for a second
    and more each. Rendered on the screen threads, the other user's reads answer as usual."""
    alice, bob = Api(server.url, keys["alice"]), Api(server.url, keys["bob"])
    try:
        big = alice.create(shell="/bin/bash", cols=1000, rows=500)["terminalId"]
        small = bob.create(shell="/bin/bash")["terminalId"]
        alice.send(big, "for i in $(seq 1 520); do printf '%0999d\\n' $i; done")
        wait_for(lambda: alice.get(f"/api/terminals/{big}/stats").json()["data"]["totalBytes"] > 520_000, 60,
                 "a screen full of output")
        assert alice.get(f"/api/terminals/{big}/screen").json()["data"]["rows"] == 500
        stop, latencies = threading.Event(), []

        def read_screens():
            api = Api(server.url, keys["alice"])
            while not stop.is_set():
                api.get(f"/api/terminals/{big}/screen", timeout=60)

        readers = [threading.Thread(target=read_screens) for _ in range(16)]
        for reader in readers:
            reader.start()
        try:
            time.sleep(0.5)  # the readers are under way; what is measured is bob's reads meanwhile
            for _ in range(20):
                start = time.monotonic()
                assert bob.get(f"/api/terminals/{small}/stats", timeout=30).status_code == 200
                latencies.append(time.monotonic() - start)
        finally:
            stop.set()
            for reader in readers:
                reader.join()
        assert statistics.median(latencies) < 1.0, latencies
    finally:
        alice.cleanup()
        bob.cleanup()


# One bounded matcher for every pattern


def test_a_backtracking_pattern_in_persistent_terminal_stalls_no_other_user(server, keys):
    """`(a+)+$` against a run of a's matched with Python's re on the event loop: 27 a's held an unrelated user's
    request for 11.7 s. Now the core's matcher (regex, with its time limit) searches, off the event loop; a pattern
    that still backtracks too long is refused with INVALID_INPUT within the bound."""
    latencies: list[float] = []
    done = threading.Event()

    def bob_polls():
        bob = Api(server.url, keys["bob"])
        while not done.is_set():
            start = time.monotonic()
            try:
                bob.get("/api/health", timeout=10)
                latencies.append(time.monotonic() - start)
            except requests.RequestException:
                latencies.append(float("inf"))
            done.wait(0.2)

    async def scenario():
        async with connect(server.url, keys["alice"], "/mcp/persistent-terminal") as client:
            terminal = data(await client.call_tool("create_terminal", {}))["terminalId"]
            await client.call_tool("write_terminal", {"terminalId": terminal,
                                                      "input": "sleep 0.5; printf '%026d!\\n' 0 | tr 0 a | cat"})
            slow = await client.call_tool("wait_for_output", {"terminalId": terminal, "pattern": "(a+)+$",
                                                              "timeout": 3000})
            await client.call_tool("write_terminal", {"terminalId": terminal,
                                                      "input": "sleep 0.5; printf '%040d!\\n' 0 | tr 0 a | cat"})
            cut = await client.call_tool("wait_for_output", {"terminalId": terminal, "pattern": "(a|aa)+$",
                                                             "timeout": 3000})
            await client.call_tool("kill_terminal", {"terminalId": terminal})
            return slow, cut

    poller = threading.Thread(target=bob_polls)
    poller.start()
    try:
        slow, cut = run(scenario())
    finally:
        done.set()
        poller.join()
    assert latencies and max(latencies) < 2.0, latencies  # Python's re held bob's health check for seconds
    assert not slow.is_error and data(slow)["outcome"] in ("timeout", "matched"), text(slow)
    assert cut.is_error and "INVALID_INPUT: pattern: took longer than" in text(cut), text(cut)


# A cap on each user's live connections


CAP = 3


@pytest.fixture(scope="module")
def capped_server(django_db_setup):
    server = start_embedded(TERMINALS_MAX_LIVE_CONNECTIONS_PER_USER=str(CAP))
    yield server
    server.stop()


def test_live_connections_are_capped_per_user(capped_server, orm):
    """With a cap of 3: three WebSockets open, the fourth closes with 4429 after an audited refusal, a follow stream
    and the waits (for output, for the exit) answer 429 LIMIT_REACHED; another user is unaffected; closing one frees
    its place."""
    _, key = make_key(name="capped")
    _, other_key = make_key(name="uncapped")
    api, other = Api(capped_server.url, key), Api(capped_server.url, other_key)
    try:
        terminal = api.create(shell="/bin/sh")["terminalId"]
        others = other.create(shell="/bin/sh")["terminalId"]

        async def scenario():
            held = [await Live.open(capped_server.url, terminal, key) for _ in range(CAP)]
            code = await refusal(capped_server.url, terminal, {"X-API-Key": key})
            follow = await asyncio.to_thread(api.get, f"/api/terminals/{terminal}/output", params={"follow": "true"},
                                             timeout=10)
            # A wait holds a thread and a worker request for as long: it is a live connection too.
            waits = [await asyncio.to_thread(api.post, path, json=body, timeout=30) for path, body in (
                (f"/api/terminals/{terminal}/output/wait", {"pattern": "never", "timeoutMs": 10_000}),
                (f"/api/terminals/{terminal}/wait", {"timeoutMs": 10_000}))]
            bobs = await Live.open(capped_server.url, others, other_key)
            bobs_wait = await asyncio.to_thread(other.post, f"/api/terminals/{others}/output/wait",
                                                json={"pattern": "never", "timeoutMs": 0}, timeout=30)
            await held[0].close()
            again = await _open_when_freed(capped_server.url, terminal, key)
            for live in [*held[1:], bobs, again]:
                await live.close()
            return code, follow, waits, bobs_wait

        code, follow, waits, bobs_wait = run_live(scenario())
        assert code == 4429
        assert follow.status_code == 429
        for wait in waits:
            assert (wait.status_code, wait.json()["error"]["code"]) == (429, "LIMIT_REACHED"), wait.text
        assert bobs_wait.status_code == 200, bobs_wait.text
        error = follow.json()["error"]
        assert error["code"] == "LIMIT_REACHED" and "TERMINALS_MAX_LIVE_CONNECTIONS_PER_USER" in error["message"]
        refusals = AuditEvent.objects.filter(terminal_id=uuid.UUID(terminal), action="attach", outcome="LIMIT_REACHED")
        assert refusals.count() == 1
    finally:
        api.cleanup()
        other.cleanup()


async def _open_when_freed(url: str, terminal: str, key: str) -> Live:
    """A connection opened once a closed one has given its place back (the server learns of a close a moment later)."""
    deadline = time.monotonic() + 15
    while True:
        try:
            return await Live.open(url, terminal, key)
        except Exception:  # noqa: BLE001 - refused (4429) while the close is on its way
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)


# The runtime's own guard


def test_the_pty_refuses_a_size_its_window_cannot_hold():
    """Past 65535 the kernel's window size cannot hold a side: struct.error (a 500) before; now a refusal that the
    worker reports as INVALID_INPUT, at the spawn and in a resize, and the terminal keeps its size."""
    from terminals.runtime.buffer import OutputBuffer
    from terminals.runtime.errors import WindowSizeInvalid
    from terminals.runtime.pty import PtySession, SpawnSpec

    from .runtime_support import cleanup
    from .runtime_support import run as run_runtime

    def spec(cols: int, rows: int) -> SpawnSpec:
        return SpawnSpec(argv=["/bin/sh"], cwd="/tmp", env={"PATH": "/usr/bin:/bin"}, cols=cols, rows=rows)

    async def scenario():
        with pytest.raises(WindowSizeInvalid) as refused:
            PtySession(spec(70000, 24), buffer=OutputBuffer(max_lines=100, max_bytes=1 << 16)).start()
        assert refused.value.code == "INVALID_INPUT"
        session = PtySession(spec(80, 24), buffer=OutputBuffer(max_lines=100, max_bytes=1 << 16))
        session.start()
        try:
            for cols, rows in ((70000, 24), (80, 0), (80, True)):
                with pytest.raises(WindowSizeInvalid):
                    session.resize(cols, rows)
            assert (session.cols, session.rows) == (80, 24)
        finally:
            await cleanup(session)

    run_runtime(scenario)
