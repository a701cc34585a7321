"""Recording (docs/recording.md), through the running service: a recorded terminal's asciicast file replays with the
real asciinema tool to exactly the bytes the terminal showed, with timings taken when the bytes were read, its
resizes and its exit; the file is sealed in the audit trail and verify_audit notices a changed or removed one;
only the owner and staff read it; the policy records terminals nobody asked to record; the size cap, the retention
sweep, input recording and writing while the terminal runs."""

from __future__ import annotations

import hashlib
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from terminals.models import ApiKey, AuditEvent, Recording, key_prefix

from .client import Api
from .helpers import manage
from .servers import start_embedded, wait_for

ASCIINEMA = str(Path(sys.executable).parent / "asciinema")
CAST = "application/x-asciicast"


def username(key: str) -> str:
    return ApiKey.objects.select_related("user").get(prefix=key_prefix(key)).user.get_username()


def parse(body: bytes) -> tuple[dict, list]:
    header, *lines = body.decode("utf-8").splitlines()
    return json.loads(header), [json.loads(line) for line in lines]


def sealed(api: Api, terminal_id: str, timeout: float = 15.0) -> dict:
    """The terminal's record once its recording is finished and sealed."""
    def ready():
        record = api.get(f"/api/terminals/{terminal_id}").json()["data"]
        return record if record["recording"] and record["recording"]["finished"] else None

    return wait_for(ready, timeout, f"the recording of {terminal_id} to be sealed")


def fetch(api: Api, terminal_id: str):
    return api.get(f"/api/terminals/{terminal_id}/recording", headers={"Accept": CAST})


def replay(body: bytes, tmp_path: Path) -> bytes:
    path = tmp_path / "replay.cast"
    path.write_bytes(body)
    return subprocess.run([ASCIINEMA, "cat", str(path)], capture_output=True, check=True, timeout=60).stdout


def test_a_recorded_terminal_replays_with_asciinema_to_the_bytes_it_showed(alice, keys, orm, tmp_path):
    """Commands, colour, a resize, a full-screen program (less) and the exit, replayed by `asciinema cat`."""
    before = time.time()
    created = alice.create(shell="/bin/bash", record=True, cols=80, rows=24)
    after = time.time()
    terminal = created["terminalId"]
    assert created["recorded"] is True
    alice.command(terminal, "true")  # the first prompt is there
    typed = time.time()
    coloured = alice.command(terminal, "printf '\\033[31mred-%s\\033[0m\\n' $((6*7))")
    seen = time.time()
    assert "red-42" in coloured["output"]
    assert alice.post(f"/api/terminals/{terminal}/resize", json={"cols": 100, "rows": 30}).status_code == 200
    assert alice.command(terminal, "stty size")["output"].strip().endswith("30 100")
    alice.send(terminal, "seq 1 3 | less")
    alice.wait_output(terminal, lambda text: "(END)" in text, what="less showing its (END) prompt")
    alice.send(terminal, "q", appendNewline=False)
    # The typed line is a command of the shell's too: the next one waits until the shell has ended it.
    wait_for(lambda: not alice.get(f"/api/terminals/{terminal}").json()["data"]["busy"], 15, "the shell's prompt")
    alice.command(terminal, "echo back-''from-less")
    alice.send(terminal, "exit 3")
    alice.wait_status(terminal, "exited")
    record = sealed(alice, terminal)

    response = fetch(alice, terminal)
    assert response.status_code == 200, response.text
    assert response.headers["Content-Type"] == CAST
    body = response.content
    assert (len(body), hashlib.sha256(body).hexdigest()) == (record["recording"]["bytes"], record["recording"]["sha256"])
    header, events = parse(body)
    assert (header["version"], header["width"], header["height"]) == (2, 80, 24)
    times = [event[0] for event in events]
    assert times == sorted(times), "event times go back"
    assert ["r", "100x30"] in [event[1:] for event in events]
    assert events[-1][1:] == ["m", "exit 3"]
    assert not [event for event in events if event[1] == "i"], "input is recorded only when the setting says so"
    # The coloured line was read after it was typed and before the client saw it; the recording's clock started
    # during the creation request. So its time lies between these two bounds, measured on the same clock.
    red = next(event for event in events if event[1] == "o" and "\x1b[31mred-42" in event[2])
    assert typed - after <= red[0] <= seen - before

    # Replayed by the real tool, the recording gives back every byte the terminal showed, in order.
    shown = alice.get(f"/api/terminals/{terminal}/output", params={"fromByte": 0, "maxBytes": 1 << 20}).json()["data"]
    assert replay(body, tmp_path).decode() == shown["chunk"]
    assert "\x1b[?1049h" in shown["chunk"], "less did not switch to the alternate screen: no full-screen program ran"

    seal = AuditEvent.objects.get(action="recording_seal", terminal_id=terminal)
    assert (seal.details["size"], seal.details["sha256"]) == (len(body), hashlib.sha256(body).hexdigest())
    assert AuditEvent.objects.filter(action="recording", terminal_id=terminal, outcome="ok",
                                     username=username(keys["alice"])).exists()


def test_only_the_owner_and_staff_read_a_recording(alice, bob, staff, keys, orm):
    terminal = alice.create(command="printf", args=["secret-of-alice"], record=True)["terminalId"]
    alice.wait_status(terminal, "exited")
    sealed(alice, terminal)
    refused = fetch(bob, terminal)
    unknown = fetch(bob, "00000000-0000-4000-8000-000000000000")
    assert (refused.status_code, refused.json()["error"]["code"]) == (404, "TERMINAL_NOT_FOUND")
    assert refused.json()["error"]["message"] == unknown.json()["error"]["message"].replace(
        "00000000-0000-4000-8000-000000000000", terminal)
    assert b"secret-of-alice" not in refused.content
    assert b"secret-of-alice" in fetch(staff, terminal).content
    assert AuditEvent.objects.filter(action="recording", terminal_id=terminal, outcome="ok",
                                     username=username(keys["staff"])).exists()
    assert not AuditEvent.objects.filter(action="recording", terminal_id=terminal, outcome="ok",
                                         username=username(keys["bob"])).exists()
    assert AuditEvent.objects.filter(action="recording", terminal_id=terminal, outcome="TERMINAL_NOT_FOUND",
                                     username=username(keys["bob"])).exists(), "the refusal is audited"


def test_a_terminal_not_recorded_says_so_and_how_to_record(alice):
    created = alice.create(command="true")
    assert created["recorded"] is False
    response = fetch(alice, created["terminalId"])
    assert response.status_code == 404
    error = response.json()["error"]
    assert error["code"] == "RECORDING_NOT_FOUND" and '"record": true' in error["message"]


@pytest.mark.embedded_only("reads the files on this host; the split deployment shares it and the code path")
def test_verify_audit_reports_a_changed_or_removed_recording(alice, orm):
    terminal = alice.create(command="printf", args=["to be sealed"], record=True)["terminalId"]
    alice.wait_status(terminal, "exited")
    sealed(alice, terminal)
    path = Path(Recording.objects.get(pk=terminal).path)
    original = path.read_bytes()
    assert manage("verify_audit").returncode == 0
    try:
        path.write_bytes(original.replace(b"to be sealed", b"to be forged"))
        changed = manage("verify_audit")
        assert changed.returncode == 1 and f"recording of terminal {terminal} was changed" in changed.stderr
        path.unlink()
        removed = manage("verify_audit")
        assert removed.returncode == 1 and f"recording of terminal {terminal} is missing" in removed.stderr
    finally:
        path.write_bytes(original)
        path.chmod(0o600)
    assert manage("verify_audit").returncode == 0


# A deployment of its own: recording by policy, with input, a 1 MB cap and a one-day retention swept often.


@pytest.fixture(scope="module")
def recorder(django_db_setup, django_db_blocker, keys):
    with django_db_blocker.unblock():
        alice = username(keys["alice"])
    server = start_embedded(TERMINALS_RECORD_USERS=alice, TERMINALS_RECORD_INPUT="true",
                            TERMINALS_RECORDING_MAX_MB="1", TERMINALS_RECORDING_RETENTION_DAYS="1",
                            TERMINALS_SWEEP_INTERVAL_MS="200", TERMINALS_RECORDING_FLUSH_MS="100")
    yield server
    server.stop()


@pytest.fixture
def alice_recorded(recorder, keys):
    api = Api(recorder.url, keys["alice"])
    yield api
    api.cleanup()


def test_the_policy_records_a_users_terminals_and_their_input_when_set(alice_recorded, recorder, keys, orm):
    terminal = alice_recorded.create(shell="/bin/sh")["terminalId"]  # nobody asked
    bob = Api(recorder.url, keys["bob"])
    try:
        assert bob.create(command="true")["recorded"] is False  # the policy names alice only
    finally:
        bob.cleanup()
    alice_recorded.command(terminal, "echo typed-''here")
    alice_recorded.send(terminal, "exit")
    alice_recorded.wait_status(terminal, "exited")
    record = sealed(alice_recorded, terminal)
    assert record["recorded"] is True and record["recording"]["recordsInput"] is True
    _, events = parse(fetch(alice_recorded, terminal).content)
    assert ["i", "exit\n"] in [event[1:] for event in events]


def test_the_size_cap_stops_the_file_not_the_terminal(alice_recorded, orm):
    terminal = alice_recorded.create(shell="/bin/sh")["terminalId"]
    alice_recorded.command(terminal, "head -c 3000000 /dev/zero | tr '\\0' x; echo", timeoutMs=60000)
    assert alice_recorded.command(terminal, "echo still-''here")["output"].strip() == "still-here"
    alice_recorded.send(terminal, "exit")
    record = sealed(alice_recorded, terminal)
    assert record["recording"]["capped"] is True and record["recording"]["bytes"] <= (1 << 20) + 200
    _, events = parse(fetch(alice_recorded, terminal).content)
    markers = [event[2] for event in events if event[1] == "m"]
    assert markers == [f"recording stopped: it reached its size cap of {1 << 20} bytes"]


def test_a_recording_is_on_disk_while_its_terminal_runs(alice_recorded, orm):
    """Written as output arrives (every RECORDING_FLUSH_MS), not only at the end: a crash keeps what was flushed."""
    terminal = alice_recorded.create(shell="/bin/sh")["terminalId"]
    alice_recorded.command(terminal, "echo flushed-''early")
    path = Path(Recording.objects.get(pk=terminal).path)
    wait_for(lambda: path.exists() and b"flushed-early" in path.read_bytes(), 15, "the output in the file")
    assert oct(path.stat().st_mode & 0o777) == "0o600" and oct(path.parent.stat().st_mode & 0o777) == "0o700"
    parse(path.read_bytes())  # whole lines: it parses while the terminal runs
    assert alice_recorded.get(f"/api/terminals/{terminal}").json()["data"]["status"] == "active"


def test_the_retention_sweep_deletes_old_recordings_and_audits_it(alice_recorded, orm):
    terminal = alice_recorded.create(command="printf", args=["old news"])["terminalId"]
    alice_recorded.wait_status(terminal, "exited")
    sealed(alice_recorded, terminal)
    path = Path(Recording.objects.get(pk=terminal).path)
    assert path.exists()
    from datetime import timedelta

    from django.utils import timezone

    Recording.objects.filter(pk=terminal).update(finished=timezone.now() - timedelta(days=2))
    wait_for(lambda: not path.exists(), 15, "the sweep to delete the recording")
    wait_for(lambda: AuditEvent.objects.filter(action="recording_delete", terminal_id=terminal).exists(), 15,
             "the deletion's audit row")
    response = fetch(alice_recorded, terminal)
    assert response.status_code == 404 and "retention" in response.json()["error"]["message"]
    assert manage("verify_audit").returncode == 0, "a deletion on record is not tampering"


def test_every_interface_asks_for_a_recording_in_its_own_way(server, alice, keys, orm):
    """REST's "record" is above; MCP's create_terminal takes record, ACP's terminal/create takes _meta.record (and
    refuses a _meta.record that is not a boolean, starting nothing)."""
    from .test_acp import new_session, rpc
    from .test_mcp import connect, data, run

    async def over_mcp() -> str:
        async with connect(server.url, keys["alice"]) as client:
            created = data(await client.call_tool("create_terminal", {"command": "printf", "args": ["via-mcp"],
                                                                      "record": True}))
            assert created["recorded"] is True
            return created["terminal_id"]

    from_mcp = run(over_mcp())
    session = new_session()
    from_acp = rpc(alice, "terminal/create", {"sessionId": session, "command": "printf", "args": ["via-acp"],
                                               "_meta": {"record": True}})["result"]["terminalId"]
    refused = rpc(alice, "terminal/create", {"sessionId": session, "command": "true", "_meta": {"record": "yes"}})
    assert refused["error"]["code"] == -32602 and "_meta.record" in json.dumps(refused["error"])
    assert len(alice.get("/api/terminals", params={"sessionId": session, "status": "all"}).json()["data"]["terminals"]) == 1
    alice.created += [from_mcp, from_acp]
    for terminal, printed in ((from_mcp, b"via-mcp"), (from_acp, b"via-acp")):
        alice.wait_status(terminal, "exited")
        sealed(alice, terminal)
        assert printed in fetch(alice, terminal).content


def test_a_recording_survives_its_worker_being_killed_up_to_its_last_flush(django_db_setup, keys, orm):
    """SIGKILL the embedded server (its worker with it) while a recorded terminal runs: the file keeps what was
    flushed, whole lines that parse and replay, and no seal (the trail never vouched for it)."""
    server = start_embedded(TERMINALS_RECORD_ALL="true", TERMINALS_RECORDING_FLUSH_MS="100")
    api = Api(server.url, keys["bob"])
    try:
        terminal = api.create(shell="/bin/sh")["terminalId"]
        api.command(terminal, "echo before-''the-crash")
        path = Path(Recording.objects.get(pk=terminal).path)
        wait_for(lambda: path.exists() and b"before-the-crash" in path.read_bytes(), 15, "the flushed output")
    finally:
        server.processes[0].stop(signal.SIGKILL)
    header, events = parse(path.read_bytes())
    assert header["version"] == 2 and any("before-the-crash" in event[2] for event in events if event[1] == "o")
    assert not [event for event in events if event[1] == "m"], "no exit was recorded: the worker died first"
    assert not AuditEvent.objects.filter(action="recording_seal", terminal_id=terminal).exists()
