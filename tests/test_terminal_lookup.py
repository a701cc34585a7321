"""The terminal lookup every request makes (sessions.session_get_for): compiled once, it must still give what the
ORM gives, and apply the access rule exactly as TerminalSession.objects.visible_to() does."""

import datetime as dt
import os
import uuid

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from terminals import sessions
from terminals.exceptions import TerminalNotFound
from terminals.models import TerminalSession, Worker

from .conftest import make_key


def columns(record) -> dict:
    return {field.attname: getattr(record, field.attname) for field in record._meta.concrete_fields}


@pytest.fixture
def terminals(orm):
    """Two terminals of one owner, with every column set to something other than its default: one on a worker,
    one on none."""
    owner, _ = make_key(name="owner")
    now = timezone.now().replace(microsecond=123456)
    worker = Worker.objects.create(id="w" + os.urandom(6).hex(), channel="worker.channel!x", hostname="host-a",
                                   process_space="pidns:[42]", pid=4242, started=now - dt.timedelta(hours=1),
                                   last_seen=now, stopped=None)
    common = dict(owner=owner, name="build", pid=77, shell="/bin/bash", args=["-x", "ü"], pty=False,
                  output_byte_limit=4096, session_id="acp-1", cwd="/tmp", cols=132, rows=43, exit_code=3,
                  signal="SIGTERM", ended=now, recorded=True, status=TerminalSession.Status.EXITED)
    on_worker = TerminalSession.objects.create(worker=worker, command="", **common)
    on_none = TerminalSession.objects.create(worker=None, command="/usr/bin/top", **common)
    yield owner, on_worker, on_none
    TerminalSession.objects.filter(pk__in=[on_worker.pk, on_none.pk]).delete()
    worker.delete()


def test_the_compiled_lookup_gives_the_record_and_worker_the_orm_gives(terminals):
    owner, *records = terminals
    for record in records:
        expected = TerminalSession.objects.select_related("worker").get(pk=record.pk)
        found = sessions.session_get_for(user=owner, terminal_id=str(record.pk))
        assert type(found) is TerminalSession and not found._state.adding
        assert columns(found) == columns(expected)
        with CaptureQueriesContext(connection) as queries:  # the worker came with the terminal, as select_related
            worker = found.worker
        assert len(queries) == 0
        assert (columns(worker) if worker else None) == (columns(expected.worker) if expected.worker else None)


def test_the_compiled_lookup_lets_only_the_owner_and_staff_find_a_terminal(terminals):
    owner, on_worker, _ = terminals
    staff, _ = make_key(staff=True, name="staff")
    stranger, _ = make_key(name="stranger")
    assert sessions.session_get_for(user=staff, terminal_id=on_worker.pk).pk == on_worker.pk
    for user, terminal_id in ((stranger, on_worker.pk), (owner, uuid.uuid4()), (owner, "not-a-uuid")):
        with pytest.raises(TerminalNotFound):
            sessions.session_get_for(user=user, terminal_id=terminal_id)
