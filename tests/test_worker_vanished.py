"""A worker whose terminal record is deleted under a running terminal: it ends that terminal's processes, audits
it, and its other terminals and its clean stop go on as before. Run in this process, as tests/test_worker.py."""

from __future__ import annotations

import logging
import uuid

from terminals.models import AuditEvent, TerminalSession, Worker

from .conftest import make_key
from .helpers import eventually
from .runtime_support import gone
from .test_worker import create_message, run, with_worker

SLEEPER = {"kind": "command", "shell": "", "command": "/bin/sleep", "argv": ["/bin/sleep", "100"]}


def delete_record(terminal_id: str) -> None:
    """What deleting the row in the admin (or in SQL) did: the record goes, the process does not know."""
    TerminalSession.objects.filter(pk=terminal_id).delete()


def test_heartbeat_ends_a_terminal_whose_record_was_deleted_and_the_rest_go_on(orm, caplog):
    owner, _ = make_key()
    caplog.set_level(logging.WARNING)

    async def body(worker):
        orphan = await worker.creations.handle_create(create_message(owner, **SLEEPER))
        other = await worker.creations.handle_create(create_message(owner))
        await worker.database.run(lambda: delete_record(orphan["terminalId"]))
        await worker.upkeep.beat()
        await eventually(lambda: orphan["terminalId"] not in worker.manager and gone(orphan["pid"]),
                    "the orphaned terminal to be ended")
        written = await worker.requests.handle_input({"id": other["terminalId"], "data": "echo still-$((40+2))\n"})
        assert written["bytesWritten"] > 0
        await eventually(lambda: "still-42" in worker.manager.get(other["terminalId"]).buffer.text_between(0, None)[0],
                    "the other terminal to answer")
        return orphan, other, worker.id

    orphan, other, worker_id = run(with_worker(body))
    [event] = AuditEvent.objects.filter(terminal_id=uuid.UUID(orphan["terminalId"]), action="vanished")
    assert event.user_id is None and event.details["signal"] in ("SIGTERM", "SIGKILL")
    # The clean stop closed the other terminal's record and the worker's own.
    assert TerminalSession.objects.get(pk=other["terminalId"]).status == TerminalSession.Status.KILLED
    assert Worker.objects.get(pk=worker_id).stopped is not None
    assert not [record for record in caplog.records if record.levelno >= logging.ERROR], caplog.text


def test_clean_stop_closes_every_other_record_when_one_vanished(orm, caplog):
    """Records deleted under a running terminal and under one that exits by itself: no error, and the stop still
    closes the remaining records and the worker's own (the stop ends the orphan's processes too)."""
    owner, _ = make_key()
    caplog.set_level(logging.WARNING)

    async def body(worker):
        orphan = await worker.creations.handle_create(create_message(owner, **SLEEPER))
        exiting = await worker.creations.handle_create(create_message(owner))
        others = [await worker.creations.handle_create(create_message(owner)) for _ in range(2)]
        for vanished in (orphan, exiting):
            await worker.database.run(lambda vanished=vanished: delete_record(vanished["terminalId"]))
        await worker.requests.handle_input({"id": exiting["terminalId"], "data": "exit 3\n"})
        await worker.manager.get(exiting["terminalId"]).wait_for_exit(10)
        await worker.database.run(lambda: None)  # the exit's record update, queued before this, has run
        return orphan, others, worker.id

    orphan, others, worker_id = run(with_worker(body))
    assert gone(orphan["pid"])
    for other in others:
        assert TerminalSession.objects.get(pk=other["terminalId"]).status == TerminalSession.Status.KILLED
    assert Worker.objects.get(pk=worker_id).stopped is not None
    assert not [record for record in caplog.records if record.levelno >= logging.ERROR], caplog.text
