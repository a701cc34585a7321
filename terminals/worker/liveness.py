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

import math
from collections.abc import Callable
from datetime import datetime

# Heartbeat intervals of silence that make a worker gone: three, as before (Worker.stale_before).
SILENT_BEATS = 3
# The interval assumed for a worker whose heartbeat this one has not yet seen change: the default interval. Workers
# may beat at other intervals than the judge (a host configured apart; test servers sharing a database): silence is
# counted in the silent worker's own intervals, as the steps of its heartbeat show them, never in the judge's alone.
UNKNOWN_INTERVAL_SECONDS = 5.0


class Silence:
    def __init__(self, interval_seconds: float = UNKNOWN_INTERVAL_SECONDS,
                 clock: Callable[[], float] | None = None) -> None:
        self.interval = interval_seconds  # this worker's own: its beats are at least this far apart
        # With a clock (a worker's: time.monotonic), silence must also have lasted SILENT_BEATS of the silent
        # worker's intervals by it: beats that come faster than their interval (a test calling beat() in a loop,
        # with other deployments' workers in the same database) judge nobody early. None: the beats alone count.
        self.clock = clock
        # worker id: (its heartbeat, this worker's beats since, when this worker first saw that heartbeat)
        self._seen: dict[str, tuple[datetime, int, float]] = {}
        # worker id: the step between the last two of its heartbeats this worker saw (at least its interval; the
        # latest, so that one long pause of that worker does not slow its judging for good)
        self._steps: dict[str, float] = {}

    def observe(self, heartbeats: dict[str, datetime]) -> None:
        """At each successful beat of this worker: the heartbeat of every other worker not stopped or gone."""
        seen = {}
        now = self.clock() if self.clock is not None else 0.0
        for worker_id, heartbeat in heartbeats.items():
            previous, beats, since = self._seen.get(worker_id, (None, -1, now))
            if previous is not None and heartbeat > previous:
                self._steps[worker_id] = (heartbeat - previous).total_seconds()
            seen[worker_id] = (heartbeat, beats + 1, since) if previous == heartbeat else (heartbeat, 0, now)
        self._seen = seen
        self._steps = {worker_id: step for worker_id, step in self._steps.items() if worker_id in heartbeats}

    def interrupted(self) -> None:
        """This worker could not write its beat: what it saw before says nothing about the time since."""
        self._seen.clear()

    def silent(self) -> dict[str, datetime]:
        """The workers whose heartbeat stayed the same over SILENT_BEATS of this worker's beats, and over as many
        of them as SILENT_BEATS of the silent worker's own intervals take, with the heartbeat they stopped at."""
        now = self.clock() if self.clock is not None else None
        return {worker_id: heartbeat for worker_id, (heartbeat, beats, since) in self._seen.items()
                if beats >= self.beats_for(worker_id)
                and (now is None or now - since >= SILENT_BEATS * self._interval_of(worker_id))}

    def _interval_of(self, worker_id: str) -> float:
        return self._steps.get(worker_id, UNKNOWN_INTERVAL_SECONDS)

    def beats_for(self, worker_id: str) -> int:
        """How many of this worker's beats make SILENT_BEATS intervals of the other's (its beats are at least its
        interval apart, so this many cover at least that much time)."""
        return max(SILENT_BEATS, math.ceil(SILENT_BEATS * self._interval_of(worker_id) / self.interval - 1e-9))
