"""The keeper's rehearsal of a restart (SIGHUP): before the running worker lets its terminals go, the worker's
command runs once more, with the code now on disk, and checks that it can take every terminal back
(keeping.rehearse_if_asked). If it can, the running worker hands over, and the rehearsal, loaded and waiting, goes
on as the next worker; if it cannot, nothing restarts, and the keeper says why."""

from __future__ import annotations

import logging
import os
import selectors
import signal
import socket
import subprocess
import time
from dataclasses import dataclass

from .keeper_protocol import HANDOVER_SIGNAL, MESSAGE_BYTES, REHEARSAL_VARIABLE, describe, receive, send

logger = logging.getLogger("terminals.keeper")

REHEARSAL_SECONDS = 120.0  # a rehearsal that has not answered by then failed
HANDOVER_SECONDS = 30.0  # a worker told to hand over that has not exited by then is killed (--handover-seconds)


@dataclass
class Rehearsal:
    """The worker's command run once to check that the code now on disk can take back every terminal held."""

    process: subprocess.Popen
    link: socket.socket | None
    deadline: float
    answer: dict | None = None  # its {"op": "rehearsed", ...} message
    passed: bool = False  # it can take every terminal back: it waits to go on as the next worker


class Rehearsing:
    """The Keeper's steps of a rehearsal (keeper.py holds the worker, its link and the terminals)."""

    def rehearse(self) -> None:
        process, link = self.spawn(**{REHEARSAL_VARIABLE: "1"})
        self.rehearsal = Rehearsal(process, link, time.monotonic() + REHEARSAL_SECONDS)
        self.selector.register(link, selectors.EVENT_READ, self.on_rehearsal_message)
        logger.info("keeper %d: SIGHUP: process %d checks that the code on disk can take back the %d terminals "
                    "held", os.getpid(), process.pid, len(self.held))

    def rehearsal_passed(self, rehearsal: Rehearsal) -> None:
        rehearsal.passed = True
        if self.worker is None or self.stopping:
            return
        logger.info("keeper %d: process %d, running the code on disk, can take back the %d terminals held: worker "
                    "%d hands them over to it", os.getpid(), rehearsal.process.pid, rehearsal.answer.get("checked", 0),
                    self.worker.pid)
        self.handing_over = True
        self.handover_deadline = time.monotonic() + self.handover_seconds
        self.worker.send_signal(HANDOVER_SIGNAL)

    def promote(self) -> None:
        """The rehearsal that passed goes on as the worker: it adopts the terminals as any new worker does."""
        rehearsal, self.rehearsal = self.rehearsal, None
        self.worker, self.link = rehearsal.process, rehearsal.link
        self.selector.modify(self.link, selectors.EVENT_READ, self.on_link)
        self.started_at = time.monotonic()
        logger.info("keeper %d: worker %d takes over the %d terminals held", os.getpid(), self.worker.pid,
                    len(self.held))
        try:
            send(self.link, {"op": "go"})
        except OSError:
            pass  # it went meanwhile: its exit is reaped as the worker's, and the worker started again

    def on_rehearsal_message(self) -> bool:
        """Takes one message of the rehearsal's; False when there was none to take."""
        rehearsal = self.rehearsal
        if rehearsal is None or rehearsal.link is None:
            return False
        try:
            message, fds = receive(rehearsal.link)
        except BlockingIOError:
            return False
        for fd in fds:
            os.close(fd)
        if message is None:
            self.selector.unregister(rehearsal.link)
            rehearsal.link.close()
            rehearsal.link = None
            return False
        if message.get("op") == "adopt":
            try:
                self.hand_over(rehearsal.link)
            except OSError:
                pass  # it went; its exit says how
        elif message.get("op") == "rehearsed":
            rehearsal.answer = message
            if not message.get("failed"):
                self.rehearsal_passed(rehearsal)
        return True

    def rehearsal_ended(self, returncode: int) -> None:
        rehearsal = self.rehearsal
        if rehearsal.link is not None:  # its last messages
            rehearsal.link.setblocking(False)
            while rehearsal.link is not None and self.on_rehearsal_message():
                pass
            if rehearsal.link is not None:
                self.selector.unregister(rehearsal.link)
                rehearsal.link.close()
        self.rehearsal = None
        answer = rehearsal.answer
        if rehearsal.passed:  # the worker, handing over, is started again from the code on disk when it exits
            logger.warning("keeper %d: process %d, which was to take over, ended (%s) first", os.getpid(),
                           rehearsal.process.pid, describe(returncode))
            return
        if answer is not None and answer.get("failed"):
            reasons = "; ".join(answer.get("reasons", []))
            why = f"it cannot take back {answer['failed']} of the {answer.get('checked')} terminals held ({reasons})"
        elif returncode == -signal.SIGKILL and time.monotonic() >= rehearsal.deadline:
            why = f"it did not answer within {REHEARSAL_SECONDS:.0f} s"
        else:
            why = f"it ended ({describe(returncode)}) before answering; its output above says why"
        pid = self.worker.pid if self.worker is not None else None
        logger.error("keeper %d: SIGHUP refused: the worker's command, run with the code now on disk, cannot take "
                     "over: %s. Worker %s keeps running its terminals; fix the code and reload again.",
                     os.getpid(), why, pid)
        if self.link is not None:
            try:
                send(self.link, {"op": "restart_refused", "reason": why[: MESSAGE_BYTES // 2]})
            except OSError:
                pass
