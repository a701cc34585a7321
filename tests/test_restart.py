"""Records survive a crash of the embedded server; the next start marks its terminals lost at once."""

import signal

from terminals.runtime.processes import session_members

from .client import Api
from .servers import start_embedded, wait_for


def test_restart_after_a_crash_marks_the_old_terminals_lost(orm, keys):
    """After SIGKILL, the restarted server reports the old terminal lost (409 to reads) and keeps its record."""
    first = start_embedded()
    api = Api(first.url, keys["alice"])
    created = api.create(shell="/bin/bash", name="before-crash")
    first.processes[0].stop(signal.SIGKILL)
    # The PTY closed with the process, which hung up the shell.
    wait_for(lambda: session_members(created["pid"]) == [], 10, "the shell to end with its server")

    second = start_embedded()
    try:
        api = Api(second.url, keys["alice"])
        record = api.get(f"/api/terminals/{created['terminalId']}").json()["data"]
        assert record["status"] == "lost"
        assert record["name"] == "before-crash"
        refused = api.get(f"/api/terminals/{created['terminalId']}/output")
        assert refused.status_code == 409
        assert refused.json()["error"]["code"] == "TERMINAL_INACTIVE"
        assert api.run(api.create(shell="/bin/sh")["terminalId"], "echo fine") == "fine"
        api.cleanup()
    finally:
        second.stop()
