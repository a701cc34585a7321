"""The command tracker's reading of markers, in the orders a busy machine delivers them (terminals/runtime/commands.py)."""

from __future__ import annotations

import asyncio

from terminals.runtime.commands import COMPLETED, RUNNING, CommandTracker
from terminals.runtime.markers import Marker


def signed(tracker: CommandTracker, kind: str, data: str) -> Marker:
    return Marker(tracker.secret, kind, data, b"")


def run_in_loop(body):
    async def scenario():
        return body()

    return asyncio.run(scenario())


def test_a_late_prompt_of_the_previous_command_never_ends_the_next_one():
    """Three commands sent back to back, each as soon as the one before ended (its E marker), while every prompt
    marker arrives late: a prompt that belongs before a command must not end the command after it. Before, the
    stale prompt marked the shell as at a prompt, the third command counted none as stale, and the second
    command's prompt ended it at once with exit code 0."""

    def body():
        tracker = CommandTracker()
        offset = 0

        def mark(kind, data):
            nonlocal offset
            offset += 10
            tracker.on_marker(signed(tracker, kind, data), offset)

        mark("P", "0")  # the first prompt: the shell is ready
        first, _ = tracker.begin("kill -0 1")
        mark("B", f"{first.id}")
        mark("E", f"{first.id};1")
        second, _ = tracker.begin("cat /secret")  # sent before the first command's prompt marker arrived
        mark("P", "0")  # the first command's prompt, late: stale for the second
        mark("B", f"{second.id}")
        mark("E", f"{second.id};1")
        third, _ = tracker.begin("ls /private")  # sent before the second command's prompt marker arrived
        mark("P", "0")  # the second command's prompt, late
        assert third.status == RUNNING, "a prompt from before the command ended it"
        mark("B", f"{third.id}")
        mark("E", f"{third.id};2")
        mark("P", "0")
        return first, second, third

    first, second, third = run_in_loop(body)
    assert [(record.status, record.exit_code) for record in (first, second, third)] == [
        (COMPLETED, 1), (COMPLETED, 1), (COMPLETED, 2)]


def test_a_prompt_without_the_end_marker_still_ends_the_command():
    """Ctrl-C abandons the rest of the typed line: the prompt comes back without the E marker, and ends it."""

    def body():
        tracker = CommandTracker()
        tracker.on_marker(signed(tracker, "P", "0"), 5)
        record, _ = tracker.begin("sleep 100")
        tracker.on_marker(signed(tracker, "B", record.id), 10)
        tracker.on_marker(signed(tracker, "P", "130"), 20)
        return record

    record = run_in_loop(body)
    assert (record.status, record.exit_code, record.signal) == (COMPLETED, 130, "SIGINT")


def test_a_flag_wakes_its_waiters_when_set_and_answers_at_once_while_set():
    """The flags of a terminal and its commands (runtime/flag.py) wait like asyncio.Event, making one only when
    something waits: set wakes every waiter, clear makes the next wait wait again."""
    from terminals.runtime.flag import Flag

    async def scenario():
        flag = Flag()
        first, second = asyncio.ensure_future(flag.wait()), asyncio.ensure_future(flag.wait())
        await asyncio.sleep(0)
        assert not first.done() and not second.done() and not flag.is_set()
        flag.set()
        assert await asyncio.wait_for(asyncio.gather(first, second), 1) == [True, True]
        assert await asyncio.wait_for(flag.wait(), 0.01) is True  # already set: no waiting
        flag.clear()
        again = asyncio.ensure_future(flag.wait())
        await asyncio.sleep(0)
        assert not again.done() and not flag.is_set()
        flag.set()
        assert await asyncio.wait_for(again, 1) is True

    asyncio.run(scenario())
