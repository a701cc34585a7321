"""What the machine must give the tests, checked once before any runs, so a missing piece is named with what to
do instead of surfacing as an obscure failure in the middle of the run.

The tests exercise the real separation of users (a Unix account per user, made with useradd, which only root can
do) and the real confinement of terminals (control groups the service writes to): without them those features are
missing, and a skip would hide that, so the run stops with the list instead.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")


def missing() -> list[str]:
    """Each missing prerequisite, with what to do about it; empty when the machine has everything."""
    problems = []
    if os.geteuid() != 0:
        problems.append("root: the tests make a Unix account per user and confine terminals in control groups, "
                        "which only root can do; run them as root (in a container or a throwaway VM)")
    if shutil.which("useradd") is None and not Path("/usr/sbin/useradd").exists():
        problems.append("useradd: install it (apt-get install passwd)")
    if os.geteuid() == 0 and not _cgroups_writable():  # (as another account, root is the first thing to fix)
        problems.append(f"writable control groups: {CGROUP_ROOT} must be a writable cgroup2 (or v1) mount; "
                        "mount it read-write (in a container: --cgroupns=private with a writable /sys/fs/cgroup)")
    return problems


def _cgroups_writable() -> bool:
    for probe in (CGROUP_ROOT / "cgroup.subtree_control", CGROUP_ROOT / "pids" / "cgroup.procs"):
        if probe.exists():
            return os.access(probe, os.W_OK)
    return False


def report(problems: list[str]) -> str:
    return "The tests need what this machine lacks:\n" + "\n".join(f"  - {problem}" for problem in problems)


if __name__ == "__main__":
    found = missing()
    print(report(found) if found else "every prerequisite is here")
    raise SystemExit(1 if found else 0)
