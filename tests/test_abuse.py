"""Abuse one terminal; the worker, the service and every other terminal keep working."""

from __future__ import annotations

import pytest

from tests.client import Api
from tests.servers import start_embedded, wait_for

LONG = 5000  # past the 4095 bytes a line may have for a program reading whole lines


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def _command(api: Api, terminal_id: str, command: str, timeout_ms: int = 10_000) -> dict:
    response = api.post(f"/api/terminals/{terminal_id}/commands", json={"command": command, "timeoutMs": timeout_ms})
    assert response.status_code == 200, response.text
    return response.json()["data"]


@pytest.fixture(scope="module")
def abuse_server(django_db_setup):
    server = start_embedded()
    yield server
    server.stop()


@pytest.fixture
def api(abuse_server, keys):
    return Api(abuse_server.url, keys["alice"])


def test_a_line_too_long_for_a_line_reading_program_is_refused_whole(api, tmp_path):
    target = tmp_path / "lines"
    terminal = api.create(command="sh", args=["-c", f"cat > {target}"], cwd="/tmp")["terminalId"]
    response = api.post(f"/api/terminals/{terminal}/input", json={"input": "a" * LONG})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "INVALID_INPUT"
    assert error["details"] == {"line_bytes": LONG, "limit_bytes": 4095}
    # Nothing of it went through; a line that fits does, whole.
    api.send(terminal, "b" * 4095)
    api.send(terminal, "\x04", appendNewline=False)
    api.wait_status(terminal, "exited")
    assert target.read_bytes() == b"b" * 4095 + b"\n"


def test_a_long_line_to_a_line_editor_arrives_whole(api):
    terminal = api.create(cwd="/tmp")["terminalId"]
    # bash's readline takes keys one by one (no ICANON), so the whole line reaches it.
    result = _command(api, terminal, f"printf %s {'x' * LONG} | wc -c")
    assert result["exitCode"] == 0 and result["output"].strip() == str(LONG), result


def test_input_to_a_program_that_never_reads_overflows_clearly(api):
    terminal = api.create(command="sleep", args=["600"], cwd="/tmp")["terminalId"]
    chunk = "z" * 4000 + "\n"  # lines that fit; 16 KiB requests until the 1 MiB queue is full
    statuses = []
    for _ in range(400):
        response = api.post(f"/api/terminals/{terminal}/input", json={"input": chunk * 4, "appendNewline": False})
        statuses.append(response.status_code)
        if response.status_code != 200:
            break
    assert statuses[-1] == 409, statuses[-5:]
    assert response.json()["error"]["code"] == "WRITE_FAILED"
    assert response.json()["error"]["details"]["limit_bytes"] == 1 << 20
    # The worker did not block: other terminals and the API answer, and the stuck one can be ended.
    other = api.create(cwd="/tmp")["terminalId"]
    assert _command(api, other, "echo free")["output"].strip() == "free"
    assert api.delete(f"/api/terminals/{terminal}").status_code == 200


def test_an_output_flood_leaves_other_terminals_answering_memory_bounded_and_ctrl_c_working(api, abuse_server):
    worker_pid = abuse_server.processes[0].pid
    bystander = api.create(cwd="/tmp")["terminalId"]
    _command(api, bystander, "true")
    flood = api.create(cwd="/tmp")["terminalId"]
    before = _rss_kib(worker_pid)
    api.send(flood, "yes flood-flood-flood-flood-flood")
    wait_for(lambda: api.get(f"/api/terminals/{flood}/stats").json()["data"]["totalBytes"] > 64 << 20, 60,
             "64 MiB of flood output")
    for number in range(10):
        result = _command(api, bystander, f"echo calm-{number}")
        assert result["exitCode"] == 0 and result["output"].strip() == f"calm-{number}", result
    # The buffer is bounded (4 MiB by default): however much was flooded, memory is not.
    grown_mib = (_rss_kib(worker_pid) - before) / 1024
    assert grown_mib < 100, f"worker grew {grown_mib:.0f} MiB during the flood"
    api.send(flood, "\x03")
    api.send(flood, "echo stopped-$((6 * 7))")

    def quiet() -> bool:
        text = api.get(f"/api/terminals/{flood}/output", params={"mode": "tail", "tailLines": 5}).json()["data"]["output"]
        return "stopped-42" in text

    wait_for(quiet, 30, "the flood stopped by Ctrl-C and the shell answering")
