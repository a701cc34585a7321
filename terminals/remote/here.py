"""The terminal worker inside this web process (the embedded default), as the web side sees it: its id, its host
and its channel. The embedded worker registers itself here, so the web side never imports the worker's code."""

from __future__ import annotations

from typing import Protocol


class HostedWorker(Protocol):
    id: str
    hostname: str
    channel: str


_worker: HostedWorker | None = None


def register(worker: HostedWorker) -> None:
    global _worker
    _worker = worker


def current_worker() -> HostedWorker | None:
    """This process's own worker, or None (a split deployment's web process, or before the first request)."""
    return _worker
