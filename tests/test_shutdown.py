"""Stopping the service ends every terminal's processes and closes every record, leaving nothing behind."""

import signal
import uuid

import pytest

from terminals.models import AuditEvent, TerminalSession
from terminals.runtime.processes import session_members

from .client import Api
from .helpers import command_line, live_processes
from .servers import start_embedded, start_split, wait_for


def start_busy_terminals(api: Api, count: int) -> list[tuple[str, int]]:
    """Terminals each running a background job and a foreground one; returns (id, shell pid) pairs."""
    terminals = []
    for _ in range(count):
        created = api.create(shell="/bin/bash")
        api.send(created["terminalId"], "sleep 300 & sleep 301")
        wait_for(lambda pid=created["pid"]: len(session_members(pid)) >= 3, 10, "the sleeps to start")
        terminals.append((created["terminalId"], created["pid"]))
    return terminals


def assert_all_ended(terminals) -> None:
    for terminal_id, pid in terminals:
        assert session_members(pid) == [], f"processes of {terminal_id} survived"
        record = TerminalSession.objects.get(pk=terminal_id)
        assert record.status == TerminalSession.Status.KILLED
        assert record.released is not None
        assert record.ended is not None


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_embedded_server_stop_ends_every_terminal(orm, keys, signum):
    """SIGTERM or SIGINT to the server ends every terminal's process group and closes their records."""
    server = start_embedded()
    api = Api(server.url, keys["alice"])
    terminals = start_busy_terminals(api, 3)
    returncode = server.processes[0].stop(signum)
    assert returncode == 0, server.processes[0].log()
    assert_all_ended(terminals)


def test_split_worker_stop_ends_its_terminals(orm, keys):
    """SIGTERM to a terminal_worker ends the terminals it hosts and closes their records."""
    server = start_split(webs=1, workers=1)
    try:
        api = Api(server.url, keys["alice"])
        terminals = start_busy_terminals(api, 2)
        assert server.process("worker0").stop(signal.SIGTERM) == 0
        assert_all_ended(terminals)
    finally:
        server.stop()


def processes_with(marker: str) -> list[int]:
    """Pids of live (not zombie) processes whose command line carries the marker."""
    return live_processes(lambda pid: marker in command_line(pid))


def test_sigterm_audits_each_end_and_ends_what_left_the_terminals_sessions(orm, keys):
    """A clean stop writes one `shutdown` row for each terminal it ends and leaves the `exit` row of one that ended
    by itself; `nohup` and `setsid` children, outside their terminal's session, end with it."""
    server = start_embedded()
    api = Api(server.url, keys["alice"])
    marker = f"shutdown-escapee-{uuid.uuid4().hex[:8]}"
    exited = api.create(shell="/bin/bash")["terminalId"]
    api.send(exited, "exit 7")
    api.wait_status(exited, "exited")
    running = api.create(shell="/bin/bash")["terminalId"]
    # exec -a puts the marker in each escapee's own command line.
    api.send(running, f"nohup bash -c 'exec -a {marker} sleep 301' >/dev/null 2>&1 & "
                      f"setsid bash -c 'exec -a {marker} sleep 302' >/dev/null 2>&1 &")
    wait_for(lambda: len(processes_with(marker)) >= 2, 10, "the nohup and setsid children to start")

    assert server.processes[0].stop(signal.SIGTERM) == 0, server.processes[0].log()

    def ends(terminal):
        rows = AuditEvent.objects.filter(terminal_id=terminal, action__in=("exit", "shutdown")).order_by("id")
        return [(row.action, row.details.get("exitCode")) for row in rows]

    assert ends(exited) == [("exit", 7)]
    assert [action for action, _ in ends(running)] == ["shutdown"]
    assert processes_with(marker) == [], "a nohup or setsid child outlived the stop"
