"""The one way the runtime sends a signal: to a terminal's own processes, never to the service or anyone else.

Every os.kill / os.killpg of the runtime happens here, and each checks its target first:

- a terminal's first process is signalled through its pidfd, so its pid can never
  stand for another process; before the terminal's session exists it is the only
  process the terminal has, so an early signal goes to it;
- a process group only when its session is the terminal's session, and never
  group 0 (the caller's own), 1 (init), or the service's own group;
- any other process only when, looked at after its pidfd is open (so it is the
  process that gets the signal), it is the caller's to signal (`owned`) and not
  the service's: not pid 0 or 1, not the service process, its ancestors or
  anything in its session (its group, and web processes and workers started
  beside it), and not anything carrying the terminal marker the service itself
  inherited (processes started together with the service, inside a terminal).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from . import processes
from .errors import KillFailed

MARKER_VARIABLE = "TERMINALS_TERMINAL_ID"  # set in every terminal's environment; marks what it started


class SignalRefused(KillFailed):
    """The target is not the terminal's own; nothing was sent."""


@dataclass(frozen=True)
class Service:
    """The processes a signal must never reach, as they stand now."""

    pid: int
    session: int
    group: int
    ancestors: frozenset[int]
    marker: bytes | None  # the terminal marker the service inherited, if it was started inside a terminal

    @classmethod
    def now(cls) -> Service:
        inherited = os.environ.get(MARKER_VARIABLE)
        return cls(pid=os.getpid(), session=os.getsid(0), group=os.getpgrp(), ancestors=frozenset(_ancestors()),
                   marker=f"{MARKER_VARIABLE}={inherited}".encode() if inherited else None)

    def reason_to_spare(self, pid: int) -> str | None:
        """Why pid must not be signalled, or None when nothing speaks against it."""
        if pid <= 1:
            return f"pid {pid} is init, or stands for a whole group of processes"
        if pid == self.pid or pid in self.ancestors:
            return "it is the service or one of its ancestors"
        fields = processes.stat_fields(pid)
        if fields is None:
            return None  # gone: signalling it does nothing
        if int(fields[2]) == self.group or int(fields[3]) == self.session:
            return "it belongs to the service's process group or session"
        if self.marker is not None and processes.carries(pid, self.marker):
            return "it was started together with the service"
        return None


def _ancestors() -> list[int]:
    found, pid = [], os.getppid()
    while pid > 1 and pid not in found:
        found.append(pid)
        fields = processes.stat_fields(pid)
        pid = int(fields[1]) if fields else 0
    return found


def process_exists(pid: int) -> bool:
    """Whether a process pid exists (signal 0 delivers nothing; it only asks)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def signal_first_process(pidfd: int, signum: int) -> None:
    """Signals a terminal's first process through its pidfd (-1: it has ended and been reaped)."""
    if pidfd < 0:
        return
    try:
        signal.pidfd_send_signal(pidfd, signum)
    except ProcessLookupError:
        pass  # it ended meanwhile


def group_session(group: int) -> int | None:
    """The session of process group group, or None when the group has no live member."""
    try:
        # The process whose pid names the group: it is in the group's session, since a process can
        # only change groups within its session and cannot start a session while a group bears its pid.
        return os.getsid(group)
    except ProcessLookupError:
        pass
    for pid in processes.group_members(group):  # the group outlived its leader
        fields = processes.stat_fields(pid)
        if fields is not None:
            return int(fields[3])
    return None


def check_group(group: int, session: int, service: Service | None = None) -> bool:
    """Raises SignalRefused unless group is a process group of session; returns False when the group is gone."""
    service = service or Service.now()
    if group <= 1 or group == service.group:
        raise SignalRefused(f"process group {group} is not the terminal's", processGroup=group)
    if session <= 1 or session == service.session:
        raise SignalRefused("the terminal has no session of its own yet", processGroup=group)
    found = group_session(group)
    if found is None:
        return False
    if found != session:
        raise SignalRefused(f"process group {group} is in another session", processGroup=group)
    return True


def signal_group(group: int, signum: int, *, session: int) -> None:
    """killpg(group, signum), only when group is a process group of the terminal's session (session: its id)."""
    if not check_group(group, session):
        return  # the group ended meanwhile
    try:
        os.killpg(group, signum)
    except ProcessLookupError:
        pass


@dataclass
class Sent:
    signalled: list[int]
    spared: dict[int, str]  # pid: why it was not signalled
    denied: list[int]  # not ours to signal (another account's)


def signal_owned(pids: Iterable[int], signum: int, owned: Callable[[int], bool]) -> Sent:
    """Sends signum to each of pids that owned(pid) holds for and that is not the service's.

    Each pid is pinned with a pidfd before it is looked at, so the process checked is the process signalled
    even if the pid is reused meanwhile.
    """
    service = Service.now()
    sent = Sent(signalled=[], spared={}, denied=[])
    for pid in dict.fromkeys(pids):
        try:
            pidfd = os.pidfd_open(pid) if pid > 1 else -1
        except OSError:
            continue  # it ended
        if pidfd < 0:
            sent.spared[pid] = f"pid {pid} is init, or stands for a whole group of processes"
            continue
        try:
            reason = service.reason_to_spare(pid) or (None if owned(pid) else "it is not the terminal's")
            if reason is not None:
                sent.spared[pid] = reason
                continue
            signal.pidfd_send_signal(pidfd, signum)
            sent.signalled.append(pid)
        except ProcessLookupError:
            continue
        except PermissionError:
            sent.denied.append(pid)
        finally:
            os.close(pidfd)
    return sent


def kill_marked(variable: str, values: Iterable[str], *, settle: float = 2.0) -> list[int]:
    """SIGKILLs every live process whose environment sets variable to one of values; returns their pids.

    Scans again after each round, since a process may fork between a scan and its kill, until none is left or
    settle seconds have passed. The killed are reaped by their parents, or by init once the parents are gone.
    The service's own processes are spared even when they carry one of the values.
    """
    wanted = set(values)
    killed: list[int] = []
    left_alone: set[int] = set()  # spared, or another user's: not ours to end
    deadline = time.monotonic() + settle
    while True:
        pids = [pid for value, members in processes.marked_processes(variable).items() if value in wanted
                for pid in members if pid not in left_alone]
        if not pids or time.monotonic() > deadline:
            return killed
        sent = signal_owned(pids, signal.SIGKILL, lambda pid: _carries_one_of(pid, variable, wanted))
        left_alone.update(sent.spared, sent.denied)
        killed += [pid for pid in sent.signalled if pid not in killed]
        time.sleep(0.01)  # the signal is delivered asynchronously; let the kernel mark them dead


def _carries_one_of(pid: int, variable: str, values: set[str]) -> bool:
    return any(processes.carries(pid, f"{variable}={value}".encode()) for value in values)
