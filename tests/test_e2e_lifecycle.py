"""One terminal's whole life through the REST API, on the embedded and the split deployment alike."""



def test_terminal_lifecycle_create_type_read_stats_delete(client):
    """A terminal is created, runs what it is sent, reports its output and stats, and ends on delete."""
    created = client.create(shell="/bin/bash", cwd="/tmp", name="build", cols=100, rows=30)
    assert created["status"] == "active"
    assert created["cwd"] == "/tmp"
    assert created["shell"] == "/bin/bash"
    assert created["pid"] > 0
    assert created["created"].endswith("Z")
    terminal = created["terminalId"]

    assert client.run(terminal, "pwd") == "/tmp"
    assert client.run(terminal, "echo $((6 * 7))") == "42"

    stats = client.get(f"/api/terminals/{terminal}/stats").json()["data"]
    assert stats["terminalId"] == terminal
    assert stats["isActive"] is True
    assert stats["totalBytes"] > 0
    assert stats["newestLine"] == stats["totalLines"] - 1

    listed = client.get("/api/terminals").json()["data"]
    assert terminal in [item["terminalId"] for item in listed["terminals"]]
    assert listed["count"] == len(listed["terminals"])

    ended = client.delete(f"/api/terminals/{terminal}")
    assert ended.status_code == 200, ended.text
    assert ended.json()["data"]["status"] == "killed"

    after = client.get(f"/api/terminals/{terminal}/output")
    assert after.status_code == 409
    assert after.json()["error"]["code"] == "TERMINAL_INACTIVE"
    assert terminal not in [item["terminalId"] for item in client.get("/api/terminals").json()["data"]["terminals"]]
    everything = client.get("/api/terminals", params={"status": "all"}).json()["data"]["terminals"]
    assert [item["status"] for item in everything if item["terminalId"] == terminal] == ["killed"]


def test_terminal_exit_is_recorded_and_output_stays_readable(client):
    """A shell that exits by itself is marked exited with its code; its output can still be read."""
    terminal = client.create(shell="/bin/bash")["terminalId"]
    client.send(terminal, "echo goodbye; exit 3")
    record = client.wait_status(terminal, "exited")
    assert record["exitCode"] == 3
    assert record["signal"] is None
    output = client.get(f"/api/terminals/{terminal}/output").json()["data"]
    assert "goodbye" in output["output"]
    assert output["isActive"] is False
    assert output["exitStatus"] == {"exitCode": 3, "signal": None}
    refused = client.post(f"/api/terminals/{terminal}/input", json={"input": "echo again"})
    assert refused.status_code == 409
    assert refused.json()["error"]["code"] == "TERMINAL_INACTIVE"
