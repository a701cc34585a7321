"""What a worker does on its own, on a timer: its heartbeat, the terminals of workers that are gone, terminals whose
record was deleted, idle terminals, and live clients whose lease was not renewed. Each step can be run on its own."""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor

from django.conf import settings
from django.db import connection

from ..exceptions import database_unavailable
from ..remote import leases, protocol
from ..runtime import confinement as confine
from ..runtime.errors import TerminalError
from ..runtime.keeping import holder_pid
from ..runtime.manager import SessionManager
from ..runtime.processes import marked_processes
from ..runtime.pty import MARKER_VARIABLE, ExitStatus
from ..runtime.signals import kill_marked
from . import bookkeeping
from .database_queue import DatabaseQueue
from .liveness import Silence
from .placement import cgroup_prefix
from .readers import Readers
from .recording_files import RecordingKeeper
from .streaming import OutputFanout

logger = logging.getLogger(__name__)


class Upkeep:
    """The worker's periodic steps. spawn runs a coroutine as one of the worker's tasks (ended when it stops)."""

    def __init__(self, *, worker_id: str, hostname: str, space: str, layer, manager: SessionManager,
                 database: DatabaseQueue, fanout: OutputFanout, readers: Readers, recordings: RecordingKeeper,
                 confinement: confine.Confinement, spawn: Callable[[Coroutine], asyncio.Task]) -> None:
        self.worker_id, self.hostname, self.space, self.layer = worker_id, hostname, space, layer
        self.manager, self.database, self.fanout, self.readers = manager, database, fanout, readers
        self.recordings, self.confinement, self.spawn = recordings, confinement, spawn
        # The other workers' heartbeats, as seen at this one's beats.
        self.silence = Silence(settings.TERMINALS["HEARTBEAT_INTERVAL_MS"] / 1000, clock=time.monotonic)
        self._ending_vanished: set[str] = set()  # terminals whose record was deleted, being ended
        self._leases_checked = 0.0  # when expire_leases last ran (or the worker started), by the loop's clock
        # The liveness signal's own thread: asyncio's shared ones can all be busy for seconds (adding accounts,
        # rendering screens), and a heartbeat queued behind them makes the web processes give up on this worker.
        self._heartbeat_thread = ThreadPoolExecutor(1, thread_name_prefix="heartbeat")

    def started(self) -> None:
        self._leases_checked = asyncio.get_running_loop().time()

    # The heartbeat, and what it finds

    async def keep_alive(self) -> None:
        """Writes the liveness signal every heartbeat interval, at a fixed rate, until cancelled. It queues neither
        behind the worker's other database writes (under load they lag for seconds) nor behind beat()'s work; a
        late or failed one is logged, so a worker judged gone says why."""
        loop = asyncio.get_running_loop()
        interval = settings.TERMINALS["HEARTBEAT_INTERVAL_MS"] / 1000
        due = loop.time()
        while True:
            due = max(due + interval, loop.time())  # after a late one, the next is an interval later, not at once
            await asyncio.sleep(due - loop.time())
            try:
                await loop.run_in_executor(self._heartbeat_thread, bookkeeping.worker_alive, self.worker_id)
            except Exception as error:  # noqa: BLE001 - the next one tries again
                self.silence.interrupted()  # nobody is judged across a gap in this worker's own beats
                if database_unavailable(error) is None:  # an outage is logged once, by outage.noticed
                    logger.exception("this worker's heartbeat could not be written; trying again in %.1f s", interval)
                continue
            late = loop.time() - due
            if late > interval:
                logger.warning("this worker's heartbeat was written %.1f s late (the interval is %.1f s; web "
                               "processes judge a worker gone after three); its database writes are slow", late,
                               interval)

    async def stop(self) -> None:
        """Closes the heartbeat's connection (once a beat under way has ended) and lets its thread go."""
        loop = asyncio.get_running_loop()
        try:
            # Looked up on that thread: Django's connections belong to the thread that opened them.
            await asyncio.wait_for(loop.run_in_executor(self._heartbeat_thread, lambda: connection.close()), 5)
        except (asyncio.TimeoutError, Exception) as error:  # noqa: BLE001 - a stuck beat: it ends with the process
            logger.warning("the heartbeat's connection could not be closed (%r); it closes with the process", error)
        self._heartbeat_thread.shutdown(wait=False)

    async def beat(self) -> None:
        """What the heartbeat finds: this worker's terminals whose records changed, and other workers gone."""
        activity = {session_id: session.last_activity for session_id, session in self.manager.items()}
        running = frozenset(session_id for session_id, session in self.manager.items() if session.is_alive)
        try:
            beat = await self.database.run(lambda: bookkeeping.worker_beat(self.worker_id, activity, running))
        except Exception:
            self.silence.interrupted()  # the database did not take this beat: nobody is judged across the gap
            raise
        if beat.revived or beat.readopted:
            logger.error("this worker was judged gone (its heartbeats could not be seen) and beats again; it took "
                         "back %d of its terminals marked lost meanwhile", len(beat.readopted))
        await self.end_disowned(beat.disowned)
        for session_id in beat.vanished:
            if session_id in self.manager and session_id not in self._ending_vanished:
                self._ending_vanished.add(session_id)
                self.spawn(self.end_vanished(session_id))
        self.silence.observe(beat.heartbeats)
        await self.mark_lost()

    async def end_vanished(self, session_id: str) -> None:
        """Ends a terminal whose record was deleted while it ran: no request can reach it any more, so its
        processes would run on unseen. The end is audited under the system."""
        try:
            status = await self.manager.terminate(session_id)
            self.fanout.notify(session_id)
            await self.database.run(lambda: bookkeeping.vanished_end(session_id, status))
            logger.warning("ended terminal %s: its record was deleted while it ran", session_id)
        except Exception:  # noqa: BLE001 - the next heartbeat tries again
            logger.exception("ending terminal %s, whose record was deleted, failed", session_id)
        finally:
            self._ending_vanished.discard(session_id)

    async def end_disowned(self, terminal_ids: list[str]) -> None:
        """Ends the terminals given a final state while this worker was judged gone that it could not take back
        (released; or lost and ended here meanwhile): on record they ended, and nobody can reach them, so nothing of
        theirs may keep running here."""
        for terminal_id in terminal_ids:
            if terminal_id not in self.manager:
                continue  # released here meanwhile
            logger.error("terminal %s was given a final state while this worker was judged gone; ending it",
                         terminal_id)
            try:
                await self.manager.terminate(terminal_id, signal.SIGKILL, grace=0)
            except TerminalError as error:
                logger.warning("ending disowned terminal %s: %s", terminal_id, error.message)
            self.fanout.notify(terminal_id)

    # The terminals of workers that are gone

    async def mark_lost(self) -> None:
        """Marks lost the terminals of workers that are gone (any live worker may do it), and ends what those
        of workers whose process is gone from this host left running here."""
        silent = self.silence.silent()
        lost = await self.database.run(lambda: bookkeeping.sessions_mark_lost(self.space, self.worker_id, silent))
        if lost:
            logger.warning("marked %d terminals of departed workers lost", len(lost))
            here = [terminal_id for terminal_id, endable in lost.items() if endable]
            if here:
                await self.reap_lost(here)
                await self.empty_departed_groups()

    async def empty_departed_groups(self) -> int:
        """Kills what is left in the control groups of this host's workers whose process is gone (what dropped the
        terminal's marker, `env -i`, is found only there), as a worker starting here would."""
        if not self.confinement.cgroups.controllers:
            return 0
        prefix = cgroup_prefix()
        killed = await asyncio.to_thread(confine.reap_departed, prefix, own=f"{prefix}{holder_pid()}")
        if killed:
            logger.warning("killed %d processes left in the control groups of workers that are gone", killed)
        return killed

    async def reap_lost(self, terminal_ids: list[str] | None = None) -> int:
        """SIGKILLs the processes on this host of lost terminals: of terminal_ids, or (None, when the worker
        starts) of every lost terminal whose marker a process here carries. Returns how many it killed.

        A worker killed without stopping leaves what its shells started that ignores the hangup (nohup, setsid,
        double-forked daemons); nobody can reach those terminals any more, so their processes go. Each carries
        its terminal's marker (MARKER_VARIABLE) in its environment, whoever its parent is now.
        """
        if terminal_ids is None:
            carried = await asyncio.to_thread(marked_processes, MARKER_VARIABLE)
            if not carried:
                return 0
            space = self.space  # a frozen worker's terminals here are left to it (it takes them back)
            terminal_ids = await self.database.run(lambda: bookkeeping.sessions_lost_among(list(carried), space))
        doomed = [terminal_id for terminal_id in terminal_ids if terminal_id not in self.manager]  # never its own
        if not doomed:
            return 0
        killed = await asyncio.to_thread(kill_marked, MARKER_VARIABLE, doomed)
        if killed:
            logger.warning("killed %d processes left running by %d lost terminals", len(killed), len(doomed))
        return len(killed)

    # Idle terminals and unrenewed live clients

    async def sweep_idle(self) -> int:
        """Ends terminals idle for longer than the session timeout; returns how many."""
        self.manager.retry_releases()
        ended = 0
        for session_id in self.manager.idle_sessions():
            try:
                status = await self.manager.terminate(session_id, signal.SIGHUP)
                status = status or ExitStatus(exit_code=None, signal="SIGKILL")
                await self.database.run(lambda: bookkeeping.session_end(session_id, status, bookkeeping.TIMED_OUT, release=True, audit_action="timeout"))
                ended += 1
            except Exception:  # noqa: BLE001 - one broken terminal must not stop the sweep
                logger.exception("ending idle terminal %s failed", session_id)
        await self.recordings.sweep(self.hostname)
        for terminal_id in [terminal_id for terminal_id in self.readers.asked if terminal_id not in self.manager]:
            self.readers.forget(terminal_id)
        for session_id in self.manager.idle_sessions(ended=True):
            # Output of an ended terminal nobody read for a whole timeout is freed, so memory stays bounded.
            self.manager.release(session_id)
            await self.database.run(lambda: bookkeeping.session_end(session_id, ExitStatus(None, None), None, release=True))
        return ended

    async def expire_leases(self) -> None:
        """Stops streaming to the subscribers no web process renewed (leases.py): the web process is gone, or its
        detach was. Each channel is told once, in case a client still reads there, and a WebSocket's detach is
        audited unless its web process did it."""
        now = asyncio.get_running_loop().time()
        paused = now - self._leases_checked > 2 * leases.RENEW_SECONDS + 1.0
        self._leases_checked = now
        for terminal_id, subscriber in self.fanout.expire(leases.LEASE_SECONDS, paused=paused):
            logger.warning("stopped streaming terminal %s to %s: its lease was not renewed for %g s (its web "
                           "process is gone, or its detach was lost)", terminal_id, subscriber.channel,
                           leases.LEASE_SECONDS)
            try:
                await self.layer.send(subscriber.channel, {"type": protocol.STREAM_DROPPED, "terminal": terminal_id})
            except Exception as error:  # noqa: BLE001 - nobody may read there, which is the usual case
                logger.info("telling %s its stream ended failed: %s", subscriber.channel, error)
            if subscriber.actor is not None:
                self.database.submit(lambda terminal_id=terminal_id, subscriber=subscriber: bookkeeping.lease_expired(
                    terminal_id, subscriber.channel, subscriber.actor))
