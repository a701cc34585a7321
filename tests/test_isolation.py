"""Terminals kept away from the control plane and from each other: limits, control groups, other Unix accounts.

These run on the machine as it is: the service runs as root (as in CI), cgroup
controllers are writable, and the tests make throwaway Unix accounts with useradd.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest
from django.conf import settings as django_settings

from terminals.models import Recording
from terminals.runtime.accounts import unix_name
from terminals.runtime.shell import COPY_PREFIX, _owner_tag
from tests.client import Api
from tests.conftest import make_key
from tests.helpers import marked
from tests.servers import start_embedded, wait_for

CGROUP_ROOT = Path("/sys/fs/cgroup")


def _health(api: Api) -> dict:
    response = api.get("/api/health")
    assert response.status_code == 200, response.text
    return response.json()["data"]


def _terminal_groups(terminal_id: str) -> list[Path]:
    return [path for path in CGROUP_ROOT.glob(f"*/terminals-worker-*/{terminal_id}")] + list(
        CGROUP_ROOT.glob(f"terminals-worker-*/{terminal_id}")
    )




# Limits every terminal gets


def test_health_reports_how_terminals_are_confined(alice):
    isolation = _health(alice)["worker"]["isolation"]
    # This machine (like the CI machine) lets the service write cgroup controllers; when a
    # machine does not, health says so and the limits fall back to rlimits (SECURITY.md).
    assert "pids" in isolation["cgroups"]["controllers"], isolation
    assert isolation["limits"]["processesEnforcedBy"] == "cgroup"
    assert isolation["limits"]["processes"] == django_settings.TERMINALS["LIMIT_PROCESSES"]
    assert isolation["limits"]["coreDumps"] is False
    # The test settings run terminals as the service's own account (tests/settings.py); test_separation.py runs
    # the default.
    assert isolation["runAs"] == "service" and isolation["workerUid"] == os.geteuid()


def test_a_terminal_runs_in_its_own_control_group_with_its_limits(alice):
    terminal = alice.create(cwd="/tmp")["terminalId"]
    result = alice.command(terminal, "ulimit -c; ulimit -n; cat /proc/self/cgroup", timeoutMs=10_000)
    assert result["exitCode"] == 0, result
    lines = result["output"].split()
    assert lines[0] == "0"  # no core dumps
    assert lines[1] == str(django_settings.TERMINALS["LIMIT_OPEN_FILES"])
    assert re.search(rf"pids:/terminals-worker-[0-9a-f]{{12}}-\d+/{terminal}\b", result["output"]), result["output"]
    (group,) = [path for path in _terminal_groups(terminal) if path.parent.parent.name == "pids"]
    assert (group / "pids.max").read_text().strip() == str(django_settings.TERMINALS["LIMIT_PROCESSES"])
    assert alice.delete(f"/api/terminals/{terminal}").status_code == 200
    wait_for(lambda: not _terminal_groups(terminal), 10, "the terminal's control groups removed")


def _zombie_children(pid: int) -> list[int]:
    zombies = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as stat:
                    fields = stat.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] == "Z" and int(fields[1]) == pid:
                zombies.append(int(name))
    return zombies


def test_ending_a_terminal_ends_what_escaped_its_session(alice, server):
    terminal = alice.create(cwd="/tmp")["terminalId"]
    alice.send(terminal, "setsid sleep 1001 & nohup sleep 1002 >/dev/null 2>&1 & (sleep 1003 &) ; echo started")
    alice.wait_output(terminal, lambda text: "\nstarted\n" in text)
    wait_for(lambda: len(marked(terminal)) >= 4, 10, "the shell and its three sleeps")
    assert alice.delete(f"/api/terminals/{terminal}").status_code == 200
    wait_for(lambda: not marked(terminal), 10, "every process of the terminal gone")
    wait_for(lambda: not _terminal_groups(terminal), 10, "its control groups removed")
    owners = [process.pid for process in server.processes]  # the embedded server, or the split workers and webs
    wait_for(lambda: not any(_zombie_children(pid) for pid in owners), 10, "no zombie left to the service")


@pytest.fixture(scope="module")
def tight_server(django_db_setup):
    """A server whose terminals may have 60 processes each: a fork bomb hits the wall quickly."""
    server = start_embedded(TERMINALS_LIMIT_PROCESSES="60", TERMINALS_LIMIT_MEMORY_MB="512")
    yield server
    server.stop()


def test_a_fork_bomb_is_contained_and_other_terminals_keep_answering(tight_server, keys):
    api = Api(tight_server.url, keys["alice"])
    bystander = api.create(cwd="/tmp")["terminalId"]
    bomb = api.create(cwd="/tmp")["terminalId"]
    (pids_group,) = [path for path in _terminal_groups(bomb) if path.parent.parent.name == "pids"]
    api.send(bomb, ":(){ :|:& };:")
    wait_for(lambda: int((pids_group / "pids.events").read_text().split()[-1]) > 0, 20,
             "the bomb reaching the process limit")
    assert int((pids_group / "pids.current").read_text()) <= 60
    # While the bomb keeps pushing against the limit, the bystander and new terminals answer.
    for number in range(5):
        result = api.command(bystander, f"echo alive-{number}", timeoutMs=10_000)
        assert result["exitCode"] == 0 and result["output"].strip() == f"alive-{number}", result
    newcomer = api.create(cwd="/tmp")["terminalId"]
    assert api.command(newcomer, "echo new", timeoutMs=10_000)["output"].strip() == "new"
    # Ending the bomb's terminal ends all of it.
    response = api.delete(f"/api/terminals/{bomb}", json={"signal": "SIGKILL"})
    assert response.status_code == 200, response.text
    wait_for(lambda: not marked(bomb), 20, "every process of the bomb gone")
    wait_for(lambda: not _terminal_groups(bomb), 20, "the bomb's control groups removed")
    assert api.command(bystander, "echo still", timeoutMs=10_000)["output"].strip() == "still"


def test_memory_limit_stops_a_hog_without_touching_the_worker(tight_server, keys):
    api = Api(tight_server.url, keys["alice"])
    terminal = api.create(cwd="/tmp")["terminalId"]
    # 1 GiB in one process against a 512 MiB limit: the kernel kills the hog (perl is in every
    # Debian), not the service.
    result = api.command(terminal, "perl -e '$x = \"a\" x (1 << 30); print length $x'; echo status=$?",
                         timeoutMs=60_000)
    assert "status=137" in result["output"], result  # SIGKILL from the OOM killer
    assert _health(api)["status"] == "healthy"
    assert api.command(terminal, "echo after", timeoutMs=10_000)["output"].strip() == "after"


# Another Unix account


@pytest.fixture(scope="module")
def nobody_server(django_db_setup):
    server = start_embedded(TERMINALS_RUN_AS="nobody")
    yield server
    server.stop()


def test_cwd_the_account_cannot_enter_says_why_and_the_ways_out(nobody_server, keys, tmp_path):
    """A cwd the terminals' account cannot enter (a project under /root, a mktemp -d folder) is 400 naming the
    account, the directory that stops it, and the ways out: make it traversable, the account's home, or
    TERMINALS_RUN_AS; nothing starts."""
    api = Api(nobody_server.url, keys["alice"])
    private = tmp_path / "project"  # pytest's tmp_path is made 0700, as mktemp -d makes its folders
    private.mkdir()
    blocked = next(str(path) for path in [*reversed(private.parents), private] if not os.stat(path).st_mode & 0o001)
    response = api.post("/api/terminals", json={"cwd": str(private)})
    assert response.status_code == 400, response.text
    message = response.json()["error"]["message"]
    for needed in ("'nobody'", repr(blocked), "chmod o+x", "home", "TERMINALS_RUN_AS"):
        assert needed in message, (needed, message)
    assert all(item["cwd"] != str(private) for item in api.get("/api/terminals").json()["data"]["terminals"])


def test_terminals_run_as_the_configured_account_away_from_the_service(nobody_server, keys):
    api = Api(nobody_server.url, keys["alice"])
    service_pid = nobody_server.processes[0].pid
    database = django_settings.DATABASES["default"]["NAME"]
    terminal = api.create(cwd="/tmp")["terminalId"]
    assert api.command(terminal, "id -un; echo $HOME $USER", timeoutMs=10_000)["output"].split() == ["nobody", "/nonexistent", "nobody"]
    probes = {
        f"cat /proc/{service_pid}/environ": "Permission denied",
        f"kill -0 {service_pid}": "not permitted",
        f"cat {database}": "Permission denied",
        f"ls {Path(database).parent}": "Permission denied",
    }
    if not str(database).startswith("/"):  # PostgreSQL: the database is a server; the data dir is still private
        probes.pop(f"cat {database}")
        probes.pop(f"ls {Path(database).parent}")
    for probe, refusal in probes.items():
        result = api.command(terminal, f"{probe} 2>&1", timeoutMs=10_000)
        assert result["exitCode"] != 0 and refusal in result["output"], (probe, result)
    assert _health(api)["worker"]["isolation"]["runAs"] == "nobody"


def test_a_directory_the_account_cannot_enter_is_refused(nobody_server, keys, tmp_path):
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    api = Api(nobody_server.url, keys["alice"])
    response = api.post("/api/terminals", json={"cwd": str(private)})
    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] == "INVALID_INPUT"
    assert "nobody" in response.json()["error"]["message"]


COPY_OF_THE_HOOKS = """
import os, sys
from terminals.runtime import shell
shell._world_readable = lambda directory: False  # as from a checkout other accounts cannot read
copy = shell.integration_dir()
print(copy, sorted(os.listdir(copy)), flush=True)
if os.fork() == 0:
    sys.exit(0)  # a forked child that leaves through Python
os.wait()
print(os.path.isdir(copy), flush=True)
"""


def test_a_copy_of_the_shell_hooks_goes_when_the_process_that_made_it_exits():
    """A checkout other accounts cannot read has its hooks copied to /tmp for the terminals' accounts; every
    process that hosts terminals makes one, so the copy must go with its process, but not with a forked child."""
    result = subprocess.run([sys.executable, "-c", COPY_OF_THE_HOOKS], capture_output=True, text=True, timeout=60,
                            cwd=django_settings.BASE_DIR)
    assert result.returncode == 0, result.stderr
    made, survived_the_child = result.stdout.splitlines()
    copy = made.split(" ", 1)[0]
    assert copy.startswith(tempfile.gettempdir()) and "bashrc" in made, made
    assert survived_the_child == "True"
    assert not os.path.exists(copy)


KILLED_WITH_ITS_COPY = """
import os, signal
from terminals.runtime import shell
shell._world_readable = lambda directory: False
print(shell.integration_dir(), flush=True)
os.kill(os.getpid(), signal.SIGKILL)  # no atexit: the copy stays behind
"""


def test_a_copy_left_by_a_killed_process_goes_when_the_next_process_makes_its_own():
    """SIGKILL leaves a process no time to remove its copy of the hooks. The next process that makes a copy
    removes it, and leaves alone the copies of processes still running and directories it does not own."""
    killed = subprocess.run([sys.executable, "-c", KILLED_WITH_ITS_COPY], capture_output=True, text=True, timeout=60,
                            cwd=django_settings.BASE_DIR)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    left = killed.stdout.strip()
    assert os.path.isdir(left), left
    # A copy of this very process (alive), named the way copies are, and one that is another account's.
    alive = tempfile.mkdtemp(prefix=f"{COPY_PREFIX}{_owner_tag(os.getpid())}-")
    foreign = tempfile.mkdtemp(prefix=f"{COPY_PREFIX}{_owner_tag(os.getpid()).rsplit('.', 1)[0]}.1-")
    os.chown(foreign, 65534, 65534)
    try:
        result = subprocess.run([sys.executable, "-c", COPY_OF_THE_HOOKS], capture_output=True, text=True,
                                timeout=60, cwd=django_settings.BASE_DIR)
        assert result.returncode == 0, result.stderr
        assert not os.path.exists(left)
        assert os.path.isdir(alive) and os.path.isdir(foreign)
    finally:
        shutil.rmtree(alive, ignore_errors=True)
        shutil.rmtree(foreign, ignore_errors=True)


@pytest.fixture(scope="module")
def per_user(django_db_setup, django_db_blocker):
    """The default as root: two users, each given an account of their own (tt<id>-...) on their first terminal."""
    prefix = f"tt{uuid.uuid4().hex[:4]}-"
    homes = Path(tempfile.mkdtemp(prefix="terminals-test-homes-"))  # its parents must be searchable by the accounts
    homes.chmod(0o755)
    with django_db_blocker.unblock():
        users = {name: make_key(name=name) for name in ("ann", "ben")}
    # Recordings in a world-readable place of their own, so their own modes are what keeps them private.
    recordings = Path(tempfile.mkdtemp(prefix="terminals-test-recordings-"))
    recordings.chmod(0o755)
    server = start_embedded(TERMINALS_RUN_AS=None, TERMINALS_RUN_AS_PREFIX=prefix, TERMINALS_HOMES=str(homes),
                            TERMINALS_RECORDINGS_DIR=str(recordings))
    accounts = {name: unix_name(user.username, prefix) for name, (user, _) in users.items()}
    yield server, {name: key for name, (_, key) in users.items()}, accounts, homes
    server.stop()
    for account in accounts.values():
        subprocess.run(["userdel", account], check=False, capture_output=True)
    shutil.rmtree(homes, ignore_errors=True)
    # The recordings stay: they are sealed in the test database's audit trail, which verify_audit checks later in
    # the run, and a sealed recording gone without an audited deletion is exactly what it reports.


def test_each_user_gets_an_account_and_cannot_reach_the_others(per_user):
    server, user_keys, accounts, homes = per_user
    ann, ben = Api(server.url, user_keys["ann"]), Api(server.url, user_keys["ben"])
    ann_terminal = ann.create()["terminalId"]  # the account's home is the default directory
    ben_terminal = ben.create()["terminalId"]
    expected = [accounts["ann"], str(homes / accounts["ann"])]
    assert ann.command(ann_terminal, "id -un; pwd", timeoutMs=10_000)["output"].split() == expected
    ben_pid = ben.get(f"/api/terminals/{ben_terminal}").json()["data"]["pid"]
    for probe, refusal in {f"cat /proc/{ben_pid}/environ": "Permission denied",
                           f"ls /proc/{ben_pid}/fd": "Permission denied",
                           f"kill -9 {ben_pid}": "not permitted"}.items():
        result = ann.command(ann_terminal, f"{probe} 2>&1", timeoutMs=10_000)
        assert result["exitCode"] != 0 and refusal in result["output"], (probe, result)
    assert ben.command(ben_terminal, "echo unharmed", timeoutMs=10_000)["output"].strip() == "unharmed"


def test_recordings_are_out_of_every_terminals_reach(per_user, orm):
    """A recording is the service's file: neither another user's terminal nor the recorded user's own can read it."""
    server, user_keys, accounts, homes = per_user
    ann, ben = Api(server.url, user_keys["ann"]), Api(server.url, user_keys["ben"])
    recorded = ann.create(record=True)["terminalId"]
    ann.command(recorded, "echo ann-''private", timeoutMs=10_000)
    path = Path(Recording.objects.get(pk=recorded).path)
    wait_for(lambda: path.exists() and b"ann-private" in path.read_bytes(), 15, "the recording on disk")
    for api in (ann, ben):
        terminal = api.create()["terminalId"]
        for probe in (f"cat {path}", f"ls {path.parent}", f"ls {path.parent.parent}"):
            result = api.command(terminal, f"{probe} 2>&1", timeoutMs=10_000)
            assert result["exitCode"] != 0 and "Permission denied" in result["output"], (probe, result)


# The service's secrets


def test_a_terminal_sees_none_of_the_services_settings_or_secrets(server, keys):
    api = Api(server.url, keys["alice"])
    secret_key = (Path(django_settings.DATA_DIR) / "secret_key").read_text().strip()
    terminal = api.create(cwd="/tmp")["terminalId"]
    result = api.command(terminal, "env", timeoutMs=10_000)
    names = {line.split("=", 1)[0] for line in result["output"].splitlines() if "=" in line}
    for setting in ("SECRET_KEY", "DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE", "TERMINALS_DATA_DIR"):
        assert setting not in names, result["output"]
    assert secret_key not in result["output"]
    if server.redis_url:
        assert server.redis_url not in result["output"]
    assert names <= {"PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR", "TERM", "PAGER",
                     "GIT_PAGER", "SHELL", "TERMINALS_TERMINAL_ID", "PWD", "OLDPWD", "SHLVL", "_", "LINES", "COLUMNS",
                     "PS1", "PS2", "PROMPT_COMMAND", "HISTCONTROL"}, names


# Without writable cgroups (TERMINALS_CGROUPS=false makes the worker see none, as a machine without them would)

FALLBACK_PROCESSES = 77
FALLBACK_MEMORY_MB = 900


def test_without_cgroups_processes_and_memory_fall_back_to_rlimits_and_health_says_so(keys):
    """With no cgroup controller, a terminal of an unprivileged account gets RLIMIT_NPROC for its processes and
    RLIMIT_AS for its memory, joins no control group, and /api/health names the fallback and why."""
    server = start_embedded(TERMINALS_CGROUPS="false", TERMINALS_RUN_AS="nobody",
                            TERMINALS_LIMIT_PROCESSES=str(FALLBACK_PROCESSES),
                            TERMINALS_LIMIT_MEMORY_MB=str(FALLBACK_MEMORY_MB))
    api = Api(server.url, keys["alice"])
    try:
        isolation = _health(api)["worker"]["isolation"]
        assert isolation["cgroups"]["controllers"] == [], isolation
        assert isolation["cgroups"]["problem"], isolation
        assert isolation["limits"]["processesEnforcedBy"].startswith("rlimit"), isolation
        assert isolation["limits"]["memoryEnforcedBy"].startswith("rlimit"), isolation

        terminal = api.create(cwd="/tmp")["terminalId"]
        result = api.command(terminal, "ulimit -u; ulimit -v", timeoutMs=10_000)
        assert result["exitCode"] == 0, result
        assert result["output"].split() == [str(FALLBACK_PROCESSES), str(FALLBACK_MEMORY_MB * 1024)]
        assert _terminal_groups(terminal) == []
    finally:
        api.cleanup()
        server.stop()


CPU_CORES = 0.2
CPU_PERIOD_US = 100_000


def _cpu_stat(group: Path) -> dict[str, int]:
    return {name: int(value) for name, value in (line.split() for line in (group / "cpu.stat").read_text().splitlines())}


def _group_cpu_us(group: Path) -> float:
    """CPU time used so far by the processes in the group (user and system), in microseconds."""
    ticks = 0
    for pid in (group / "cgroup.procs").read_text().split():
        try:
            with open(f"/proc/{pid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        ticks += int(fields[11]) + int(fields[12])
    return ticks * 1_000_000 / os.sysconf("SC_CLK_TCK")


def test_the_cpu_limit_holds_a_busy_loop_to_its_quota(django_db_setup, keys):
    """TERMINALS_LIMIT_CPU_CORES: the terminal's cpu group gets the quota, and a busy loop is throttled to it:
    over the periods the group counts, it uses no more CPU than the quota allows."""
    server = start_embedded(TERMINALS_LIMIT_CPU_CORES=str(CPU_CORES))
    api = Api(server.url, keys["alice"])
    try:
        terminal = api.create(cwd="/tmp")["terminalId"]
        (group,) = [path for path in _terminal_groups(terminal) if path.parent.parent.name == "cpu"]
        quota = int(CPU_CORES * CPU_PERIOD_US)
        assert (group / "cpu.cfs_period_us").read_text().strip() == str(CPU_PERIOD_US)
        assert (group / "cpu.cfs_quota_us").read_text().strip() == str(quota)

        api.send(terminal, "while :; do :; done")
        wait_for(lambda: _cpu_stat(group)["nr_throttled"] > 0, 20, "the busy loop to be throttled")
        before, used_before = _cpu_stat(group), _group_cpu_us(group)
        wait_for(lambda: _cpu_stat(group)["nr_periods"] >= before["nr_periods"] + 30, 30, "30 more periods")
        after, used_after = _cpu_stat(group), _group_cpu_us(group)
        periods = after["nr_periods"] - before["nr_periods"]
        used = used_after - used_before
        assert after["nr_throttled"] > before["nr_throttled"]
        # A clock tick of slack on each side of the reading (10 ms each), and one period's worth.
        slack = 2 * 1_000_000 / os.sysconf("SC_CLK_TCK") + quota
        assert 0 < used <= periods * quota + slack, (used, periods)
    finally:
        api.cleanup()
        server.stop()


def test_a_worker_makes_its_control_group_again_when_it_was_removed(django_db_setup, keys):
    """Something outside the service (a cleanup script) removes the worker's own control groups while it has no
    terminal: the next terminal still gets created, in a group of its own with its limits."""
    server = start_embedded()
    api = Api(server.url, keys["alice"])
    try:
        first = api.create(cwd="/tmp")["terminalId"]
        parents = {path.parent for path in _terminal_groups(first)}
        assert parents, "the terminal has no control group"
        assert api.delete(f"/api/terminals/{first}").status_code == 200
        api.created.remove(first)
        wait_for(lambda: not _terminal_groups(first), 10, "the first terminal's control groups removed")
        for parent in parents:
            parent.rmdir()
        second = api.create(cwd="/tmp")["terminalId"]
        result = api.command(second, "cat /proc/self/cgroup", timeoutMs=10_000)
        assert result["exitCode"] == 0 and f"/{second}" in result["output"], result
        (group,) = [path for path in _terminal_groups(second) if path.parent.parent.name == "pids"]
        assert (group / "pids.max").read_text().strip() == str(django_settings.TERMINALS["LIMIT_PROCESSES"])
    finally:
        api.cleanup()
        server.stop()
