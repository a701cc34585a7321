"""The keeper: a small process that outlives the worker it runs, so that terminals outlive the worker too.

    python -m terminals.runtime.keeper [--handover-seconds N] -- <the worker's command line>

It starts the worker as its child, with one end of a socket pair (TERMINALS_KEEPER_FD). For each terminal the
worker starts, the worker hands the keeper a copy of its PTY master, its output ring (output_ring.py) and its
pidfd (keeper_link.py), and the keeper holds them until the worker releases the terminal. So when the worker goes:
- its terminals' shells keep their PTY (a shell is hung up only when the last copy of its master closes), and what
  they print meanwhile waits in the kernel (a program blocks once the PTY is full; nothing is dropped);
- every byte the worker kept is in the rings, which the keeper holds;
- the keeper is a subreaper (PR_SET_CHILD_SUBREAPER), so the terminals' processes become its children and it
  collects their exit statuses, which it reports to the next worker.
Then it starts the worker again, which adopts every terminal the keeper holds (adoption.py): same ids, pids and
byte offsets.

Signals to the keeper: SIGHUP restarts the worker in place. First a rehearsal: the worker's command runs once more
(TERMINALS_KEEPER_REHEARSAL set), with the code now on disk, is handed every terminal held and checks that it can
take each back, touching none (keeping.rehearse_if_asked). Only if it can does the worker get SIGUSR1: it hands its
terminals over and exits, and the rehearsal, loaded and waiting, goes on as the next worker and adopts them (no
process start in the gap). If it cannot (a new version that reads no older state, code that does not start), the
running worker keeps its terminals and the keeper logs why. A worker that has not handed over within
--handover-seconds (30) is killed: its terminals are taken back as after a crash. SIGTERM and SIGINT stop the worker as they
always did (it ends its terminals) and then the keeper. A worker that dies (SIGKILL, the OOM killer) is started
again, at once the first time, then after a growing pause if it keeps dying. Plain Python, no Django: it changes
rarely, so it need not restart when the service is upgraded.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import os
import selectors
import signal
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass

from .keeper_protocol import FD_VARIABLE, ID_VARIABLE, PID_VARIABLE, describe, receive, send
from .keeper_rehearsal import HANDOVER_SECONDS, Rehearsal, Rehearsing

logger = logging.getLogger("terminals.keeper")

PR_SET_CHILD_SUBREAPER = 36
RESTART_PAUSES = (0.0, 0.5, 1.0, 2.0, 5.0, 10.0)  # after consecutive deaths of the worker
STABLE_SECONDS = 30.0  # a worker that ran this long without dying resets the pauses


@dataclass
class Held:
    """One terminal the keeper holds for its worker."""

    pid: int
    fds: list[int]
    returncode: int | None = None  # known once the process ended (reaped here, or told by the worker)


class Keeper(Rehearsing):
    def __init__(self, argv: list[str], handover_seconds: float = HANDOVER_SECONDS) -> None:
        self.argv = argv
        self.handover_seconds = handover_seconds
        self.id = uuid.uuid4().hex
        self.held: dict[str, Held] = {}
        self.listeners: dict[str, int] = {}  # listening sockets (an embedded server's), held across restarts too
        self.worker: subprocess.Popen | None = None
        self.link: socket.socket | None = None
        self.selector = selectors.DefaultSelector()
        self.stopping = False  # SIGTERM or SIGINT came: the worker ends its terminals, then the keeper exits
        self.done = False
        self.handing_over = False  # SIGHUP asked the worker to hand over: its exit is no death
        self.rehearsal: Rehearsal | None = None  # SIGHUP came: the code on disk is checked before the hand-over
        self.handover_deadline = 0.0  # when a worker told to hand over is killed if it has not exited
        self.deaths = 0  # consecutive deaths of the worker
        self.started_at = 0.0
        self.exit_code = 0

    # The worker

    def spawn(self, **environment: str) -> tuple[subprocess.Popen, socket.socket]:
        """The worker's command started with the other end of a new link (and environment); the keeper's end."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        os.set_inheritable(theirs.fileno(), True)
        env = {**os.environ, FD_VARIABLE: str(theirs.fileno()), PID_VARIABLE: str(os.getpid()), ID_VARIABLE: self.id,
               **environment}
        # A process group of its own: Ctrl-C at a terminal reaches the keeper alone, which passes it on once.
        process = subprocess.Popen(self.argv, env=env, pass_fds=(theirs.fileno(),), process_group=0)
        theirs.close()
        return process, ours

    def start_worker(self) -> None:
        self.worker, self.link = self.spawn()
        self.selector.register(self.link, selectors.EVENT_READ, self.on_link)
        self.started_at = time.monotonic()
        logger.info("keeper %d: worker %d started, %d terminals held for it", os.getpid(), self.worker.pid,
                    len(self.held))

    def worker_ended(self, returncode: int) -> None:
        if self.link is not None:
            self.drain_link()
            self.selector.unregister(self.link)
            self.link.close()
            self.link = None
        if self.stopping:
            self.exit_code = returncode if returncode >= 0 else 128 - returncode
            self.worker, self.done = None, True
            return
        if returncode > 0 and not self.held and time.monotonic() - self.started_at < STABLE_SECONDS:
            # It failed as it started (a setting missing, the database unreachable) and holds nothing: say so the
            # way a worker without a keeper would, and let the service manager decide. (Holding terminals, the
            # keeper never gives up on them.)
            logger.error("keeper %d: worker %d exited with status %d as it started, holding no terminal; stopping",
                         os.getpid(), self.worker.pid, returncode)
            self.exit_code, self.worker, self.done = returncode, None, True
            return
        if time.monotonic() - self.started_at >= STABLE_SECONDS:
            self.deaths = 0
        pause = 0.0
        if self.handing_over:  # it exited because SIGHUP asked it to: no death, no pause
            logger.info("keeper %d: worker %d handed its terminals over (%s); %d held for the next",
                        os.getpid(), self.worker.pid, describe(returncode), len(self.held))
            rehearsal = self.rehearsal
            if rehearsal is not None and rehearsal.passed and rehearsal.link is not None \
                    and rehearsal.process.returncode is None:
                self.handing_over, self.worker = False, None
                self.promote()
                return
        else:
            pause = RESTART_PAUSES[min(self.deaths, len(RESTART_PAUSES) - 1)]
            self.deaths += 1
            logger.warning("keeper %d: worker %d ended (%s); starting it again in %.1f s with %d terminals held",
                           os.getpid(), self.worker.pid, describe(returncode), pause, len(self.held))
        self.handing_over = False
        self.worker = None
        if pause:
            time.sleep(pause)
        self.start_worker()

    def drain_link(self) -> None:
        """Takes the messages the worker sent before it ended (its last terminals and releases)."""
        self.link.setblocking(False)
        try:
            while self.on_message() is not False:
                pass
        except BlockingIOError:
            pass
        finally:
            self.link.setblocking(True)

    # Messages from the worker

    def on_link(self) -> None:
        if self.link is not None and self.on_message() is False:
            self.selector.unregister(self.link)  # the worker closed its end; its exit follows
            self.link.close()
            self.link = None

    def on_message(self) -> bool:
        message, fds = receive(self.link)
        if message is None:
            return False
        operation = message.get("op")
        if operation == "hold":
            self.forget(message["id"])
            self.held[message["id"]] = Held(pid=message["pid"], fds=fds)
            return True
        if operation == "listen" and fds:
            previous = self.listeners.pop(message["name"], None)
            if previous is not None:
                os.close(previous)
            self.listeners[message["name"]] = fds[0]
            return True
        for fd in fds:  # no other message carries any
            os.close(fd)
        held = self.held.get(message.get("id", ""))
        if operation == "ended" and held is not None:
            held.returncode = message["returncode"]
        elif operation == "release":
            self.forget(message["id"])
        elif operation == "adopt":
            self.hand_over(self.link)
        return True

    def hand_over(self, link: socket.socket) -> None:
        """Sends every terminal held over link, one message each (a message carries a few fds at most)."""
        for terminal_id, held in list(self.held.items()):
            send(link, {"op": "terminal", "id": terminal_id, "pid": held.pid, "returncode": held.returncode},
                 held.fds)
        for name, fd in self.listeners.items():
            send(link, {"op": "listener", "name": name}, [fd])
        send(link, {"op": "adopted", "count": len(self.held)})

    def forget(self, terminal_id: str) -> None:
        held = self.held.pop(terminal_id, None)
        if held is not None:
            for fd in held.fds:
                os.close(fd)

    # Children: the worker, and the terminals' processes whose worker went (this is their subreaper)

    def reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            returncode = os.waitstatus_to_exitcode(status)
            if self.worker is not None and pid == self.worker.pid:
                self.worker.returncode = returncode
                self.worker_ended(returncode)
                continue
            if self.rehearsal is not None and pid == self.rehearsal.process.pid:
                self.rehearsal.process.returncode = returncode
                self.rehearsal_ended(returncode)
                continue
            for terminal_id, held in self.held.items():
                if held.pid == pid:
                    held.returncode = returncode
                    if self.link is not None:
                        try:
                            send(self.link, {"op": "exited", "id": terminal_id, "returncode": returncode})
                        except OSError:
                            pass  # the worker is going; the next one learns it at adoption
            # Anything else was a process a terminal left behind (its parent gone): reaped, nothing to tell.

    # Running

    def run(self) -> int:
        become_subreaper()
        wakeup_read, wakeup_write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        signal.set_wakeup_fd(wakeup_write)
        for signum in (signal.SIGCHLD, signal.SIGHUP, signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: None)  # handled through the wakeup fd, in the loop
        self.selector.register(wakeup_read, selectors.EVENT_READ, None)
        self.start_worker()
        while not self.done:
            for key, _ in self.selector.select(self.enforce_deadlines()):
                if self.selector.get_map().get(key.fd) is not key:
                    continue  # closed by an earlier event of this batch (an exit reaped), or its fd reused since
                try:
                    if key.data is None:
                        self.on_signals(os.read(wakeup_read, 512))
                    else:
                        key.data()
                except Exception:  # noqa: BLE001 - the keeper's death would end every terminal: log it, go on
                    logger.exception("keeper %d: handling an event failed; going on", os.getpid())
        for terminal_id in list(self.held):
            self.forget(terminal_id)
        for fd in self.listeners.values():
            os.close(fd)
        return self.exit_code

    def enforce_deadlines(self) -> float | None:
        """Kills a rehearsal that has not answered in time, and a worker that has not handed over in time; the
        seconds until the next such deadline (None: none)."""
        now, timeout = time.monotonic(), None
        rehearsal = self.rehearsal
        if rehearsal is not None and not rehearsal.passed and rehearsal.process.returncode is None:
            timeout = max(0.0, rehearsal.deadline - now)
            if not timeout:
                rehearsal.process.kill()  # reaped (SIGCHLD), and reported as too slow
        if self.handing_over and self.worker is not None and self.worker.returncode is None \
                and self.handover_deadline < float("inf"):
            left = max(0.0, self.handover_deadline - now)
            timeout = left if timeout is None else min(timeout, left)
            if not left:
                logger.error("keeper %d: worker %d has not handed over within %.0f s: killed; its terminals are "
                             "taken back as after a crash", os.getpid(), self.worker.pid, self.handover_seconds)
                self.worker.kill()
                self.handover_deadline = float("inf")
        return timeout

    def on_signals(self, signals: bytes) -> None:
        for signum in signals:
            if signum == signal.SIGCHLD:
                self.reap()
            elif signum == signal.SIGHUP and self.worker is not None and not self.stopping:
                if self.rehearsal is not None or self.handing_over:
                    logger.info("keeper %d: SIGHUP: a restart is already under way", os.getpid())
                else:
                    self.rehearse()
            elif signum in (signal.SIGTERM, signal.SIGINT) and not self.stopping:
                self.stopping = True
                if self.rehearsal is not None and self.rehearsal.process.returncode is None:
                    self.rehearsal.process.kill()
                if self.worker is not None:
                    self.worker.send_signal(signum)


def become_subreaper() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))


def main(argv: list[str]) -> int:
    usage = "usage: python -m terminals.runtime.keeper [--handover-seconds N] -- <worker command line>"
    if "--" not in argv or argv.index("--") == len(argv) - 1:
        print(usage, file=sys.stderr)
        return 2
    options, command = argv[: argv.index("--")], argv[argv.index("--") + 1 :]
    handover_seconds = HANDOVER_SECONDS
    if options:
        if len(options) != 2 or options[0] != "--handover-seconds":
            print(usage, file=sys.stderr)
            return 2
        handover_seconds = float(options[1])
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return Keeper(command, handover_seconds).run()


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except OSError as error:
        if error.errno == errno.EINVAL:
            print("this kernel has no PR_SET_CHILD_SUBREAPER; run the worker without the keeper", file=sys.stderr)
        raise
