"""Prometheus metrics (docs/operations.md): staff read them at /api/metrics, every process can also serve them on
a separate bind, and they count what happened: requests by endpoint, refusals by code, terminals by status and
worker, output bytes, live clients."""

from __future__ import annotations

import asyncio
import re

import requests
from prometheus_client.parser import text_string_to_metric_families

from terminals.models import AuditEvent, TerminalSession

from .client import Api
from .servers import start_split, wait_for
from .test_live import Live


def samples(text: str) -> dict[tuple[str, frozenset], float]:
    return {(sample.name, frozenset(sample.labels.items())): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def value(found: dict, name: str, **labels) -> float:
    return found.get((name, frozenset(labels.items())), 0.0)


def scrape(api: Api) -> dict:
    response = api.get("/api/metrics")
    assert response.status_code == 200, response.text
    assert response.headers["Content-Type"].startswith("text/plain; version=")
    return samples(response.text)


def test_only_staff_read_metrics_and_each_refusal_is_audited(server, keys, orm):
    anonymous = Api(server.url, None).get("/api/metrics")
    assert anonymous.status_code == 401 and anonymous.json()["error"]["code"] == "UNAUTHORIZED"
    before = AuditEvent.objects.filter(action="metrics", outcome="FORBIDDEN").count()
    refused = Api(server.url, keys["alice"]).get("/api/metrics")
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "FORBIDDEN"
    assert "terminals_" not in refused.text
    assert AuditEvent.objects.filter(action="metrics", outcome="FORBIDDEN").count() == before + 1


def test_metrics_count_requests_refusals_and_terminals_by_status_and_worker(server, keys, orm):
    staff, alice = Api(server.url, keys["staff"]), Api(server.url, keys["alice"])
    before = scrape(staff)
    terminal = alice.create(shell="/bin/bash")["terminalId"]
    for _ in range(3):
        assert alice.get(f"/api/terminals/{terminal}").status_code == 200
    assert alice.get("/api/terminals/00000000-0000-4000-8000-000000000000").status_code == 404
    after = scrape(staff)

    def grew(name, **labels):
        return value(after, name, **labels) - value(before, name, **labels)

    assert grew("terminals_http_requests_total", endpoint="terminal-detail", method="GET", status="200") == 3
    assert grew("terminals_http_requests_total", endpoint="terminal-list", method="POST", status="201") == 1
    assert grew("terminals_http_request_duration_seconds_count", endpoint="terminal-detail", method="GET") >= 3
    assert grew("terminals_refused_requests_total", code="TERMINAL_NOT_FOUND") == 1
    worker = str(TerminalSession.objects.get(pk=terminal).worker_id)
    assert value(after, "terminals_terminals", status="active", worker=worker) >= 1
    assert value(after, "terminals_worker_up", worker=worker,
                 hostname=TerminalSession.objects.get(pk=terminal).worker.hostname) == 1
    assert value(after, "terminals_database_up") == 1
    alice.cleanup()


def test_live_clients_and_output_bytes_in_the_embedded_process(embedded_server, keys, orm):
    staff, alice = Api(embedded_server.url, keys["staff"]), Api(embedded_server.url, keys["alice"])
    terminal = alice.create(shell="/bin/bash")["terminalId"]
    worker = str(TerminalSession.objects.get(pk=terminal).worker_id)
    before = scrape(staff)

    async def scenario():
        live = await Live.open(embedded_server.url, terminal, keys["alice"])
        await live.send(type="input", data="head -c 100000 /dev/zero | tr '\\0' x; echo\n")
        await live.until(lambda client: client.text.count("x") >= 100000, "the 100000 x's")
        during = scrape(staff)
        await live.ws.close()
        return during

    during = asyncio.run(scenario())
    assert value(during, "terminals_live_clients", interface="websocket") == value(
        before, "terminals_live_clients", interface="websocket") + 1
    assert (value(during, "terminals_output_bytes_total", worker=worker)
            - value(before, "terminals_output_bytes_total", worker=worker)) >= 100000
    wait_for(lambda: value(scrape(staff), "terminals_live_clients", interface="websocket")
             == value(before, "terminals_live_clients", interface="websocket"), 10, "the client to be counted out")
    alice.cleanup()


def test_every_split_process_serves_its_metrics_on_a_separate_bind(orm, keys):
    server = start_split(webs=1, workers=1, TERMINALS_METRICS_BIND="127.0.0.1:0")
    try:
        urls = {}
        for process in server.processes:
            found = re.search(r"metrics served on (http://\S+/metrics)", process.wait_for_log("metrics served on"))
            urls[process.name] = found.group(1)
        alice = Api(server.url, keys["alice"])
        terminal = alice.create(shell="/bin/bash")["terminalId"]
        alice.send(terminal, "head -c 50000 /dev/zero | tr '\\0' y; echo\n")
        worker = str(TerminalSession.objects.get(pk=terminal).worker_id)

        def worker_counted():
            found = samples(requests.get(urls["worker0"], timeout=10).text)
            return value(found, "terminals_output_bytes_total", worker=worker) >= 50000

        wait_for(worker_counted, 30, "the worker to count the output")
        web = samples(requests.get(urls["web0"], timeout=10).text)  # no key: this bind is for a private network
        assert value(web, "terminals_http_requests_total", endpoint="terminal-list", method="POST", status="201") == 1
        assert value(web, "terminals_terminals", status="active", worker=worker) == 1
        alice.cleanup()
    finally:
        server.stop()
