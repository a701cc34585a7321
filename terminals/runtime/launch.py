"""How a terminal's first process is started on its PTY: a session of its own, with the PTY as its controlling
terminal, and a pipe handed over on a known descriptor."""

from __future__ import annotations

import shlex
import shutil

from .child import SpawnSpec

# The child leads a session of its own and has the PTY as its controlling terminal, so Ctrl-C and job control
# work: a launch shell (confinement.py) is made a session leader by the spawn and takes the PTY by opening it;
# without one, util-linux setsid(1) does both (TIOCSCTTY). Spawning through subprocess (vfork) instead of
# ptyprocess (fork) keeps spawning fast however large the worker grows: 0.3 ms against 8 ms from a 150 MB process.
SETSID = shutil.which("setsid") or "/usr/bin/setsid"
SH = "/bin/sh"
HANDOVER_FD = 9


def spawn_argv(spec: SpawnSpec, handover: bool, terminal: str) -> tuple[list[str], bool]:
    """What to run, and whether the spawn itself makes it a session leader.

    The session comes first, while still the worker's account, so that the last step before the program is the
    launch's drop to the terminal's account: from that moment the kernel treats the process as non-dumpable, and a
    program of that account cannot attach to it before the program runs."""
    # A pipe handed over arrives as stderr (Popen places only 0, 1 and 2); it moves to fd 9,
    # a number every shell can redirect (dash reads no fd above 9), and stderr becomes the PTY.
    launch = list(spec.launch)
    move = f"exec {HANDOVER_FD}<&2 2>&1"
    if launch[:2] == [SH, "-c"]:
        # The launch's own shell, a session leader from its start, takes the PTY as its controlling terminal by
        # opening it (no O_NOCTTY), and moves the pipe first: setsid(1) in front of it took 0.8 ms of every
        # terminal's start, and each shell on the way to the program 0.65 ms (bench/ANALYSIS.md). A shell that
        # cannot open it exits (a redirection of `exec` that fails ends a non-interactive shell).
        steps = [move] if handover else []
        steps.append(f"exec 3<>{shlex.quote(terminal)} 3<&-")
        launch[2] = "; ".join([*steps, launch[2]])
        return [*launch, *spec.argv], True
    if handover:
        launch = [SH, "-c", f'{move}; exec "$@"', "terminal-handover", *launch]
    return [SETSID, "--ctty", *launch, *spec.argv], False
