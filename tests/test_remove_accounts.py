"""`manage.py remove_accounts` undoes what trying the service as root left: the Unix account and home it made for
each of its users, and nothing else. It refuses while a terminal of theirs runs, and lists before it removes.

The service runs as root here, on a database of its own (so the command sees only this test's users), with a prefix
and a homes folder of its own; a plain account and one tagged for another service's user stand beside them."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path

import pytest

from terminals.runtime.accounts import comment_for, unix_name

from .client import Api
from .own_database import audit_rows, create_key, manage, own_database
from .servers import start_embedded, wait_for

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="accounts are made and removed by root only")


def account(name: str) -> pwd.struct_passwd | None:
    try:
        return pwd.getpwnam(name)
    except KeyError:
        return None


@pytest.fixture
def service():
    prefix = f"tr{uuid.uuid4().hex[:4]}-"
    homes = Path(tempfile.mkdtemp(prefix="terminals-test-homes-"))
    homes.chmod(0o755)
    settings = own_database(sqlite=True, TERMINALS_RUN_AS_PREFIX=prefix, TERMINALS_HOMES=str(homes),
                            TERMINALS_SEALED_SHELL_DIR=tempfile.mkdtemp(prefix="terminals-test-shells-"))
    server = start_embedded(**settings, TERMINALS_RUN_AS=None)
    # Beside the service's: a plain account, and one tagged as made by a terminal service for another's user.
    bystanders = {f"{prefix}plain": "a login", f"{prefix}other": comment_for(f"someone-else-{uuid.uuid4().hex}")}
    for name, comment in bystanders.items():
        home = homes / name
        subprocess.run(["useradd", "--system", "--user-group", "--create-home", "--home-dir", str(home),
                        "--comment", comment, name], check=True, capture_output=True)
    yield server, settings, prefix, homes, bystanders
    server.stop()
    for name in [entry.pw_name for entry in pwd.getpwall() if entry.pw_name.startswith(prefix)]:
        subprocess.run(["userdel", name], check=False, capture_output=True)
    shutil.rmtree(homes, ignore_errors=True)


def test_remove_accounts_removes_only_what_the_service_made_and_never_while_a_terminal_runs(service):
    server, settings, prefix, homes, bystanders = service
    username, key = create_key(settings, "tryout")
    api = Api(server.url, key)
    terminal = api.create()["terminalId"]
    name = unix_name(username, prefix)
    made = account(name)
    assert made is not None and made.pw_dir == str(homes / name) and (homes / name).is_dir()

    refused = manage(settings, "remove_accounts")
    assert refused.returncode != 0
    assert f"terminal {terminal} of {username} is active" in refused.stderr, refused.stderr
    assert f"account {name} runs processes" in refused.stderr and "nothing was removed" in refused.stderr
    assert account(name) is not None and (homes / name).is_dir()

    assert api.delete(f"/api/terminals/{terminal}", json={"force": True}).status_code == 200
    wait_for(lambda: not subprocess.run(["pgrep", "-u", str(made.pw_uid)], capture_output=True).stdout, 15,
             "the terminal's processes to end")
    listed = manage(settings, "remove_accounts", "--dry-run")
    assert listed.returncode == 0, listed.stderr
    assert f"would remove account {name} (uid {made.pw_uid}) of user {username}, home {homes / name}" in listed.stdout
    assert account(name) is not None and (homes / name).is_dir()  # a dry run changes nothing

    removed = manage(settings, "remove_accounts")
    assert removed.returncode == 0, removed.stderr
    assert f"removed account {name}" in removed.stdout
    assert account(name) is None and not (homes / name).exists()
    for bystander in bystanders:  # neither a plain account nor one made for a user of another service
        assert account(bystander) is not None and (homes / bystander).is_dir(), bystander
        assert f"account {bystander}" not in removed.stdout
    rows = [row for row in audit_rows(settings, "") if row["action"] == "remove_account"]
    assert [(row["details"]["account"], row["details"]["user"]) for row in rows] == [(name, username)]
    assert manage(settings, "remove_accounts").stdout.startswith("No account of this service's users")

    assert api.create()["status"] == "active"  # a later terminal makes the account again
    assert account(name) is not None
