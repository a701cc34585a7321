"""The default setup separates users from the service and from each other, and says so plainly when it does not.

The service runs as root here (as in most containers and in CI): with TERMINALS_RUN_AS unset, each user's
terminals run as an account of their own, made on first use. The accounts these tests make share a prefix of
their own and are removed at the end.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import uuid
from pathlib import Path

import pytest
from django.conf import settings as django_settings

from tests.client import Api
from tests.conftest import make_key
from tests.servers import ROOT, service_env, start_embedded, start_split


def _command(api: Api, terminal_id: str, command: str) -> dict:
    response = api.post(f"/api/terminals/{terminal_id}/commands", json={"command": command, "timeoutMs": 10_000})
    assert response.status_code == 200, response.text
    return response.json()["data"]


def _health(api: Api) -> dict:
    response = api.get("/api/health")
    assert response.status_code == 200, response.text
    return response.json()["data"]


def _accounts_with(prefix: str) -> list[str]:
    with open("/etc/passwd") as passwd:
        return [line.split(":", 1)[0] for line in passwd if line.startswith(prefix)]


def _remove_accounts(prefix: str) -> None:
    for name in _accounts_with(prefix):
        subprocess.run(["userdel", name], check=False, capture_output=True)


@pytest.fixture(scope="module")
def homes():
    """Where the tests' accounts get their homes: root's, searchable by all, like /home."""
    base = Path(tempfile.mkdtemp(prefix="terminals-test-homes-"))
    base.chmod(0o755)
    yield base
    subprocess.run(["rm", "-rf", str(base)], check=False)


@pytest.fixture(scope="module")
def prefix():
    name = f"ts{uuid.uuid4().hex[:4]}-"
    yield name
    _remove_accounts(name)


@pytest.fixture(scope="module")
def default_server(django_db_setup, homes, prefix):
    """`manage.py serve` as the quick start runs it: nothing about accounts configured."""
    server = start_embedded(TERMINALS_RUN_AS=None, TERMINALS_RUN_AS_PREFIX=prefix, TERMINALS_HOMES=str(homes))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def two_users(django_db_setup, django_db_blocker):
    """Two ordinary (non-staff) users, as `create_api_key` makes them."""
    with django_db_blocker.unblock():
        return {name: make_key(name=name) for name in ("ann", "ben")}


def test_by_default_a_users_terminal_cannot_reach_the_service_or_another_user(default_server, two_users, homes):
    ann, ben = (Api(default_server.url, two_users[name][1]) for name in ("ann", "ben"))
    ann_created, ben_created = ann.create(), ben.create()
    ann_terminal, ben_terminal = ann_created["terminalId"], ben_created["terminalId"]
    uid, home, cwd = _command(ann, ann_terminal, "id -u; echo $HOME; pwd")["output"].split()
    assert uid != "0" and int(uid) != os.geteuid(), uid
    assert Path(home).parent == homes and cwd == home == ann_created["cwd"], (home, cwd, ann_created)
    assert not cwd.startswith(str(ROOT)), cwd  # never the service's checkout
    ben_home = _command(ben, ben_terminal, "echo private > ~/notes; echo $HOME")["output"].strip()
    assert ben_home != home and Path(ben_home).parent == homes, ben_home
    database = Path(django_settings.DATABASES["default"]["NAME"])
    data_dir = Path(django_settings.DATA_DIR)
    probes = [
        f"cat {database}", f"echo x >> {database}", f"cat {data_dir / 'secret_key'}", f"ls {data_dir}",
        f"touch {data_dir / 'planted'}", f"ls {ben_home}", f"cat {ben_home}/notes", f"touch {ben_home}/planted",
    ]
    for probe in probes:
        result = _command(ann, ann_terminal, f"{probe} 2>&1")
        if result["exitCode"] == 0 or "Permission denied" not in result["output"]:
            who = _command(ann, ann_terminal, f"id; stat -c '%u:%g %a %n' {ben_home} {data_dir}")["output"]
            raise AssertionError(f"{probe!r} was let through: {result}; {who}")
    assert not (data_dir / "planted").exists() and not Path(ben_home, "planted").exists()
    assert _command(ben, ben_terminal, "cat ~/notes")["output"].strip() == "private"


def test_by_default_split_workers_run_each_users_terminals_as_their_own_account(orm, homes, prefix):
    """Web processes and two workers as the split deployment runs them: a worker makes the account the web asks for."""
    _, key = make_key(name="cid")  # a user without an account yet
    server = start_split(webs=1, workers=2, TERMINALS_RUN_AS=None, TERMINALS_RUN_AS_PREFIX=prefix,
                         TERMINALS_HOMES=str(homes))
    try:
        ann = Api(server.url, key)
        created = ann.create()
        uid, cwd = _command(ann, created["terminalId"], "id -u; pwd")["output"].split()
        assert uid != "0" and Path(cwd).parent == homes and cwd == created["cwd"], (uid, cwd)
        assert _health(ann)["isolation"]["usersSeparated"] is True
        assert "NOT separated" not in server.process("worker0").log()
    finally:
        server.stop()


def test_by_default_health_says_users_are_separated(default_server, two_users):
    isolation = _health(Api(default_server.url, two_users["ann"][1]))["isolation"]
    assert isolation == {"usersSeparated": True, "runAs": "per-user", "problem": None}


def test_an_account_the_service_did_not_make_is_never_handed_out(default_server, prefix, orm):
    from terminals.models import AuditEvent
    from terminals.runtime.accounts import unix_name

    user, key = make_key(name="squatted")
    name = unix_name(user.username, prefix)
    subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/bin/sh", name], check=True)
    response = Api(default_server.url, key).post("/api/terminals", json={})
    assert response.status_code == 403, response.text
    error = response.json()["error"]
    assert error["code"] == "FORBIDDEN" and "not made by this service" in error["message"], error
    assert AuditEvent.objects.filter(username=user.username, action="create", outcome="FORBIDDEN").exists()


def test_usernames_map_to_distinct_valid_unprivileged_account_names():
    from terminals.runtime.accounts import unix_name

    names = ["alice", "Alice", "root", "a@b.c+d-e", "a.b.c+d-e", "x" * 150, "x" * 151, "ünïcode", "0day", "-"]
    mapped = [unix_name(name, "term-") for name in names]
    assert len(set(mapped)) == len(names), mapped
    for name in mapped + [unix_name("root", "")]:
        assert len(name) <= 32 and name[0].isalpha() and name != "root", name
        assert set(name) <= set("abcdefghijklmnopqrstuvwxyz0123456789_-"), name
    assert unix_name("alice", "term-") == mapped[0]  # deterministic


def test_two_workers_making_the_same_account_at_once_agree(homes, prefix):
    from terminals.runtime.accounts import provision

    username = f"race-{uuid.uuid4().hex[:6]}"
    barrier, made, failed = threading.Barrier(4), [], []

    def make():
        barrier.wait()
        try:
            made.append(provision(username, prefix=prefix, homes=homes))
        except Exception as error:  # noqa: BLE001 - collected for the assertion
            failed.append(error)

    threads = [threading.Thread(target=make) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not failed and len(made) == 4, failed
    assert len({account.uid for account in made}) == 1
    home = Path(made[0].home)
    assert home.stat().st_uid == made[0].uid and home.stat().st_mode & 0o777 == 0o700


# The unsafe choice, made explicitly: everything says so


@pytest.fixture(scope="module")
def shared_server(django_db_setup):
    server = start_embedded(TERMINALS_RUN_AS="service")
    yield server
    server.stop()


def test_the_start_banner_says_when_users_are_not_separated(shared_server, default_server, split_server):
    assert "users are NOT separated" in shared_server.process("serve").log()
    assert "NOT separated" not in default_server.process("serve").log()
    # The test settings run the split deployment's workers as the service's own account too (tests/settings.py).
    assert "users are NOT separated" in split_server.process("worker0").log()


def test_health_says_when_users_are_not_separated_and_why(shared_server, keys):
    isolation = _health(Api(shared_server.url, keys["alice"]))["isolation"]
    assert isolation["usersSeparated"] is False and isolation["runAs"] == "service", isolation
    assert "service's own account" in isolation["problem"] and "TERMINALS_RUN_AS" in isolation["problem"], isolation


def _create_api_key(username: str, **settings: str | None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "manage.py", "create_api_key", username], cwd=ROOT,
                          env=service_env(DJANGO_SETTINGS_MODULE="config.settings", **settings),
                          capture_output=True, text=True, timeout=60, check=True)


def test_create_api_key_warns_when_a_further_user_would_not_be_separated(django_db_setup, prefix, homes):
    shared = _create_api_key(f"second-{uuid.uuid4().hex[:8]}", TERMINALS_RUN_AS="service")
    assert "users are NOT separated" in shared.stderr and "more than one user" in shared.stderr, shared.stderr
    separated = _create_api_key(f"third-{uuid.uuid4().hex[:8]}", TERMINALS_RUN_AS=None)
    assert "NOT separated" not in separated.stderr, separated.stderr


def test_the_admin_index_warns_when_users_are_not_separated(orm):
    from django.test import Client, override_settings

    staff, _ = make_key(name="admin", staff=True)
    staff.is_superuser = True
    staff.save()
    browser = Client()
    browser.force_login(staff)
    with override_settings(TERMINALS={**django_settings.TERMINALS, "RUN_AS": "service"}):
        page = browser.get("/admin/")
        assert page.status_code == 200 and b"users are NOT separated" in page.content, page.content[:500]
    with override_settings(TERMINALS={**django_settings.TERMINALS, "RUN_AS": None}):
        page = browser.get("/admin/")
        assert page.status_code == 200 and b"NOT separated" not in page.content


def test_unset_means_per_user_as_root_and_service_otherwise_and_empty_is_the_old_service(settings):
    from terminals.environment import isolation, run_as_policy

    settings.TERMINALS = {**settings.TERMINALS, "RUN_AS": None}
    assert run_as_policy(euid=0) == "per-user" and run_as_policy(euid=1000) == "service"
    settings.TERMINALS = {**settings.TERMINALS, "RUN_AS": ""}
    assert run_as_policy(euid=0) == "service"
    assert "set but empty" in isolation()["problem"]
