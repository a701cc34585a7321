"""Whether, on this machine, a program in a terminal can forge its commands' start, end or exit code.

The markers that report a command's start, end and exit code are signed with a
secret only the shell holds (shell.py, commands.py). A program run from that
shell can still get at the secret when:

- it runs as root, or as the service's own account (which can change the service);
- it can read the shell's memory: same account and a dumpable shell (sealed.py
  makes shells of other accounts non-dumpable, which needs a root worker);
- it can type into its own shell with the TIOCSTI ioctl, which the shell then runs
  as if the user had typed it (`echo $__terminals_secret > /tmp/x`). Linux 6.2
  and later turn that off with the sysctl dev.tty.legacy_tiocsti=0; older kernels
  cannot. The service does not change host settings; it reports them.
"""

from __future__ import annotations

from pathlib import Path

from .sealed import SealedShells

LEGACY_TIOCSTI = Path("/proc/sys/dev/tty/legacy_tiocsti")
YAMA_PTRACE_SCOPE = Path("/proc/sys/kernel/yama/ptrace_scope")

ROOT, SERVICE, OTHER = "root", "service", "other"


def keystroke_injection(sysctl: Path = LEGACY_TIOCSTI) -> bool:
    """Whether a program can push keystrokes into its own terminal's input (TIOCSTI)."""
    try:
        return sysctl.read_text().strip() != "0"
    except OSError:
        return True  # kernels before 6.2 have no switch: TIOCSTI always works


def _ptrace_scope() -> int | None:
    try:
        return int(YAMA_PTRACE_SCOPE.read_text())
    except (OSError, ValueError):
        return None  # no Yama: a process may trace any dumpable process of its account


def describe(terminal_account: str, shells: SealedShells, *, tiocsti_sysctl: Path = LEGACY_TIOCSTI) -> dict:
    """terminal_account: ROOT, SERVICE (the worker's own, not root) or OTHER (a separate, unprivileged account)."""
    problems = []
    if terminal_account == ROOT:
        problems.append("terminals run as root, which reads any process's memory: set TERMINALS_RUN_AS to another "
                        "account (per-user, or an account name)")
    elif terminal_account == SERVICE:
        problems.append("terminals run as the service's own account, which can change the service itself: run the "
                        "worker as root and set TERMINALS_RUN_AS")
    elif not shells.available():
        problems.append("the worker is not root, so it cannot make shells non-dumpable")
    elif shells.problem:
        problems.append(f"shells start dumpable: {shells.problem}; set TERMINALS_SEALED_SHELL_DIR to a directory "
                        "root owns and other accounts can enter")
    injection = keystroke_injection(tiocsti_sysctl)
    if injection:
        problems.append("programs can type into their own shell (TIOCSTI), which then runs what they typed: set the "
                        "sysctl dev.tty.legacy_tiocsti=0 (Linux 6.2 or later)")
    return {
        "holds": not problems,
        "terminalAccount": terminal_account,
        "secretDelivery": "pipe",
        "sealedShells": shells.describe(),
        "ptraceScope": _ptrace_scope(),
        "keystrokeInjection": injection,
        "problems": problems,
    }
