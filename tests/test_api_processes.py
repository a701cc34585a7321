"""Processes of a terminal: signals to the foreground, what it is doing now, resizing, and ending it (delete and kill)."""

from __future__ import annotations

import subprocess
import time

import pytest

from terminals.models import AuditEvent

from .client import Api
from .helpers import names_field, printed
from .servers import wait_for

# Accepted signals whose default action ends a process (sleep keeps every default); SIGTSTP and SIGCONT are tested apart.
ENDING = ("SIGTERM", "SIGINT", "SIGKILL", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2")


def detail(api: Api, terminal: str) -> dict:
    response = api.get(f"/api/terminals/{terminal}")
    assert response.status_code == 200, response.text
    return response.json()["data"]


def wait_foreground(api: Api, terminal: str, program: str, timeout: float = 10.0) -> dict:
    """Waits until the terminal is busy with a foreground process whose command line contains program."""

    def running():
        data = detail(api, terminal)
        foreground = data.get("foreground") or {}
        return data if data.get("busy") is True and program in foreground.get("command", "") else None

    return wait_for(running, timeout, f"{program!r} in the foreground of {terminal}")


def wait_prompt(api: Api, terminal: str, timeout: float = 10.0) -> dict:
    """Waits until the shell is back at its prompt (not busy)."""
    return wait_for(
        lambda: (lambda data: data if data.get("busy") is False else None)(detail(api, terminal)),
        timeout, f"terminal {terminal} to be back at its prompt",
    )


def signal(api: Api, terminal: str, body=None):
    return api.post(f"/api/terminals/{terminal}/signal", json=body)


def audited(terminal: str, action: str) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(terminal_id=terminal, action=action, outcome="ok").order_by("id"))


def assert_invalid(response, field: str) -> None:
    assert response.status_code == 400, response.text
    body = response.json()
    assert body["success"] is False
    assert body["error"]["code"] == "INVALID_INPUT"
    assert names_field(body["error"], field), body
    assert field in body["error"]["message"]


def process_state(pid: int) -> str | None:
    """The one-letter state of pid from /proc (R, S, T, Z...), or None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            text = stat.read()
    except OSError:
        return None
    return text[text.rfind(")") + 2 :].split()[0]


def pgrep(pattern: str) -> list[int]:
    """Live, non-zombie processes whose full command line matches pattern (pgrep -f)."""
    result = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True)
    return [int(pid) for pid in result.stdout.split() if process_state(int(pid)) not in (None, "Z")]


def started_by(terminal: str, pattern: str) -> list[int]:
    """The live processes matching pattern that carry this terminal's id in their environment.

    Other test runs may have their own `sleep 30x` going at the same time; the
    terminal's marker variable tells this terminal's apart.
    """
    marker = f"TERMINALS_TERMINAL_ID={terminal}".encode()
    found = []
    for pid in pgrep(pattern):
        try:
            with open(f"/proc/{pid}/environ", "rb") as environ:
                if marker in environ.read().split(b"\0"):
                    found.append(pid)
        except OSError:
            pass
    return found


def wait_gone(pid: int, timeout: float = 3.0) -> None:
    wait_for(lambda: process_state(pid) in (None, "Z"), timeout, f"process {pid} to end")


def sleeper(api: Api) -> dict:
    """A command terminal running `sleep 60` on a PTY: it leads its own foreground process group."""
    created = api.create(command="sleep", args=["60"])
    pid = created["pid"]
    wait_for(lambda: open(f"/proc/{pid}/cmdline").read().split("\0")[0].endswith("sleep"), 10, "sleep to be exec'd")
    return created


# Signals


def test_signal_default_sigint_interrupts_foreground_sleep(orm, alice):
    """With no body, SIGINT goes to the foreground process group: a `sleep 30` typed into the shell ends at once."""
    created = alice.create(shell="/bin/bash")
    terminal = created["terminalId"]
    alice.run(terminal, "true")
    alice.send(terminal, "sleep 30")
    busy = wait_foreground(alice, terminal, "sleep")
    sleep_pid = busy["foreground"]["pid"]
    assert sleep_pid != created["pid"]

    started = time.monotonic()
    response = signal(alice, terminal)
    assert response.status_code == 200, response.text
    data = response.json()["data"]
    assert data == {"terminalId": terminal, "signal": "SIGINT", "processGroup": sleep_pid}
    wait_prompt(alice, terminal)
    assert time.monotonic() - started < 5
    wait_gone(sleep_pid)
    assert alice.run(terminal, "echo back-$((1+1))") == "back-2"

    events = audited(terminal, "signal")
    assert len(events) == 1
    assert events[0].details == {"signal": "SIGINT", "processGroup": sleep_pid}
    assert events[0].username.startswith("alice-")


def test_signal_detail_shows_busy_and_foreground_then_prompt(alice):
    """GET /terminals/{id} shows busy true and the `sleep` in the foreground while it runs, busy false at the prompt."""
    created = alice.create(shell="/bin/bash")
    terminal = created["terminalId"]
    alice.run(terminal, "true")
    idle = wait_prompt(alice, terminal)
    assert idle["isActive"] is True
    assert idle["busy"] is False
    assert idle["foreground"]["pid"] == created["pid"]
    assert idle["runningCommand"] is None

    alice.send(terminal, "sleep 30")
    busy = wait_foreground(alice, terminal, "sleep")
    assert busy["busy"] is True
    assert busy["isActive"] is True
    assert set(busy["foreground"]) == {"pid", "command"}
    assert busy["foreground"]["command"] == "sleep 30"
    assert busy["foreground"]["pid"] > 0
    assert busy["status"] == "active"

    assert signal(alice, terminal, {"signal": "SIGTERM"}).status_code == 200
    back = wait_prompt(alice, terminal)
    assert back["busy"] is False
    assert back["foreground"]["pid"] == created["pid"]


@pytest.mark.parametrize("name", ENDING)
def test_signal_each_ending_signal_ends_a_sleeping_program(alice, name):
    """Each accepted signal that ends a process by default reaches the program, which reports it as its exit signal."""
    created = sleeper(alice)
    terminal = created["terminalId"]
    response = signal(alice, terminal, {"signal": name})
    assert response.status_code == 200, response.text
    assert response.json()["data"] == {"terminalId": terminal, "signal": name, "processGroup": created["pid"]}
    waited = alice.post(f"/api/terminals/{terminal}/wait", json={"timeoutMs": 5000}).json()["data"]
    assert waited == {"terminalId": terminal, "timedOut": False, "exitCode": None, "signal": name}


def test_signal_sigcont_and_sigtstp_reach_a_foreground_job(alice):
    """SIGCONT reaches a job that traps it (got-cont); SIGTSTP stops the job and gives the shell its prompt back."""
    terminal = alice.create(shell="/bin/bash")["terminalId"]
    alice.run(terminal, "true")
    alice.send(terminal, "bash -c \"trap 'echo got-cont' CONT; echo cont-''ready; while :; do sleep 0.1; done\"")
    alice.wait_output(terminal, lambda out: printed(out, "cont-ready"), what="the CONT trap to be set")
    job = wait_foreground(alice, terminal, "trap")["foreground"]["pid"]

    resumed = signal(alice, terminal, {"signal": "SIGCONT"})
    assert resumed.status_code == 200, resumed.text
    assert resumed.json()["data"] == {"terminalId": terminal, "signal": "SIGCONT", "processGroup": job}
    alice.wait_output(terminal, lambda out: printed(out, "got-cont"), what="got-cont")

    stopped = signal(alice, terminal, {"signal": "SIGTSTP"})
    assert stopped.status_code == 200, stopped.text
    assert stopped.json()["data"]["signal"] == "SIGTSTP"
    wait_for(lambda: process_state(job) == "T", 5, "the job to stop")
    wait_prompt(alice, terminal)
    alice.wait_output(terminal, lambda out: "Stopped" in out, what="the shell's Stopped notice")


@pytest.mark.parametrize("spelling", ["INT", "sigint", "SigInt", "SIGINT"])
def test_signal_name_without_prefix_or_in_any_case_is_accepted(alice, spelling):
    """"INT", "sigint" and "SIGINT" all mean SIGINT, and the answer names it canonically."""
    created = sleeper(alice)
    terminal = created["terminalId"]
    response = signal(alice, terminal, {"signal": spelling})
    assert response.status_code == 200, response.text
    assert response.json()["data"]["signal"] == "SIGINT"
    waited = alice.post(f"/api/terminals/{terminal}/wait", json={"timeoutMs": 5000}).json()["data"]
    assert waited["signal"] == "SIGINT"


@pytest.mark.parametrize("bad", ["SIGFOO", "BOGUS", "", "9", 9, None, ["SIGINT"]])
def test_signal_unknown_is_refused_naming_signal(orm, alice, bad):
    """An unknown signal is 400 INVALID_INPUT naming the signal field, and nothing is sent."""
    created = sleeper(alice)
    terminal = created["terminalId"]
    assert_invalid(signal(alice, terminal, {"signal": bad}), "signal")
    assert process_state(created["pid"]) == "S"
    assert audited(terminal, "signal") == []


def test_signal_usr1_runs_the_programs_trap(alice):
    """SIGUSR1 reaches a program that traps it: the trap prints got-usr1 and the loop keeps running."""
    created = alice.create(
        command="bash", args=["-c", "trap 'echo got-usr1' USR1; echo ready; while :; do sleep 0.1; done"]
    )
    terminal = created["terminalId"]
    alice.wait_output(terminal, lambda out: printed(out, "ready"), what="the trap to be set")
    response = signal(alice, terminal, {"signal": "SIGUSR1"})
    assert response.status_code == 200, response.text
    assert response.json()["data"]["processGroup"] == created["pid"]
    alice.wait_output(terminal, lambda out: printed(out, "got-usr1"), what="got-usr1")
    assert detail(alice, terminal)["status"] == "active"
    assert alice.output(terminal)["isActive"] is True


def test_signal_usr1_typed_trap_loop_in_the_shell_prints_got_usr1(alice):
    """The trap loop typed into an interactive shell prints got-usr1 once SIGUSR1 is sent to the foreground."""
    terminal = alice.create(shell="/bin/bash")["terminalId"]
    alice.run(terminal, "true")
    alice.send(terminal, "bash -c \"trap 'echo got-usr1' USR1; echo usr1-''ready; while :; do sleep 0.1; done\"")
    alice.wait_output(terminal, lambda out: printed(out, "usr1-ready"), what="the USR1 trap to be set")
    wait_foreground(alice, terminal, "trap")
    assert signal(alice, terminal, {"signal": "USR1"}).status_code == 200
    alice.wait_output(terminal, lambda out: printed(out, "got-usr1"), what="got-usr1")
    assert detail(alice, terminal)["busy"] is True
    assert signal(alice, terminal, {"signal": "SIGTERM"}).status_code == 200
    wait_prompt(alice, terminal)


def test_signal_ended_terminal_is_inactive(alice):
    """A signal to a terminal whose program has exited answers 409 TERMINAL_INACTIVE."""
    terminal = alice.create(command="true")["terminalId"]
    alice.wait_status(terminal, "exited")
    response = signal(alice, terminal, {"signal": "SIGINT"})
    assert response.status_code == 409, response.text
    assert response.json()["error"]["code"] == "TERMINAL_INACTIVE"


# Resize


def test_resize_changes_what_stty_reports(orm, alice):
    """POST /resize sets the PTY's size: `stty size` prints "rows cols", and the record and screen follow."""
    terminal = alice.create(shell="/bin/bash", cols=80, rows=24)["terminalId"]
    assert alice.run(terminal, "stty size") == "24 80"
    response = alice.post(f"/api/terminals/{terminal}/resize", json={"cols": 132, "rows": 43})
    assert response.status_code == 200, response.text
    assert response.json()["data"] == {"terminalId": terminal, "cols": 132, "rows": 43}
    assert alice.run(terminal, "stty size") == "43 132"
    record = detail(alice, terminal)
    assert (record["cols"], record["rows"]) == (132, 43)
    screen = alice.get(f"/api/terminals/{terminal}/screen").json()["data"]
    assert (screen["cols"], screen["rows"]) == (132, 43)
    assert len(screen["lines"]) == 43

    events = audited(terminal, "resize")
    assert [event.details for event in events] == [{"cols": 132, "rows": 43}]


@pytest.mark.parametrize(
    "body, field",
    [
        ({"cols": 0, "rows": 24}, "cols"),
        ({"cols": 80, "rows": 0}, "rows"),
        ({"cols": -5, "rows": 24}, "cols"),
        ({"cols": 1001, "rows": 24}, "cols"),
        ({"cols": 80, "rows": 501}, "rows"),
        ({"rows": 24}, "cols"),
        ({"cols": 80}, "rows"),
        ({"cols": "wide", "rows": 24}, "cols"),
    ],
)
def test_resize_out_of_bounds_is_refused(orm, alice, body, field):
    """Sizes below 1, above TERMINALS_MAX_COLS (1000) or TERMINALS_MAX_ROWS (500), or missing, are 400 naming the field."""
    terminal = alice.create(shell="/bin/bash", cols=80, rows=24)["terminalId"]
    assert_invalid(alice.post(f"/api/terminals/{terminal}/resize", json=body), field)
    assert audited(terminal, "resize") == []
    record = detail(alice, terminal)
    assert (record["cols"], record["rows"]) == (80, 24)


def test_resize_to_the_largest_size_is_accepted(alice):
    """The bounds themselves (1000 columns, 500 rows) are accepted."""
    terminal = alice.create(shell="/bin/bash")["terminalId"]
    response = alice.post(f"/api/terminals/{terminal}/resize", json={"cols": 1000, "rows": 500})
    assert response.status_code == 200, response.text
    assert alice.run(terminal, "stty size") == "500 1000"


# Ending: delete


def test_delete_force_kills_at_once(orm, alice):
    """DELETE with force:true sends SIGKILL at once: a shell that ignores TERM and HUP ends without the grace."""
    terminal = alice.create(shell="/bin/bash")["terminalId"]
    alice.run(terminal, "trap '' TERM HUP")
    alice.send(terminal, "sleep 300")
    sleep_pid = wait_foreground(alice, terminal, "sleep")["foreground"]["pid"]
    started = time.monotonic()
    response = alice.delete(f"/api/terminals/{terminal}", json={"force": True})
    took = time.monotonic() - started
    assert response.status_code == 200, response.text
    data = response.json()["data"]
    assert data["status"] == "killed"
    assert data["signal"] == "SIGKILL"
    assert data["exitCode"] is None
    assert took < 2.5  # the default grace is 3 s
    wait_gone(sleep_pid)

    events = audited(terminal, "delete")
    assert len(events) == 1
    assert events[0].details["signal"] == "SIGKILL"
    assert events[0].details["endSignal"] == "SIGKILL"


def test_delete_graceful_timeout_kills_a_term_trapping_program_after_the_grace(orm, alice):
    """`trap '' TERM HUP; sleep 300` typed into bash survives the TERM (and the hang-up) of a DELETE and is killed
    with SIGKILL once gracefulTimeoutMs has passed, not before."""
    grace_ms = 1500
    terminal = alice.create(shell="/bin/bash")["terminalId"]
    alice.run(terminal, "true")
    alice.send(terminal, "trap '' TERM HUP; sleep 300")
    busy = wait_foreground(alice, terminal, "sleep 300")
    sleep_pid = busy["foreground"]["pid"]
    started = time.monotonic()
    response = alice.delete(f"/api/terminals/{terminal}", json={"gracefulTimeoutMs": grace_ms})
    took = time.monotonic() - started
    assert response.status_code == 200, response.text
    data = response.json()["data"]
    assert data["status"] == "killed"
    assert data["signal"] == "SIGKILL"
    assert grace_ms / 1000 <= took < grace_ms / 1000 + 5
    wait_gone(sleep_pid)
    event = audited(terminal, "delete")[-1]
    assert event.details["signal"] == "SIGTERM"
    assert event.details["endSignal"] == "SIGKILL"


def test_delete_hangs_up_a_shell_whose_job_only_ignores_term(alice):
    """`trap '' TERM; sleep 300`: the shell ignores TERM, so it is hung up as closing a window does, and the hang-up
    ends its job too, well before gracefulTimeoutMs (the README's documented fallback)."""
    grace_ms = 4000
    terminal = alice.create(shell="/bin/bash")["terminalId"]
    alice.run(terminal, "true")
    alice.send(terminal, "trap '' TERM; sleep 300")
    sleep_pid = wait_foreground(alice, terminal, "sleep 300")["foreground"]["pid"]
    started = time.monotonic()
    response = alice.delete(f"/api/terminals/{terminal}", json={"gracefulTimeoutMs": grace_ms})
    took = time.monotonic() - started
    assert response.status_code == 200, response.text
    data = response.json()["data"]
    assert data["status"] == "killed"
    assert data["signal"] == "SIGHUP"
    assert took < grace_ms / 1000
    wait_gone(sleep_pid)


def test_delete_ends_background_children_that_left_the_session(orm, alice):
    """nohup, setsid and double-forked daemons started from the shell are ended by DELETE too."""
    patterns = "^sleep 30[123]$"
    terminal = alice.create(shell="/bin/bash")["terminalId"]
    alice.run(terminal, "true")
    alice.send(terminal, "nohup sleep 301 >/dev/null 2>&1 &")
    alice.send(terminal, "setsid sleep 302 &")
    alice.send(terminal, "(setsid sh -c 'sleep 303 &' &)")
    found = wait_for(
        lambda: (lambda pids: pids if len(pids) == 3 else None)(started_by(terminal, patterns)), 10, "three sleeps"
    )
    # Two of them really left the terminal's session.
    sessions = {int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[3]) for pid in found}
    assert len(sessions) == 3

    response = alice.delete(f"/api/terminals/{terminal}")
    assert response.status_code == 200, response.text
    assert response.json()["data"]["status"] == "killed"
    for pid in found:
        wait_gone(pid)
    assert [pid for pid in pgrep(patterns) if pid in found] == []


def test_delete_releases_and_later_reads_are_inactive(orm, alice):
    """After DELETE the record is killed and released; output, screen, stats and input answer 409 TERMINAL_INACTIVE."""
    terminal = alice.create(shell="/bin/bash")["terminalId"]
    alice.run(terminal, "echo before-delete")
    response = alice.delete(f"/api/terminals/{terminal}")
    assert response.status_code == 200, response.text
    assert response.json()["message"] == "Terminal terminated successfully"
    data = response.json()["data"]
    assert data["released"] is not None
    assert data["ended"] is not None
    for method, path, body in [
        ("GET", "output", None), ("GET", "stats", None), ("GET", "screen", None),
        ("POST", "input", {"input": "echo hi"}), ("POST", "signal", {}), ("POST", "resize", {"cols": 90, "rows": 30}),
        ("POST", "kill", {}),
    ]:
        refused = alice.request(method, f"/api/terminals/{terminal}/{path}", json=body)
        assert refused.status_code == 409, (path, refused.text)
        assert refused.json()["error"]["code"] == "TERMINAL_INACTIVE", path
    again = alice.delete(f"/api/terminals/{terminal}")
    assert again.status_code == 409, again.text
    assert len(audited(terminal, "delete")) == 1


# Ending: kill


def test_kill_keeps_output_readable_until_delete(orm, alice):
    """POST /kill ends the processes but keeps the output: reads answer 200 with exitStatus until DELETE releases it."""
    created = alice.create(shell="/bin/bash")
    terminal = created["terminalId"]
    alice.run(terminal, "echo kept-''line")
    alice.send(terminal, "sleep 30")
    busy = wait_foreground(alice, terminal, "sleep")

    response = alice.post(f"/api/terminals/{terminal}/kill")
    assert response.status_code == 200, response.text
    killed = response.json()["data"]
    assert killed["status"] == "killed"
    assert killed["signal"] == "SIGKILL"
    assert killed["exitCode"] is None
    assert killed["released"] is None
    wait_gone(busy["foreground"]["pid"])
    wait_gone(created["pid"])

    output = alice.output(terminal)
    assert printed(output["output"], "kept-line")
    assert output["isActive"] is False
    assert output["exitStatus"] == {"exitCode": None, "signal": "SIGKILL"}
    assert alice.get(f"/api/terminals/{terminal}/stats").status_code == 200
    bytes_read = alice.output(terminal, fromByte=0)
    assert bytes_read["eof"] is True
    assert bytes_read["exitStatus"] == {"exitCode": None, "signal": "SIGKILL"}
    waited = alice.post(f"/api/terminals/{terminal}/wait", json={"timeoutMs": 1000}).json()["data"]
    assert waited == {"terminalId": terminal, "timedOut": False, "exitCode": None, "signal": "SIGKILL"}
    record = detail(alice, terminal)
    assert record["status"] == "killed"
    assert record["released"] is None
    refused = alice.post(f"/api/terminals/{terminal}/input", json={"input": "echo no"})
    assert refused.status_code == 409, refused.text
    assert refused.json()["error"]["code"] == "TERMINAL_INACTIVE"

    deleted = alice.delete(f"/api/terminals/{terminal}")
    assert deleted.status_code == 200, deleted.text
    assert deleted.json()["data"]["status"] == "killed"
    assert deleted.json()["data"]["released"] is not None
    after = alice.get(f"/api/terminals/{terminal}/output")
    assert after.status_code == 409, after.text
    assert after.json()["error"]["code"] == "TERMINAL_INACTIVE"

    kills = audited(terminal, "kill")
    assert len(kills) == 1
    assert kills[0].details["signal"] == "SIGKILL"
    assert kills[0].details["endSignal"] == "SIGKILL"
    assert len(audited(terminal, "delete")) == 1


def test_kill_of_a_command_terminal_reports_its_signal(orm, alice):
    """POST /kill with a signal in the body ends a command terminal with that signal; its record is killed."""
    created = sleeper(alice)
    terminal = created["terminalId"]
    response = alice.post(f"/api/terminals/{terminal}/kill", json={"signal": "TERM"})
    assert response.status_code == 200, response.text
    data = response.json()["data"]
    assert data["status"] == "killed"
    assert data["signal"] == "SIGTERM"
    output = alice.output(terminal)
    assert output["exitStatus"] == {"exitCode": None, "signal": "SIGTERM"}
    assert audited(terminal, "kill")[0].details["signal"] == "SIGTERM"


def test_kill_unknown_signal_is_refused(alice):
    """POST /kill with an unknown signal is 400 naming the signal; the program keeps running."""
    created = sleeper(alice)
    assert_invalid(alice.post(f"/api/terminals/{created['terminalId']}/kill", json={"signal": "SIGNOPE"}), "signal")
    assert process_state(created["pid"]) == "S"
