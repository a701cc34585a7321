"""terminals_output_bytes_total, the one metric a worker process reports from memory rather than the database."""

from __future__ import annotations

import weakref

from prometheus_client import REGISTRY
from prometheus_client.core import CounterMetricFamily


class _OutputBytes:
    """terminals_output_bytes_total: what the terminals of this process's workers wrote, read when scraped."""

    def describe(self):
        return [CounterMetricFamily("terminals_output_bytes", "", labels=["worker"])]

    def collect(self):
        family = CounterMetricFamily("terminals_output_bytes", "Bytes of output the terminals of this process wrote",
                                     labels=["worker"])
        for worker in list(RUNNING):
            family.add_metric([worker.id], worker.manager.output_bytes())
        yield family


RUNNING: weakref.WeakSet = weakref.WeakSet()  # the workers of this process: each has .id and .manager
_registered = False


def track(worker) -> None:
    """Counts the worker's output in the metric from now on; the collector is registered with the first worker,
    not when this module is imported."""
    global _registered
    if not _registered:
        REGISTRY.register(_OutputBytes())
        _registered = True
    RUNNING.add(worker)
