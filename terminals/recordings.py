"""Use cases of recordings (docs/recording.md): reading one back, listing them, and checking the files against what
the audit trail sealed. Whether a terminal is recorded is decided at its creation (sessions.should_record).

A recording file stays on the host of the worker that wrote it. It is read back through a live worker of that
host, in chunks over the channel layer, so a web process on any host serves any recording, in both modes.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass

from django.conf import settings
from django.db.models import QuerySet

from .audit import Actor, audit
from .exceptions import WorkerUnavailable, recording_not_found
from .models import AuditEvent, Recording, Worker
from .runtime.asciicast import digest
from .sessions import session_get_for
from .remote import client as worker_client
from .remote import protocol
from .remote.here import current_worker

logger = logging.getLogger(__name__)

CONTENT_TYPE = "application/x-asciicast"


@dataclass(frozen=True)
class Playback:
    recording: Recording
    chunks: AsyncIterator[bytes]  # the whole file, in order
    filename: str


def recording_open(*, actor: Actor, terminal_id) -> Playback:
    """A terminal's recording, for its owner and staff; another user's terminal is unknown, as everywhere. Audited
    (who read which recording) once its first part is in hand, so a refusal is an error, not a cut file."""
    record = session_get_for(user=actor.user, terminal_id=terminal_id)
    recording = Recording.objects.filter(terminal=record).first()
    if recording is None:
        raise recording_not_found(f"Terminal {record.id} is not recorded. Create terminals with \"record\": true, or "
                                  "turn recording on for every terminal (TERMINALS_RECORD_ALL)",
                                  {"terminalId": str(record.id)})
    if recording.deleted is not None:
        raise recording_not_found(f"The recording of terminal {record.id} was deleted by the retention sweep on "
                                  f"{recording.deleted:%Y-%m-%d}", {"terminalId": str(record.id)})
    channel = _reading_channel(record, recording.host)
    first = _read(channel, recording.path, 0)
    audit(actor, "recording", terminal_id=record.id, host=recording.host, sha256=recording.sha256)
    return Playback(recording, _chunks(channel, recording.path, first), f"terminal-{record.id}.cast")


def _reading_channel(record, host: str) -> str:
    """A live worker of the host that keeps the file: the terminal's own while it lives, else another one there."""
    if settings.TERMINALS["EMBEDDED_WORKER"]:
        worker = current_worker()
        if worker is not None and worker.hostname == host:
            return worker.channel
    else:
        if record.worker is not None and record.worker.hostname == host and record.worker.is_live():
            return record.worker.channel
        # An embedded server's worker is reachable only inside its own process (its in-memory channel layer).
        channel = (Worker.objects.live().filter(hostname=host).exclude(channel__contains=".inmemory!")
                   .order_by("-last_seen").values_list("channel", flat=True).first())
        if channel:
            return channel
    raise WorkerUnavailable(f"The recording is kept on host {host!r}, where no terminal worker runs now; start a "
                            "worker there and try again", {"host": host})


def _read(channel: str, path: str, offset: int) -> bytes:
    return worker_client.request_sync(channel, protocol.RECORDING_READ, path=path, offset=offset,
                                      length=protocol.RECORDING_CHUNK_BYTES)["data"]


async def _chunks(channel: str, path: str, first: bytes) -> AsyncIterator[bytes]:
    data, offset = first, 0
    while True:
        if data:
            yield data
            offset += len(data)
        if len(data) < protocol.RECORDING_CHUNK_BYTES:
            return
        data = (await worker_client.request(channel, protocol.RECORDING_READ, path=path, offset=offset,
                                            length=protocol.RECORDING_CHUNK_BYTES))["data"]


def recordings_visible_to(user) -> QuerySet[Recording]:
    """Recordings of the terminals the user may see (staff: all), newest first."""
    recordings = Recording.objects.select_related("terminal__owner").order_by("-started")
    return recordings if user.is_staff else recordings.filter(terminal__owner=user)


# Checking the files against the audit trail


def verify_files(hostname: str | None = None) -> tuple[int, list[str]]:
    """Checks every sealed recording of this host against the size and SHA-256 the audit trail holds for it:
    (files checked, problems). A file deleted without an audited deletion, or changed, is a problem; files of
    other hosts are checked by running this there."""
    hostname = hostname or socket.gethostname()
    deleted = set(AuditEvent.objects.filter(action="recording_delete").values_list("terminal_id", flat=True))
    checked, problems = 0, []
    for event in AuditEvent.objects.filter(action="recording_seal").order_by("id").iterator():
        details = event.details
        if details.get("host") != hostname or event.terminal_id in deleted:
            continue
        path = details.get("path", "")
        try:
            size, sha256 = digest(path)
        except FileNotFoundError:
            problems.append(f"recording of terminal {event.terminal_id} is missing: {path} (audit event {event.id} "
                            "sealed it, and no deletion is on record)")
            continue
        except OSError as error:
            problems.append(f"recording of terminal {event.terminal_id} cannot be read: {path}: {error.strerror}")
            continue
        checked += 1
        if (size, sha256) != (details.get("size"), details.get("sha256")):
            problems.append(f"recording of terminal {event.terminal_id} was changed: {path} is {size} bytes with "
                            f"SHA-256 {sha256[:16]}..., audit event {event.id} sealed {details.get('size')} bytes "
                            f"with {str(details.get('sha256'))[:16]}...")
    return checked, problems

