"""The systemd units in scripts/systemd/ (docs/deployment.md): systemd itself accepts them, and they run the
commands the split-deployment tests run, so what the tests prove is what the units start."""

from __future__ import annotations

import shlex
import shutil
import subprocess
from pathlib import Path


from .servers import ROOT

UNITS = ROOT / "scripts" / "systemd"
INSTALLED = "/opt/terminals"


def render(target: Path) -> Path:
    """The units as an operator installs them, with the checkout standing in for /opt/terminals."""
    for unit in UNITS.iterdir():
        if unit.suffix in (".service", ".target"):
            text = unit.read_text().replace(INSTALLED, str(ROOT)).replace("/etc/terminals/env", str(UNITS / "env.example"))
            (target / unit.name).write_text(text)
    for template, instance in (("terminals-web@.service", "terminals-web@8001.service"),
                               ("terminals-worker@.service", "terminals-worker@1.service")):
        shutil.copy(target / template, target / instance)
    return target


def directives(unit: str) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for line in (UNITS / unit).read_text().splitlines():
        if "=" in line and not line.startswith(("#", "[")):
            name, value = line.split("=", 1)
            found.setdefault(name, []).append(value)
    return found



def test_systemd_accepts_every_unit(tmp_path):
    render(tmp_path)
    checked = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", "terminals-migrate.service", "terminals-web@8001.service",
         "terminals-worker@1.service", "terminals.target"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60)
    # systemd ignores an option it cannot parse with only a warning: any output is a defect too.
    assert (checked.returncode, checked.stdout + checked.stderr) == (0, "")


def test_the_units_start_what_the_split_tests_run():
    web = shlex.split(directives("terminals-web@.service")["ExecStart"][0])
    worker = shlex.split(directives("terminals-worker@.service")["ExecStart"][0])
    migrate = shlex.split(directives("terminals-migrate.service")["ExecStart"][0])
    assert web == [f"{INSTALLED}/.venv/bin/daphne", "-b", "0.0.0.0", "-p", "%i", "config.asgi:application"]
    assert worker == [f"{INSTALLED}/.venv/bin/python", "manage.py", "terminal_worker"]
    assert migrate == [f"{INSTALLED}/.venv/bin/python", "manage.py", "migrate", "--noinput"]
    servers = (ROOT / "tests" / "servers.py").read_text()
    assert '"-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "config.asgi:application"' in servers
    assert '"manage.py", "terminal_worker"' in servers


def test_web_processes_run_unprivileged_and_stop_gently():
    web = directives("terminals-web@.service")
    worker = directives("terminals-worker@.service")
    assert web["User"] == ["terminals"] and "User" not in worker  # the worker needs root to run users' accounts
    for unit in (web, worker):
        # SIGTERM to the main process only: the web process closes its clients with 4012, the worker ends its
        # terminals itself; systemd's own SIGTERM to every process of the group would cut both short.
        assert unit["KillMode"] == ["mixed"]
        assert unit["Restart"] == ["on-failure"]
        assert "terminals-migrate.service" in unit["Requires"][0]
        assert "terminals-migrate.service" in unit["After"][0]


def test_reload_restarts_the_worker_in_place_and_stop_ends_its_terminals():
    """`systemctl reload` sends SIGHUP to the main process, the keeper (TERMINALS_KEEPER=true), which restarts the
    worker in place with every terminal kept (tests/test_worker_restart.py runs the same command with the same
    setting and signal); stop and restart send SIGTERM to it alone (KillMode=mixed), which ends the terminals."""
    worker = directives("terminals-worker@.service")
    assert worker["Environment"] == ["TERMINALS_KEEPER=true"]
    assert worker["ExecReload"] == ["/bin/kill -HUP $MAINPID"]
    assert worker["KillMode"] == ["mixed"]
    restart_test = (ROOT / "tests" / "test_worker_restart.py").read_text()
    assert 'TERMINALS_KEEPER="true"' in restart_test and "signal.SIGHUP" in restart_test
