"""A flag to wait on, like asyncio.Event, that costs no event until something waits on it."""

from __future__ import annotations

import asyncio


class Flag:
    """asyncio.Event's set, clear, is_set and wait. An Event holds a deque of waiters (about 760 bytes); a terminal
    keeps several flags and one per command in its history (up to 1000), and most are never waited on, so the
    Event is made by the first wait. Bench figure 6 counts the service's memory per idle terminal."""

    __slots__ = ("_set", "_event")

    def __init__(self) -> None:
        self._set = False
        self._event: asyncio.Event | None = None

    def is_set(self) -> bool:
        return self._set

    def set(self) -> None:
        self._set = True
        if self._event is not None:
            self._event.set()

    def clear(self) -> None:
        self._set = False
        if self._event is not None:
            self._event.clear()

    async def wait(self) -> bool:
        if self._set:
            return True
        if self._event is None:
            self._event = asyncio.Event()
        return await self._event.wait()
