"""The agent scenarios of seed 001 (A–D) and seed 003's timeout recipe, end to end through the REST API."""

import threading

import pytest

from .servers import wait_for




@pytest.fixture
def project(tmp_path):
    """A small project with a dev server that logs, a test command and a log with an error in it."""
    (tmp_path / "server.sh").write_text(
        "echo 'listening on :8080'\n"
        "i=0; while :; do i=$((i+1)); echo \"GET /health 200 request=$i\"; sleep 0.05; done\n"
    )
    (tmp_path / "app.log").write_text("start\nok\nERROR database timeout\nok\nERROR disk full\n")
    return tmp_path


def test_scenario_a_quick_bounded_command(alice, project):
    """001 A: a tab, one bounded command with its exact output and exit code, then recent context."""
    terminal = alice.create(shell="/bin/bash", cwd=str(project), name="work")["terminalId"]
    listing = alice.command(terminal, "ls -1", timeoutMs=5000)
    assert listing["exitCode"] == 0
    assert listing["timedOut"] is False
    assert listing["output"].split() == ["app.log", "server.sh"]
    context = alice.get(f"/api/terminals/{terminal}/output", params={"mode": "tail", "tailLines": 5}).json()["data"]
    assert "server.sh" in context["output"]


def test_scenario_b_dev_server_started_logs_read_by_offset_then_stopped(alice, project):
    """001 B: a long-running process starts without blocking, its log is read in byte slices, SIGINT stops it."""
    terminal = alice.create(shell="/bin/bash", cwd=str(project), name="web")["terminalId"]
    started = alice.command(terminal, "bash server.sh", wait=False)
    assert started["status"] == "running"
    seen, next_byte = "", 0

    def read_slice():
        nonlocal seen, next_byte
        data = alice.get(f"/api/terminals/{terminal}/output", params={"fromByte": next_byte, "maxBytes": 256}).json()["data"]
        seen += data["chunk"]
        next_byte = data["nextByte"]
        return "request=5" in seen

    wait_for(read_slice, 15, "five requests in the log")
    assert "listening on :8080" in seen
    assert alice.post(f"/api/terminals/{terminal}/signal", json={"signal": "SIGINT"}).status_code == 200
    stopped = alice.post(f"/api/terminals/{terminal}/commands/{started['commandId']}/wait",
                         params={"timeoutMs": 30000}).json()["data"]  # at once on a quiet machine; a hang guard
    assert stopped["status"] == "completed"
    assert stopped["signal"] == "SIGINT"
    assert alice.command(terminal, "echo still-here")["output"] == "still-here\n"


def test_scenario_c_three_services_in_three_named_terminals(alice, project):
    """001 C: web, db and tests run side by side in named terminals; the test run returns while the others go on."""
    names = {name: alice.create(shell="/bin/bash", cwd=str(project), name=name)["terminalId"]
             for name in ("web", "db", "tests")}
    alice.command(names["web"], "bash server.sh", wait=False)
    alice.command(names["db"], "while :; do echo db-ready; sleep 0.1; done", wait=False)
    tests = alice.command(names["tests"], "for t in a b c; do echo test-$t ok; done; exit_code=0; (exit $exit_code)",
                timeoutMs=120_000)
    assert tests["exitCode"] == 0
    assert tests["output"] == "test-a ok\ntest-b ok\ntest-c ok\n"
    listed = alice.get("/api/terminals").json()["data"]["terminals"]
    assert {item["name"] for item in listed if item["terminalId"] in names.values()} == {"web", "db", "tests"}
    for name in ("web", "db"):
        detail = alice.get(f"/api/terminals/{names[name]}").json()["data"]
        assert detail["busy"] is True
        summary = alice.get(f"/api/terminals/{names[name]}/output", params={"mode": "tail", "tailLines": 3})
        assert summary.status_code == 200


def test_scenario_d_investigating_a_failure(alice, project):
    """001 D: pull a long history quickly, then grep the log for errors with an exit code."""
    terminal = alice.create(shell="/bin/bash", cwd=str(project))["terminalId"]
    alice.command(terminal, "seq 1 3000")
    history = alice.get(f"/api/terminals/{terminal}/output", params={"mode": "tail", "tailLines": 2000, "maxLines": 2000}).json()["data"]
    assert history["stats"]["linesShown"] == 2000
    errors = alice.command(terminal, "grep -i error app.log", timeoutMs=10_000)
    assert errors["exitCode"] == 0
    assert errors["output"] == "ERROR database timeout\nERROR disk full\n"
    none = alice.command(terminal, "grep -i panic app.log")
    assert none["exitCode"] == 1
    assert none["output"] == ""


def test_timeout_recipe_through_rest(alice):
    """003: create, wait with a timer, kill when it fires first, read the final output, release."""
    terminal = alice.create(command="sh", args=["-c", "echo working; sleep 30; echo never"])["terminalId"]
    wait_for(lambda: "working" in alice.full_output(terminal), 10, "the command to start")
    outcome = {}

    def wait_for_exit():
        outcome["wait"] = alice.post(f"/api/terminals/{terminal}/wait", params={"timeoutMs": 20_000}).json()["data"]

    waiter = threading.Thread(target=wait_for_exit)
    waiter.start()
    timer = threading.Event()
    timer.wait(0.5)  # the agent's own timeout, shorter than the command
    killed = alice.post(f"/api/terminals/{terminal}/kill")
    assert killed.status_code == 200, killed.text
    waiter.join(20)
    assert outcome["wait"]["timedOut"] is False
    assert outcome["wait"]["signal"] == "SIGKILL"
    final = alice.get(f"/api/terminals/{terminal}/output").json()["data"]
    assert "working" in final["output"] and "never" not in final["output"]
    assert final["exitStatus"] == {"exitCode": None, "signal": "SIGKILL"}
    assert alice.delete(f"/api/terminals/{terminal}").status_code == 200
    released = alice.get(f"/api/terminals/{terminal}/output")
    assert released.status_code == 409
    assert released.json()["error"]["code"] == "TERMINAL_INACTIVE"
