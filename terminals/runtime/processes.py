"""Finding and signalling the processes of a terminal's session through /proc."""

from __future__ import annotations

import os
import signal

PROC = "/proc"


def session_members(session_id: int) -> list[int]:
    """Returns the pids of the live (not zombie) processes whose session is session_id."""
    members = []
    for name in os.listdir(PROC):
        if not name.isdigit():
            continue
        fields = _stat_fields(int(name))
        # After the ")" closing the command name: state, ppid, pgrp, session.
        if fields and fields[3] == str(session_id) and fields[0] != "Z":
            members.append(int(name))
    return members


def _stat_fields(pid: int) -> list[str] | None:
    try:
        with open(f"{PROC}/{pid}/stat", "rb") as stat:
            text = stat.read().decode("ascii", "replace")
    except OSError:
        return None
    return text[text.rfind(")") + 2 :].split()


def signal_processes(pids: list[int], signum: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass  # it ended between the scan and the signal


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
