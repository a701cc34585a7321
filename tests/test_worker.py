"""The worker's own steps, run in this process on an in-memory channel layer: idle sweep, lost terminals, bad requests."""

import asyncio
import os
import threading
import time

import pytest
from channels.layers import InMemoryChannelLayer

from terminals.remote import protocol
from terminals.models import AuditEvent, TerminalSession, Worker
from terminals.runtime.manager import Limits
from terminals.worker.server import TerminalWorker

from .conftest import make_key
from .helpers import eventually, run
from .runtime_support import gone, wait_until

ENV = {"PATH": os.environ["PATH"], "PS1": "$ ", "TERM": "xterm-256color", "HOME": "/tmp"}


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


def create_message(owner, **overrides) -> dict:
    import uuid

    message = {
        "id": str(uuid.uuid4()),
        "owner_id": owner.pk,
        "api_key_id": None,
        "name": "",
        "shell": "/bin/bash",
        "argv": ["/bin/bash", "--norc", "--noprofile"],
        "cwd": "/tmp",
        "env": ENV,
        "cols": 80,
        "rows": 24,
    }
    message.update(overrides)
    return message


async def with_worker(body, *, clock=time.time, limits=None):
    worker = TerminalWorker(layer=InMemoryChannelLayer(), clock=clock, limits=limits)
    await worker.start()
    try:
        return await body(worker)
    finally:
        await worker.shutdown()


def test_sweep_ends_idle_terminals_and_marks_them_timed_out(orm):
    """A terminal idle past the session timeout is ended by the sweep, marked timed_out and audited."""
    owner, _ = make_key()
    clock = Clock()
    limits = Limits(idle_timeout=60.0)

    async def body(worker):
        idle = await worker.creations.handle_create(create_message(owner))
        busy = await worker.creations.handle_create(create_message(owner))
        # Idle means quiet: a first prompt read after the clock moves would count as activity then.
        for created in (idle, busy):
            session = worker.manager.get(created["terminalId"])
            await eventually(lambda session=session: session.buffer.end > 0, "the first prompt", timeout=30)
        clock.now += 30
        assert await worker.upkeep.sweep_idle() == 0
        worker.manager.get(busy["terminalId"]).last_activity = clock.now
        clock.now += 31
        assert await worker.upkeep.sweep_idle() == 1
        return idle["terminalId"], busy["terminalId"]

    idle_id, busy_id = run(with_worker(body, clock=clock, limits=limits))
    idle = TerminalSession.objects.get(pk=idle_id)
    assert idle.status == TerminalSession.Status.TIMED_OUT
    assert idle.released is not None
    assert AuditEvent.objects.filter(terminal_id=idle_id, action="timeout").count() == 1
    # The busy one ran until the worker shut down.
    assert TerminalSession.objects.get(pk=busy_id).status == TerminalSession.Status.KILLED


def test_a_worker_marks_lost_the_terminals_of_one_silent_over_three_of_its_own_beats_and_not_at_its_start(orm):
    """A worker marks lost the active terminals of a worker whose heartbeat stayed the same over three of its own
    beats, however old that heartbeat is by the clock: not at its start, when it has seen nothing (after a database
    outage every heartbeat is an hour old too), nor before the third beat."""
    owner, _ = make_key()
    from django.utils import timezone

    long_ago = timezone.now() - timezone.timedelta(hours=1)
    gone = Worker.objects.create(id="gone" + os.urandom(4).hex(), channel="x", hostname="h", pid=1, started=long_ago, last_seen=long_ago)
    orphan = TerminalSession.objects.create(owner=owner, shell="/bin/sh", cwd="/", worker=gone, pid=None)

    async def body(worker):
        # What its beats see of the gone worker, and only of it: beat() would also judge the workers of the other
        # deployments that share this test database, after beats far faster than real ones (their interval apart).
        ticks = Clock()
        ticks.now = 0.0
        worker.upkeep.silence.clock = ticks
        statuses = [await asyncio.to_thread(_status_of, orphan.id)]
        for _ in range(4):  # the first beat sees the heartbeat, the next three see it unchanged
            worker.upkeep.silence.observe({gone.pk: long_ago})
            await worker.upkeep.mark_lost()
            ticks.now += 5.0  # one heartbeat interval between beats, as the worker's timer spaces them
            statuses.append(await asyncio.to_thread(_status_of, orphan.id))
        return statuses

    assert run(with_worker(body)) == ["active"] * 4 + ["lost"]
    orphan.refresh_from_db()
    assert orphan.ended is not None
    assert AuditEvent.objects.filter(terminal_id=orphan.id, action="lost").exists() is True
    assert Worker.objects.get(pk=gone.pk).lost is not None


def _status_of(terminal_id) -> str:
    from django.db import connection

    try:
        return TerminalSession.objects.get(pk=terminal_id).status
    finally:
        connection.close()


def test_the_heartbeat_is_written_on_time_while_the_workers_database_writes_and_threads_are_stuck(orm, settings):
    """The liveness signal waits neither behind the worker's queue of database writes nor behind asyncio's shared
    threads (adding accounts, rendering screens): with both stuck, the heartbeat still advances beat after beat, so
    the web processes do not give up on a worker that is only busy."""
    from concurrent.futures import ThreadPoolExecutor

    settings.TERMINALS = {**settings.TERMINALS, "HEARTBEAT_INTERVAL_MS": 200}
    release = threading.Event()
    reader = ThreadPoolExecutor(1)

    async def body(worker):
        loop = asyncio.get_running_loop()
        stuck = [asyncio.ensure_future(worker.database.run(release.wait))]
        stuck += [asyncio.ensure_future(asyncio.to_thread(release.wait)) for _ in range(40)]
        try:
            seen = [await loop.run_in_executor(reader, _last_seen, worker.id)]

            async def advanced_twice():
                beat = await loop.run_in_executor(reader, _last_seen, worker.id)
                if beat > seen[-1]:
                    seen.append(beat)
                return len(seen) >= 3

            await eventually(advanced_twice, "two heartbeats while the worker's threads are stuck", timeout=20)
        finally:
            release.set()
            await asyncio.gather(*stuck)

    run(with_worker(body))
    reader.shutdown()


def _last_seen(worker_id):
    from django.db import connection

    try:
        return Worker.objects.get(pk=worker_id).last_seen
    finally:
        connection.close()


def test_worker_answers_unknown_requests_with_an_error_and_drops_expired_ones(orm):
    """An unknown request type gets an error reply; a request whose caller gave up gets none."""

    async def body(worker):
        layer = worker.layer
        reply_to = await layer.new_channel("test.")
        await worker.dispatch({"type": "terminal.bogus", "reply_to": reply_to, "deadline": time.time() + 5})
        reply = await asyncio.wait_for(layer.receive(reply_to), 5)
        late = await layer.new_channel("test.")
        await worker.dispatch({"type": protocol.PING, "reply_to": late, "deadline": time.time() - 1})
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(layer.receive(late), 0.3)
        return reply

    reply = run(with_worker(body))
    assert reply["ok"] is False
    assert reply["error"]["code"] == "INTERNAL_ERROR"


def test_worker_refuses_creation_past_the_per_user_limit(orm, settings):
    """The per-user limit is checked by the worker against the database."""
    settings.TERMINALS = {**settings.TERMINALS, "MAX_PER_USER": 1}
    owner, _ = make_key()

    async def body(worker):
        await worker.creations.handle_create(create_message(owner))
        reply_to = await worker.layer.new_channel("test.")
        await worker.dispatch({**create_message(owner), "type": protocol.CREATE, "reply_to": reply_to})
        return await asyncio.wait_for(worker.layer.receive(reply_to), 5)

    reply = run(with_worker(body))
    assert reply["ok"] is False
    assert reply["error"]["code"] == "LIMIT_REACHED"


def test_a_worker_runs_terminals_only_as_the_account_it_is_configured_for(orm, settings):
    """A create naming another account (a web process set up differently, or anything else on the channel layer)
    is refused: with TERMINALS_RUN_AS=service, not as nobody or root; per user, not as the worker's own."""
    import subprocess
    import tempfile
    import uuid
    from pathlib import Path

    from terminals.runtime.errors import TerminalError

    owner, _ = make_key()
    homes = Path(tempfile.mkdtemp(prefix="terminals-test-homes-"))
    homes.chmod(0o755)
    prefix = f"tw{uuid.uuid4().hex[:4]}-"

    async def body(worker):
        refusals = []
        for run_as in ("nobody", "root"):
            with pytest.raises(TerminalError) as caught:
                await worker.creations.handle_create(create_message(owner, run_as=run_as, username=owner.username))
            refusals.append(caught.value)
        settings.TERMINALS = {**settings.TERMINALS, "RUN_AS": "per-user", "RUN_AS_PREFIX": prefix, "HOMES": str(homes)}
        with pytest.raises(TerminalError) as caught:
            await worker.creations.handle_create(create_message(owner, run_as="", username=owner.username))
        refusals.append(caught.value)
        return refusals

    try:
        refusals = run(with_worker(body))
    finally:
        with open("/etc/passwd") as passwd:
            for name in [line.split(":", 1)[0] for line in passwd if line.startswith(prefix)]:
                subprocess.run(["userdel", name], check=False, capture_output=True)
        subprocess.run(["rm", "-rf", str(homes)], check=False)
    assert [refusal.code for refusal in refusals] == ["FORBIDDEN"] * 3, refusals
    assert all("set TERMINALS_RUN_AS the same in every process" in refusal.message for refusal in refusals), refusals
    assert not TerminalSession.objects.filter(owner=owner).exists()


def _queued(layer, channel: str) -> int:
    queue = layer.channels.get(channel)
    return queue.qsize() if queue is not None else 0


@pytest.mark.parametrize("cwd", ["/tmp", "/nonexistent-directory"])
def test_a_creation_delivered_twice_runs_once_and_answers_once(orm, cwd):
    """The Redis channel layer can hand a message of the shared creation queue to two workers (its "$inflight"
    queue is put back by the next receive). The second delivery starts nothing and answers nothing: one terminal,
    or for a creation that failed one refusal, never a second terminal the caller does not know of."""
    owner, _ = make_key()
    message = {**create_message(owner, cwd=cwd), "type": protocol.CREATE, "deadline": time.time() + 30}

    async def body(worker):
        message["reply_to"] = await worker.layer.new_channel("test.")
        await worker.dispatch(dict(message))
        await worker.dispatch(dict(message))
        reply = await asyncio.wait_for(worker.layer.receive(message["reply_to"]), 5)
        return reply, _queued(worker.layer, message["reply_to"]), len(worker.manager)

    reply, left, hosted = run(with_worker(body))
    assert left == 0  # one answer only
    rows = TerminalSession.objects.filter(pk=message["id"]).count()
    if cwd == "/tmp":
        assert reply["ok"] is True and (rows, hosted) == (1, 1)
    else:
        assert reply["ok"] is False and (rows, hosted) == (0, 0)


def test_typing_into_a_terminal_is_not_reading_it():
    """The worker's notion of a read terminal (its flood is then read at full speed): a request that reads or waits
    on it, or a client watching; input, a resize or a signal is not one, and neither is being created."""
    from terminals.worker.readers import Readers

    class NobodyWatches:
        def watching(self, terminal_id):
            return 0

    readers = Readers(NobodyWatches())
    unread = readers.unread_check("t")
    assert unread()
    for kind in (protocol.INPUT, protocol.RESIZE, protocol.SIGNAL):
        readers.begin("t", kind)
        assert unread(), kind
        readers.end("t", kind)
    assert unread()
    readers.begin("t", protocol.STATS)
    assert not unread()
    readers.end("t", protocol.STATS)
    assert not unread()  # read just now: unread again only UNREAD_AFTER_SECONDS later


def hold_the_owners_create(owner, held: threading.Event, release: threading.Event) -> None:
    """In a thread of its own: the transaction a create's reserve waits for (on SQLite the database's write lock,
    on PostgreSQL the owner's row), held until release is set."""
    from django.contrib.auth import get_user_model
    from django.db import connection, transaction

    try:
        with transaction.atomic():
            get_user_model().objects.select_for_update().filter(pk=owner.pk).first()
            held.set()
            release.wait(30)
    finally:
        connection.close()


def test_a_create_in_flight_when_the_worker_stops_leaves_no_shell_running(orm):
    """The worker stops while a create's job waits for the database. Once the database lets it go on, the job still
    writes the row and starts the shell; the stopping worker then ends that shell at once, rather than leave it
    running with no worker hosting it."""
    owner, _ = make_key()
    message = {**create_message(owner), "type": protocol.CREATE, "deadline": time.time() + 30}
    held, release = threading.Event(), threading.Event()
    blocker = threading.Thread(target=hold_the_owners_create, args=(owner, held, release))

    async def scenario():
        worker = TerminalWorker(layer=InMemoryChannelLayer())
        await worker.start()
        blocker.start()
        try:
            assert await asyncio.to_thread(held.wait, 10)
            creating = worker._spawn(worker.dispatch(dict(message)))
            await wait_until(lambda: worker.manager._held == 1, what="the create's job to be queued")
            stopping = asyncio.ensure_future(worker.shutdown())
            await wait_until(creating.done, what="the stop to cancel the create")
        finally:
            release.set()
        await stopping
        await asyncio.to_thread(blocker.join, 10)

    run(scenario())
    record = TerminalSession.objects.get(pk=message["id"])
    assert record.pid is not None  # the job went on to the end: the shell was started
    run(eventually(lambda: gone(record.pid), what=f"the late shell {record.pid} to be ended"))
