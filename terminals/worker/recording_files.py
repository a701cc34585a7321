"""The recordings a worker writes: one asciicast file per recorded terminal, under this host's recordings directory.

The PTY's read path only appends events to its Recording (runtime/asciicast.py). Here, every RECORDING_FLUSH_MS,
one task takes each recording's new events on the event loop and writes them all in one thread, so neither the
read path nor the loop waits on the disk. A terminal that has ended gets its exit marker and a last write; then
the file's size and SHA-256 go on record, and into the audit trail, where `verify_audit` checks them later.
Files older than the retention period are deleted by the sweep, which audits each deletion.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Awaitable, Callable
from datetime import datetime, timezone
from pathlib import Path

from django.conf import settings

from . import bookkeeping
from ..runtime.errors import RecordingNotFound
from ..runtime.asciicast import Recording, digest
from ..remote import protocol

logger = logging.getLogger(__name__)



def directory() -> Path:
    return Path(settings.TERMINALS["RECORDINGS_DIR"])


def new_path(terminal_id: str, when: float) -> str:
    """<dir>/<YYYY-MM-DD>/<terminal id>.cast: a day's files together, so the sweep and a person find them."""
    day = datetime.fromtimestamp(when, timezone.utc).strftime("%Y-%m-%d")
    return str(directory() / day / f"{terminal_id}.cast")


def _private_dirs(path: Path) -> None:
    # Only the service's account may enter: a recording holds what a terminal showed.
    for folder in (path.parent.parent, path.parent):
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(folder, 0o700)


class RecordingKeeper:
    """Opens, writes and finishes the recordings of one worker's terminals."""

    def __init__(self, run_database: Callable[[Callable[[], object]], Awaitable[object]], clock=time.time) -> None:
        self._run_database = run_database  # the worker's ordered database queue
        self._clock = clock
        self._open: dict[str, tuple[object, Recording]] = {}  # terminal id -> (session, recording)
        self._lock = asyncio.Lock()  # one write pass at a time: a Recording is written by one thread at a time

    def __len__(self) -> int:
        return len(self._open)

    @staticmethod
    def plan(message: dict, hostname: str) -> dict | None:
        """Where a terminal asked to be recorded will be: joined to its creation message, and so to its record."""
        if not message.get("record"):
            return None
        return {"host": hostname, "path": new_path(message["id"], time.time()),
                "record_input": settings.TERMINALS["RECORD_INPUT"]}

    def open(self, plan: dict, cols: int, rows: int) -> Recording:
        path = Path(plan["path"])
        _private_dirs(path)
        return Recording(str(path), cols=cols, rows=rows, started=self._clock(), timestamp=int(time.time()),
                         max_bytes=settings.TERMINALS["RECORDING_MAX_MB"] << 20, record_input=plan["record_input"])

    def attach(self, terminal_id: str, session, recording: Recording) -> None:
        """From now on the session's output goes to the recording too; call it before the loop next runs."""
        session.recording = recording
        self._open[terminal_id] = (session, recording)

    def discard(self, recording: Recording) -> None:
        """A recording opened for a terminal that never started."""
        try:
            os.unlink(recording.path)
        except OSError:
            pass

    # Writing

    async def flush(self, *, final: bool = False) -> int:
        """Writes what every recording got since the last pass; finishes those of terminals that ended (all of
        them when final, at shutdown). Returns how many recordings it finished."""
        async with self._lock:
            batch, ending = [], []
            for terminal_id, (session, recording) in list(self._open.items()):
                if session.finished or final:
                    status = session.exit_status
                    recording.exit(status.exit_code if status else None,
                                   status.signal if status else "SIGKILL", self._clock())
                    ending.append(terminal_id)
                events = recording.take()
                if events:
                    batch.append((recording, events))
            if batch:
                await asyncio.to_thread(_write_all, batch)
            for terminal_id in ending:
                session, recording = self._open.pop(terminal_id)
                session.recording = None
                await self._finish(terminal_id, recording)
            return len(ending)

    async def _finish(self, terminal_id: str, recording: Recording) -> None:
        try:
            size, sha256 = await asyncio.to_thread(digest, recording.path)
        except OSError as error:
            logger.error("recording of terminal %s cannot be read back to seal it: %s", terminal_id, error)
            return
        await self._run_database(lambda: bookkeeping.recording_finished(terminal_id, size, sha256, recording.capped))

    # Retention

    async def sweep(self, hostname: str) -> int:
        """Deletes this host's finished recordings older than the retention period; returns how many."""
        days = settings.TERMINALS["RECORDING_RETENTION_DAYS"]
        if not days:
            return 0
        expired = await self._run_database(lambda: bookkeeping.recordings_expired(hostname, days))
        for terminal_id, path in expired:
            try:
                await asyncio.to_thread(os.unlink, path)
            except FileNotFoundError:
                pass
            except OSError as error:
                logger.error("deleting expired recording %s failed: %s", path, error)
                continue
            await self._run_database(lambda terminal_id=terminal_id: bookkeeping.recording_deleted(terminal_id, days))
        return len(expired)


def _write_all(batch: list) -> None:
    for recording, events in batch:
        try:
            recording.write(events)
        except OSError as error:  # a full disk must not stop the other recordings, nor the terminals
            logger.error("writing recording %s failed: %s", recording.path, error)


def read_chunk(path: str, offset: int, length: int) -> bytes:
    """Part of a recording file of this host, for a web process (RECORDING_READ); only under the recordings
    directory, whatever the request says."""
    root = directory().resolve()
    target = Path(path).resolve()
    if root not in target.parents or target.suffix != ".cast":
        raise RecordingNotFound("that is not a recording of this host")
    try:
        with open(target, "rb") as file:
            file.seek(max(0, offset))
            return file.read(max(0, min(length, protocol.RECORDING_CHUNK_BYTES)))
    except FileNotFoundError:
        raise RecordingNotFound("the recording's file is gone from its host (deleted by the retention sweep, "
                                "or by hand)") from None
