"""Judging another worker silent by what this worker saw at its own beats (terminals/worker/liveness.py)."""

from datetime import datetime, timedelta, timezone

from terminals.worker.liveness import SILENT_BEATS, UNKNOWN_INTERVAL_SECONDS, Silence

BEAT = datetime(2026, 1, 1, tzinfo=timezone.utc)
SECOND = timedelta(seconds=1)


def test_a_heartbeat_unchanged_over_three_of_the_judges_beats_is_silent_and_one_that_moves_is_not():
    silence = Silence(interval_seconds=UNKNOWN_INTERVAL_SECONDS)  # judge and judged beat alike
    for _ in range(SILENT_BEATS):
        silence.observe({"gone": BEAT, "beating": BEAT})
        assert silence.silent() == {}
    silence.observe({"gone": BEAT, "beating": BEAT + SECOND})
    assert silence.silent() == {"gone": BEAT}


def test_silence_is_counted_in_the_silent_workers_intervals_not_the_judges():
    """A judge beating every 0.3 s does not find a worker that beats every 5 s silent after three of its beats: it
    takes 50 of them (15 s); seen beating every second, the other is silent after ten."""
    silence = Silence(interval_seconds=0.3)
    for _ in range(50):  # the first sight, then 49 of the judge's beats with it unchanged
        silence.observe({"slow": BEAT})
    assert silence.silent() == {}
    silence.observe({"slow": BEAT})
    assert silence.silent() == {"slow": BEAT}
    silence = Silence(interval_seconds=0.3)
    silence.observe({"other": BEAT})
    silence.observe({"other": BEAT + SECOND})
    for _ in range(9):
        silence.observe({"other": BEAT + SECOND})
    assert silence.silent() == {}
    silence.observe({"other": BEAT + SECOND})
    assert silence.silent() == {"other": BEAT + SECOND}


def test_a_failed_beat_of_the_judge_forgets_what_it_saw_so_an_outage_makes_nobody_silent():
    """The database away: the judge's beats fail too, and after it every heartbeat is old but none was seen
    unchanged over beats the database took."""
    silence = Silence()
    for _ in range(SILENT_BEATS):
        silence.observe({"other": BEAT})
    silence.interrupted()
    silence.observe({"other": BEAT})
    assert silence.silent() == {}
    for _ in range(SILENT_BEATS):
        silence.observe({"other": BEAT})
    assert silence.silent() == {"other": BEAT}


def test_a_worker_judged_gone_or_stopped_is_no_longer_watched():
    silence = Silence()
    for _ in range(SILENT_BEATS + 1):
        silence.observe({"other": BEAT})
    silence.observe({})
    assert silence.silent() == {}


class Ticks:
    """A judge's clock, moved by hand."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_beats_that_come_faster_than_their_interval_judge_nobody_until_the_time_has_passed():
    """A judge whose beats bunch up (a test calling beat() in a loop saw every worker of the other deployments in
    its database silent, and ended their terminals) finds a worker silent only once SILENT_BEATS of that worker's
    intervals have passed by the judge's clock, however many of its own beats saw it unchanged."""
    ticks = Ticks()
    silence = Silence(interval_seconds=UNKNOWN_INTERVAL_SECONDS, clock=ticks)
    for _ in range(10 * SILENT_BEATS):
        silence.observe({"beating": BEAT})
        ticks.now += 0.01
    assert silence.silent() == {}
    ticks.now = SILENT_BEATS * UNKNOWN_INTERVAL_SECONDS
    silence.observe({"beating": BEAT})
    assert silence.silent() == {"beating": BEAT}
