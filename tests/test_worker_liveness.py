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
