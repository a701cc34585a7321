"""Finding the processes of a terminal's session through /proc (signals.py sends them signals)."""

from __future__ import annotations

import os
import platform
import signal

PROC = "/proc"


def _live_processes(*, skip_own: bool = False):
    """Yields (pid, stat fields) of every live (not zombie) process; the fields start after the ")" closing
    the command name: state, ppid, pgrp, session, ..."""
    own = os.getpid() if skip_own else None
    for name in os.listdir(PROC):
        if not name.isdigit() or int(name) == own:
            continue
        fields = stat_fields(int(name))
        if fields and fields[0] != "Z":
            yield int(name), fields


def session_members(session_id: int) -> list[int]:
    """Returns the pids of the live (not zombie) processes whose session is session_id."""
    return [pid for pid, fields in _live_processes() if fields[3] == str(session_id)]


def terminal_members(session_id: int, marker: bytes | None) -> list[int]:
    """The live processes a terminal started: its session, and anything carrying its environment marker.

    The marker (TERMINALS_TERMINAL_ID=<id>) is inherited through fork and exec,
    so it finds what left the session too: setsid, nohup and double-forked daemons.
    """
    return [
        pid for pid, fields in _live_processes(skip_own=True)
        if fields[3] == str(session_id) or (marker is not None and carries(pid, marker))
    ]


def marked_processes(variable: str) -> dict[str, list[int]]:
    """The live processes whose environment sets variable, by its value: {value: [pid, ...]}.

    With the terminal marker (TERMINALS_TERMINAL_ID) it finds what every terminal started, whichever process
    started the terminal and whether or not that process still exists. Processes whose environment this process
    may not read (other users') are not seen.
    """
    prefix = b"\0" + variable.encode() + b"="
    found: dict[str, list[int]] = {}
    for pid, _ in _live_processes(skip_own=True):
        try:
            with open(f"{PROC}/{pid}/environ", "rb") as environ:
                text = b"\0" + environ.read()
        except OSError:
            continue
        start = text.find(prefix)  # the first one, as getenv() reads it
        if start < 0:
            continue
        value = text[start + len(prefix) :].split(b"\0", 1)[0].decode("utf-8", "replace")
        found.setdefault(value, []).append(pid)
    return found


def carries(pid: int, marker: bytes) -> bool:
    try:
        with open(f"{PROC}/{pid}/environ", "rb") as environ:
            return (b"\0" + marker + b"\0") in (b"\0" + environ.read())
    except OSError:
        return False


def stat_fields(pid: int) -> list[str] | None:
    try:
        with open(f"{PROC}/{pid}/stat", "rb") as stat:
            text = stat.read().decode("ascii", "replace")
    except OSError:
        return None
    return text[text.rfind(")") + 2 :].split()


def process_space() -> str:
    """Which processes this one can see and signal: the machine's boot and the PID namespace. Two processes with the
    same process space see each other's pids; for any others a pid means nothing (another host, a container)."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as boot:
            boot_id = boot.read().strip()
        return f"{boot_id}/{os.readlink(f'{PROC}/self/ns/pid')}"
    except OSError:
        return ""  # unknown: pids of other workers are then never trusted, only their heartbeats


def process_alive(pid: int) -> bool:
    """Whether pid is a running process: a zombie (dead, waiting for its parent to reap it) is not."""
    fields = stat_fields(pid)
    return fields is not None and fields[0] not in ("Z", "X")


def group_members(group_id: int) -> list[int]:
    """Returns the pids of the live processes in process group group_id."""
    return [pid for pid, fields in _live_processes() if fields[2] == str(group_id)]


# The read(2) system call's number, as /proc/<pid>/syscall shows it.
READ_SYSCALL = {"x86_64": 0, "aarch64": 63, "riscv64": 63, "i686": 3, "armv7l": 3}.get(platform.machine())


def is_reading_terminal(pid: int) -> bool:
    """Whether pid is blocked in read(2) on a terminal: it waits for someone to type."""
    try:
        with open(f"{PROC}/{pid}/syscall") as syscall:
            fields = syscall.read().split()
    except OSError:
        return False
    if len(fields) < 2 or not fields[0].isdigit() or int(fields[0]) != READ_SYSCALL:
        return False
    try:
        target = os.readlink(f"{PROC}/{pid}/fd/{int(fields[1], 16)}")
    except (OSError, ValueError):
        return False
    return target.startswith(("/dev/pts/", "/dev/tty"))


# poll(2), select(2), pselect6(2), ppoll(2): how line editors such as readline wait for a key.
POLL_SYSCALLS = {"x86_64": {7, 23, 270, 271}, "aarch64": {72, 73}}.get(platform.machine(), set())


def is_polling_terminal(pid: int) -> bool:
    """Whether pid waits in poll/select with a terminal as its input: a line editor waiting for keys."""
    try:
        with open(f"{PROC}/{pid}/syscall") as syscall:
            fields = syscall.read().split()
        target = os.readlink(f"{PROC}/{pid}/fd/0")
    except OSError:
        return False
    return bool(fields) and fields[0].isdigit() and int(fields[0]) in POLL_SYSCALLS and target.startswith("/dev/pts/")


def command_line(pid: int) -> str:
    try:
        with open(f"{PROC}/{pid}/cmdline", "rb") as cmdline:
            return cmdline.read().rstrip(b"\0").replace(b"\0", b" ").decode("utf-8", "replace")
    except OSError:
        return ""


def ignores_signal(pid: int, signum: int) -> bool:
    """Whether pid ignores or blocks signum, so sending it would not end the process."""
    masks = {}
    try:
        with open(f"{PROC}/{pid}/status") as status:
            for line in status:
                if line.startswith(("SigBlk:", "SigIgn:")):
                    key, value = line.split(":", 1)
                    masks[key] = int(value.strip(), 16)
    except OSError:
        return False
    bit = 1 << (signum - 1)
    return bool((masks.get("SigIgn", 0) | masks.get("SigBlk", 0)) & bit)


def signal_number(name: str) -> int:
    """Maps "SIGTERM" (or "TERM") to its number; raises ValueError for anything else."""
    upper = name.upper()
    if not upper.startswith("SIG"):
        upper = "SIG" + upper
    try:
        return int(signal.Signals[upper])
    except KeyError:
        raise ValueError(f"unknown signal {name!r}") from None


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"SIG{signum}"

