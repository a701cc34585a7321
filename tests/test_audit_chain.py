"""The audit trail is append-only in the database itself and hash-chained, so tampering is refused or detected."""

import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from django.db import DatabaseError, connection

from terminals.audit import SYSTEM, audit
from terminals.models import AuditEvent

from .servers import ROOT, service_env


def manage(*args, data_dir: str) -> subprocess.CompletedProcess:
    # Its own SQLite file, whatever database the rest of the suite runs on, so the test can tamper with it.
    env = service_env(TERMINALS_DATA_DIR=data_dir, DATABASE_URL="")
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)


def test_audit_rows_link_to_the_previous_row(orm):
    """Each new row carries the previous row's hash and a hash of its own content."""
    first = audit(SYSTEM, "test", step=1)
    second = audit(SYSTEM, "test", step=2, ratio=0.5)
    second.refresh_from_db()
    assert second.previous_hash == first.hash
    assert second.hash == second.compute_hash()
    assert len(second.hash) == 64


@pytest.mark.parametrize("statement", [
    "UPDATE terminals_auditevent SET outcome = 'forged'",
    "DELETE FROM terminals_auditevent",
])
def test_database_refuses_to_change_or_delete_audit_rows(orm, statement):
    """Triggers refuse UPDATE and DELETE on audit rows even in raw SQL that bypasses the ORM."""
    audit(SYSTEM, "test")
    before = AuditEvent.objects.count()
    with pytest.raises(DatabaseError), connection.cursor() as cursor:
        cursor.execute(statement)
    assert AuditEvent.objects.count() == before
    assert AuditEvent.objects.filter(outcome="forged").exists() is False


def test_verify_audit_reports_an_intact_trail_and_the_first_broken_link():
    """verify_audit passes on an untouched trail, then names the first changed and the first removed row."""
    data_dir = tempfile.mkdtemp(prefix="audit-chain-")
    assert manage("migrate", "-v0", data_dir=data_dir).returncode == 0
    created = manage("shell", "-c", "from terminals.audit import SYSTEM, audit\nfor n in range(5): audit(SYSTEM, 'test', n=n)",
                     data_dir=data_dir)
    assert created.returncode == 0, created.stderr
    intact = manage("verify_audit", data_dir=data_dir)
    assert intact.returncode == 0, intact.stderr
    assert "intact: 5 events" in intact.stdout

    database = sqlite3.connect(Path(data_dir) / "terminals.sqlite3")
    database.executescript(
        "DROP TRIGGER terminals_auditevent_no_update; DROP TRIGGER terminals_auditevent_no_delete;"
        "UPDATE terminals_auditevent SET outcome = 'forged' WHERE id = 3;"
    )
    changed = manage("verify_audit", data_dir=data_dir)
    assert changed.returncode == 1
    assert "audit event 3" in changed.stderr and "changed" in changed.stderr

    database.executescript("UPDATE terminals_auditevent SET outcome = 'ok' WHERE id = 3; DELETE FROM terminals_auditevent WHERE id = 2;")
    database.close()
    removed = manage("verify_audit", data_dir=data_dir)
    assert removed.returncode == 1
    assert "audit event 3" in removed.stderr and "removed or inserted" in removed.stderr
