"""Keys and users managed without SQL (manage.py commands and the admin), each change on the audit trail with no
secret in it, and the hash chain intact afterwards."""

from __future__ import annotations

import json
import re
import time
import uuid

import pytest
import requests
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group

from terminals.auth import KEY_CHECK_SECONDS
from terminals.models import AuditEvent

from .helpers import manage
from .servers import wait_for
from .test_admin import browser, get, post  # noqa: F401 - the admin session fixture and its form helpers
from .test_live import refusal, run

KEYS = "/admin/terminals/apikey/"
GROUPS = "/admin/auth/group/"


def new_name() -> str:
    return f"ops-{uuid.uuid4().hex[:8]}"


def rows_about(username: str) -> list[AuditEvent]:
    return [event for event in AuditEvent.objects.order_by("id") if event.details.get("subject") == username]


def make_key(username: str, *extra: str) -> str:
    made = manage("create_api_key", username, *extra)
    assert made.returncode == 0, made.stderr
    return made.stdout.strip().splitlines()[-1]


def answers(server, key: str) -> int:
    return requests.get(f"{server.url}/api/terminals", headers={"X-API-Key": key}, timeout=30).status_code


def once_the_key_check_expires(changed_at: float) -> None:
    """Waits until KEY_CHECK_SECONDS have passed since a key or its user changed in another process: until then a
    web process that found the key usable may take it (terminals/auth.py, SECURITY.md); from then on none may."""
    wait_for(lambda: time.monotonic() - changed_at >= KEY_CHECK_SECONDS, 10, "the key check's bound to pass")


def test_create_list_and_revoke_a_key_from_the_command_line(orm, server):
    """create_api_key makes the user and the key (two audit rows, no secret); list_api_keys shows the key with
    its last use; revoke_api_key by the shown prefix stops it on every web process within the key check's bound
    (one second) and is audited; a second revoke says so."""
    username = new_name()
    key = make_key(username, "--name", "laptop")
    prefix = key.split(".")[0]
    assert answers(server, key) == 200

    listed = manage("list_api_keys", "--user", username, "--json")
    assert listed.returncode == 0, listed.stderr
    (row,) = json.loads(listed.stdout)
    assert (row["prefix"], row["name"], row["user"], row["revoked"]) == (prefix, "laptop", username, None)
    assert row["lastUsed"] is not None and row["created"] is not None
    assert key.split(".", 1)[1] not in listed.stdout
    table = manage("list_api_keys", "--user", username)
    assert re.search(rf"^{prefix}\s+laptop\s+{username}\s", table.stdout, re.M), table.stdout

    for url in server.urls or [server.url]:  # every web process has found it usable just now, on both interfaces
        assert requests.get(f"{url}/api/terminals", headers={"X-API-Key": key}, timeout=30).status_code == 200
        assert run(refusal(url, str(uuid.uuid4()), {"X-API-Key": key})) == 4404  # the key passed; no such terminal
    revoked = manage("revoke_api_key", prefix)
    revoked_at = time.monotonic()
    assert revoked.returncode == 0, revoked.stderr
    assert f"{prefix} ({username}) revoked." in revoked.stdout
    once_the_key_check_expires(revoked_at)
    for url in server.urls or [server.url]:
        assert requests.get(f"{url}/api/terminals", headers={"X-API-Key": key}, timeout=30).status_code == 401
        assert run(refusal(url, str(uuid.uuid4()), {"X-API-Key": key})) == 4401
    assert "revoked already" in manage("revoke_api_key", prefix).stdout

    rows = rows_about(username)
    assert [(row.action, row.details.get("key")) for row in rows] == [
        ("user_create", None), ("key_create", prefix), ("key_revoke", prefix)]
    assert all(row.source.startswith("manage.py ") and row.user_id is None for row in rows)
    assert not [row for row in rows if key.split(".", 1)[1] in json.dumps(row.details)]


def test_an_unknown_prefix_is_refused_with_what_to_do(orm):
    finished = manage("revoke_api_key", "tk_00000000")
    assert finished.returncode != 0
    assert "there is no key tk_00000000; list the keys with list_api_keys" in finished.stderr


def test_create_and_disable_a_user_from_the_command_line(orm, server):
    """create_user --password prints the password once (the audit row says only that one was set);
    disable_user refuses the user's keys at once, --enable lets them in again; each change is audited."""
    username = new_name()
    created = manage("create_user", username, "--staff", "--password")
    assert created.returncode == 0, created.stderr
    password = re.search(r"password \(shown once\): (\S+)", created.stdout)[1]
    user = get_user_model().objects.get(username=username)
    assert user.is_staff and user.check_password(password)
    assert manage("create_user", username).returncode != 0  # taken

    key = make_key(username)
    assert answers(server, key) == 200
    assert manage("disable_user", username).returncode == 0
    once_the_key_check_expires(time.monotonic())
    refused = requests.get(f"{server.url}/api/terminals", headers={"X-API-Key": key}, timeout=30)
    assert refused.status_code == 401 and "disabled" in refused.json()["error"]["message"]
    assert "disabled already" in manage("disable_user", username).stdout
    assert manage("disable_user", username, "--enable").returncode == 0
    assert answers(server, key) == 200

    rows = [(row.action, {name: row.details.get(name) for name in ("staff", "password", "active")})
            for row in rows_about(username)]
    assert rows == [
        ("user_create", {"staff": True, "password": True, "active": None}),
        ("key_create", {"staff": None, "password": None, "active": None}),
        ("user_change", {"staff": None, "password": None, "active": False}),
        ("user_change", {"staff": None, "password": None, "active": True}),
    ]
    assert password not in json.dumps([row.details for row in rows_about(username)])


@pytest.mark.embedded_only("the admin's pages and the key use case run in a web process alone")
def test_admin_revokes_keys_and_logs_each_deletion_on_the_audit_trail(orm, server, browser):  # noqa: F811
    """Revoking keys in the admin goes through the same use case (one key_revoke row each, under the admin user);
    a bulk delete of two groups leaves one audit row per group; keys cannot be deleted there at all."""
    http, admin_user = browser
    username = new_name()
    first, second = make_key(username), make_key(username)
    ids = [str(record.pk) for record in get_user_model().objects.get(username=username).api_keys.order_by("pk")]
    done = post(http, KEYS, {"action": "revoke", "_selected_action": ids})
    assert done.status_code == 302, done.text
    assert answers(server, first) == 401 and answers(server, second) == 401
    revocations = [row for row in rows_about(username) if row.action == "key_revoke"]
    assert [(row.user_id, row.source) for row in revocations] == [(admin_user.pk, revocations[0].source)] * 2
    assert get(http, f"{KEYS}{ids[0]}/delete/").status_code == 403

    groups = [Group.objects.create(name=new_name()) for _ in range(2)]
    deleted = post(http, GROUPS, {"action": "delete_selected", "_selected_action": [str(g.pk) for g in groups],
                                  "post": "yes"})
    assert deleted.status_code == 302, deleted.text
    logged = AuditEvent.objects.filter(action="admin", user=admin_user, details__model="group",
                                       details__change="delete")
    assert sorted(row.details["object"] for row in logged) == sorted(group.name for group in groups)

    verified = manage("verify_audit")
    assert verified.returncode == 0, verified.stdout + verified.stderr


def test_changepassword_is_audited_without_the_password(orm):
    """Django's changepassword, as the banner of the first start suggests it, writes a user_change row saying the
    password changed, by whom (the command and the account that ran it), and never the password."""
    import subprocess
    import sys

    from .servers import ROOT, service_env

    username = new_name()
    manage("create_user", username)
    secret = f"pw-{uuid.uuid4().hex}"
    # No controlling terminal: getpass reads the two entries from standard input.
    changed = subprocess.run([sys.executable, "manage.py", "changepassword", username], cwd=ROOT, env=service_env(),
                             input=f"{secret}\n{secret}\n", capture_output=True, text=True, timeout=60,
                             start_new_session=True)
    assert changed.returncode == 0, changed.stderr
    assert get_user_model().objects.get(username=username).check_password(secret)
    row = rows_about(username)[-1]
    assert (row.action, row.details.get("password"), row.source.startswith("manage.py changepassword")) == (
        "user_change", True, True)
    assert secret not in json.dumps([event.details for event in rows_about(username)])
