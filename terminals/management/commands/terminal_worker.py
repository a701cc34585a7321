"""Runs a terminal worker on its own (split mode): it hosts terminals for every web process on the Redis channel layer."""

import asyncio
import logging
import os
import signal
import sys

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from channels.layers import get_channel_layer
from redis.exceptions import RedisError

from terminals import metrics
from terminals.plumbing.channel_layer import RedisTooOld
from terminals.runtime import keeper_protocol
from terminals.runtime.keeping import rehearse_if_asked
from terminals.environment import separation_warning
from terminals.worker.server import TerminalWorker

logger = logging.getLogger(__name__)

LEFTOVER_SECONDS = 5.0  # what still runs once the worker stopped gets this long to end, then the process exits


async def end_leftovers(seconds: float) -> None:
    """Cancels every task still running once the worker has stopped (its terminals ended or handed over, its
    records written). One that does not end within seconds (a Redis call can swallow its cancellation and wait
    on) does not keep the process alive: under a keeper that would hold up the next worker, and with it every
    terminal's service; the process exits without it."""
    tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
    for task in tasks:
        task.cancel()
    if not tasks:
        return
    _, pending = await asyncio.wait(tasks, timeout=seconds)
    if pending:
        logger.warning("%d tasks did not end within %.0f s of the worker stopping (%s); exiting without them",
                       len(pending), seconds, ", ".join(sorted(task.get_coro().__qualname__ for task in pending)))
        sys.stdout.flush()
        logging.shutdown()
        os._exit(0)


class Command(BaseCommand):
    help = "Host terminals for the web processes (split mode, needs REDIS_URL)."

    def handle(self, *args, **options):
        if not settings.REDIS_URL:
            raise CommandError("terminal_worker needs REDIS_URL: the in-memory channel layer cannot reach other processes")
        if settings.TERMINALS["KEEPER"] and keeper_protocol.FD_VARIABLE not in os.environ:
            # This process becomes the keeper (same pid: the one systemd and operators signal), which runs the
            # worker as its child: the same command line, with the keeper's end of the link.
            os.execv(sys.executable, [sys.executable, "-m", "terminals.runtime.keeper", "--handover-seconds",
                                      str(settings.TERMINALS["KEEPER_HANDOVER_SECONDS"]), "--", sys.executable,
                                      *sys.argv])
        rehearse_if_asked()  # a rehearsal of the keeper's SIGHUP exits here, having checked every terminal
        asyncio.run(self.serve())

    async def serve(self) -> None:
        await self.check_redis()
        worker = TerminalWorker()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, lambda: loop.create_task(worker.shutdown()))
        # From the keeper, on its SIGHUP: leave the terminals running for the next worker.
        loop.add_signal_handler(keeper_protocol.HANDOVER_SIGNAL, lambda: loop.create_task(worker.hand_over()))
        await worker.start()
        metrics.serve_on_separate_bind()
        self.stdout.write(f"terminal worker {worker.id} ready on {worker.channel}", ending="\n")
        warning = separation_warning()
        if warning:
            self.stdout.write(warning, ending="\n")
        self.stdout.flush()
        await worker.stopped.wait()
        await end_leftovers(LEFTOVER_SECONDS)

    @staticmethod
    async def check_redis() -> None:
        """A Redis without BZMPOP (older than 7.0) stops the worker at once, saying so; every request would fail
        otherwise. A Redis that cannot be reached yet is left to the worker, which waits for it as in any outage."""
        try:
            await get_channel_layer().check_server()
        except RedisTooOld as error:
            raise CommandError(str(error)) from None
        except (OSError, RedisError):
            pass
