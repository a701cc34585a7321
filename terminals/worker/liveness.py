"""Which other workers this one has seen silent, judged only over the time this worker itself could write its beats.

A worker is alive while its heartbeat row keeps changing. No heartbeat can be written while the database is down,
so a judge that compared heartbeats with the clock found every worker silent the moment the database came back,
and ended every terminal of the deployment (issue 31: a 25 s PostgreSQL restart). Here a worker judges another
only by what it saw of that one's heartbeat at its own successful beats: a heartbeat unchanged across SILENT_BEATS
of them in a row has not been written for at least SILENT_BEATS heartbeat intervals during which the database
took this worker's writes. A failed beat of its own forgets everything seen: nothing is learnt across a gap.

So a database outage delays every beat alike and makes nobody silent; a jump of the database's clock changes
nothing (a heartbeat is compared with itself, never with a clock); a judge that was paused saw nothing meanwhile.
"""

from __future__ import annotations

from datetime import datetime

# Heartbeat intervals of silence that make a worker gone: three, as before (Worker.stale_before).
SILENT_BEATS = 3


class Silence:
    def __init__(self) -> None:
        self._seen: dict[str, tuple[datetime, int]] = {}  # worker id: (its heartbeat, this worker's beats since)

    def observe(self, heartbeats: dict[str, datetime]) -> None:
        """At each successful beat of this worker: the heartbeat of every other worker not stopped or gone."""
        seen = {}
        for worker_id, heartbeat in heartbeats.items():
            previous, beats = self._seen.get(worker_id, (None, -1))
            seen[worker_id] = (heartbeat, beats + 1 if previous == heartbeat else 0)
        self._seen = seen

    def interrupted(self) -> None:
        """This worker could not write its beat: what it saw before says nothing about the time since."""
        self._seen.clear()

    def silent(self) -> dict[str, datetime]:
        """The workers silent for SILENT_BEATS of this worker's beats, with the heartbeat they stopped at."""
        return {worker_id: heartbeat for worker_id, (heartbeat, beats) in self._seen.items() if beats >= SILENT_BEATS}
