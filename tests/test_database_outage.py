"""The split deployment while its PostgreSQL is down: 503 DATABASE_UNAVAILABLE with Retry-After on every request that
needs the database, one log line for the outage and one for its end (no traceback per request), live output still
flowing from the worker, and every request served again once the database is back."""

import asyncio
import json
import re
import subprocess

import pytest
import requests
import websockets

from .client import Api
from .servers import ROOT, start_split, wait_for
from .test_live import ws_url

NO_CGROUPS = {"TERMINALS_CGROUPS": "false"}


class Cluster:
    """A throwaway PostgreSQL cluster (scripts/postgres.sh) that a test can stop and start again."""

    def __init__(self) -> None:
        started = self._script("start")
        self.directory, self.url = started.stdout.split()

    def _script(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", "scripts/postgres.sh", *args], cwd=ROOT, capture_output=True, text=True,
                              check=True, timeout=120)

    def halt(self) -> None:
        self._script("halt", self.directory)

    def resume(self) -> None:
        self._script("resume", self.directory)

    def remove(self) -> None:
        subprocess.run(["bash", "scripts/postgres.sh", "stop", self.directory], cwd=ROOT, check=False, timeout=120)


@pytest.fixture
def cluster():
    cluster = Cluster()
    yield cluster
    cluster.remove()


@pytest.fixture
def deployment(cluster, tmp_path):
    """One web process and one worker on the cluster; yields (server, database settings, API client of a fresh
    user)."""
    from .own_database import create_key

    database = {"DATABASE_URL": cluster.url, "TERMINALS_DATA_DIR": str(tmp_path)}
    server = start_split(webs=1, workers=1, **database, **NO_CGROUPS)
    try:
        _, key = create_key(database, "alice")
        yield server, database, Api(server.url, key)
    finally:
        server.stop()


TICKS = "i=0; while :; do echo tick-$i; i=$((i+1)); sleep 0.2; done"


def _refused_for_the_outage(response, html: bool = False) -> bool:
    if response.status_code != 503 or int(response.headers.get("Retry-After", "0")) < 1:
        return False
    if html:
        return "Database unavailable" in response.text
    return response.json()["error"]["code"] == "DATABASE_UNAVAILABLE"


def _last_tick(text: str) -> int:
    """The number of the last tick line the output holds, -1 for none."""
    numbers = re.findall(r"tick-(\d+)", text)
    return int(numbers[-1]) if numbers else -1


def test_every_interface_answers_503_database_unavailable_during_an_outage_and_works_again_after(cluster, deployment):
    """PostgreSQL stopped under a running deployment: REST, ACP, MCP and the dashboard answer 503
    DATABASE_UNAVAILABLE with Retry-After (never 500), a new WebSocket gets that code in an error frame and 4503;
    a WebSocket and an event stream attached before keep getting the terminal's output from its worker. The web process logs the outage
    once (a WARNING) and its end once (INFO), with no traceback; once PostgreSQL is back every request works."""
    from .own_database import create_key
    from .test_live import Live

    server, database, api = deployment
    _, other_key = create_key(database, "bob")  # never checked by the web process: MCP must ask the database
    terminal = api.create(command="/bin/bash", args=["-c", TICKS])["terminalId"]
    web = server.process("web0")

    stream = requests.get(f"{server.url}/api/terminals/{terminal}/output", params={"follow": "true"},
                          headers={"X-API-Key": api.key}, stream=True, timeout=30)
    streamed = stream.iter_lines(chunk_size=1, decode_unicode=True)

    def stream_until(tick: int) -> None:
        """Reads the event stream until it shows tick number tick (its read times out after 30 s)."""
        for line in streamed:
            if _last_tick(line) >= tick:
                return

    async def scenario():
        watching = await Live.open(server.url, terminal, api.key)
        await watching.until(lambda live: _last_tick(live.text) >= 1, "the first ticks")
        stream_until(1)
        cluster.halt()
        for _ in range(3):
            for method, path, body in [
                ("GET", "/api/terminals", None), ("POST", "/api/terminals", {"shell": "/bin/bash"}),
                ("GET", f"/api/terminals/{terminal}", None), ("GET", f"/api/terminals/{terminal}/output", None),
                ("POST", f"/api/terminals/{terminal}/input", {"input": "echo hi"}),
                ("DELETE", f"/api/terminals/{terminal}", None),
                ("POST", "/api/acp", {"jsonrpc": "2.0", "id": 1, "method": "terminal/output",
                                      "params": {"sessionId": "s", "terminalId": terminal}}),
            ]:
                response = api.request(method, path, json=body)
                assert _refused_for_the_outage(response), (method, path, response.status_code, response.text)
            mcp = requests.post(f"{server.url}/mcp", headers={"X-API-Key": other_key, "Accept": "application/json"},
                                json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, timeout=30)
            assert _refused_for_the_outage(mcp), mcp.text
            page = requests.get(f"{server.url}/terminals", cookies={"sessionid": "a" * 32}, timeout=30,
                                allow_redirects=False)
            assert _refused_for_the_outage(page, html=True), (page.status_code, page.text)
        refused = await websockets.connect(ws_url(server.url, terminal), additional_headers={"X-API-Key": other_key})
        frame = json.loads(await asyncio.wait_for(refused.recv(), 30))
        assert frame["code"] == "DATABASE_UNAVAILABLE" and frame["retryAfter"] >= 1, frame
        with pytest.raises(websockets.ConnectionClosed) as closed:
            await asyncio.wait_for(refused.recv(), 30)
        assert closed.value.rcvd.code == 4503
        # The attached client still gets what the terminal prints, from its worker, while the database is away.
        # Ticks printed after every request above was refused: printed during the outage.
        later = _last_tick(watching.text) + 5
        await watching.until(lambda live: _last_tick(live.text) >= later, "ticks during the outage")
        stream_until(later)  # and so does an event stream
        cluster.resume()
        await watching.close()

    asyncio.run(scenario())
    stream.close()
    wait_for(lambda: api.get("/api/terminals").status_code == 200, 30, "requests to work again")
    assert api.post(f"/api/terminals/{terminal}/input", json={"input": "x"}).status_code == 200
    log = web.log()
    assert "Traceback" not in log, log[-5000:]
    assert log.count("WARNING terminals.plumbing.outage: database unavailable") == 1, log[-5000:]
    assert log.count("INFO terminals.plumbing.outage: database available again") == 1, log[-5000:]
    assert "Service Unavailable" not in log  # django.request's line for each 503
    api.cleanup()


def test_a_database_out_of_connections_answers_503_not_500(cluster, deployment):
    """Every slot of PostgreSQL's max_connections taken (as bench figure 11 saw under a ramp of pollers): requests
    that need a new connection answer 503 DATABASE_UNAVAILABLE with Retry-After, never a 500, and once the slots
    are free everything answers again."""
    import concurrent.futures

    import psycopg

    server, _, api = deployment
    terminal = api.create(shell="/bin/bash")["terminalId"]
    held = []
    try:
        while True:  # every slot, the superusers' reserve included (the service connects as a superuser here)
            try:
                held.append(psycopg.connect(cluster.url, autocommit=True))
            except psycopg.OperationalError as refused:
                assert "too many" in str(refused), refused
                break
        # More requests at once than the web process has threads with a connection: new threads need new ones.
        headers = {"X-API-Key": api.http.headers["X-API-Key"]}
        with concurrent.futures.ThreadPoolExecutor(max_workers=24) as pool:
            answers = list(pool.map(lambda _: requests.get(f"{server.url}/api/terminals/{terminal}",
                                                           headers=headers, timeout=30), range(48)))
    finally:
        for connection in held:
            connection.close()
    statuses = sorted({answer.status_code for answer in answers})
    assert 500 not in statuses and set(statuses) <= {200, 503}, statuses
    refused = [answer for answer in answers if answer.status_code == 503]
    assert refused, "no request needed a new connection: the test did not exhaust the database's connections"
    assert all(_refused_for_the_outage(answer) for answer in refused), refused[0].text
    assert wait_for(lambda: api.get(f"/api/terminals/{terminal}").status_code == 200, 20, "the service answering")
