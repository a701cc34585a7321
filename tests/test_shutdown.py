"""Stopping the service ends every terminal's processes and closes every record, leaving nothing behind."""

import signal

import pytest

from terminals.models import TerminalSession
from terminals.runtime.processes import session_members

from .client import Api
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
