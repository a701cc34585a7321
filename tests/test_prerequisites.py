"""A machine that lacks what the tests need is told so before any test runs, with what to do."""

from __future__ import annotations

import contextlib
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@contextlib.contextmanager
def reachable_by_others(path: Path):
    """Lets other accounts read path and pass through every folder above it (a checkout made in `mktemp -d` is a
    folder of mode 0700), and puts each mode back afterwards."""
    changed = []
    for folder, needed in [(path, stat.S_IROTH | stat.S_IXOTH), *((parent, stat.S_IXOTH) for parent in path.parents)]:
        mode = folder.stat().st_mode
        if mode & needed != needed:
            folder.chmod(mode | needed)
            changed.append((folder, mode))
    try:
        yield
    finally:
        for folder, mode in changed:
            folder.chmod(stat.S_IMODE(mode))


def test_a_run_without_root_stops_at_once_and_says_what_to_do():
    """pytest started as an unprivileged account stops before running anything, naming root and what to do."""
    scratch = tempfile.mkdtemp(prefix="terminals-unprivileged-")
    Path(scratch).chmod(0o777)
    with reachable_by_others(ROOT):
        result = _run_as_nobody(scratch)
    output = result.stdout + result.stderr
    assert result.returncode == 4, output  # pytest's usage error: nothing ran
    assert "The tests need what this machine lacks" in output, output
    assert "root: " in output and "run them as root" in output, output
    assert " passed" not in output and " failed" not in output, output


def _run_as_nobody(scratch: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-m", "pytest",
         "-p", "no:cacheprovider", "-p", "no:cov", "-q", "tests/test_runtime_buffer.py"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
        env={"PATH": "/usr/bin:/bin:/usr/sbin:/sbin", "HOME": scratch, "TMPDIR": scratch,
             "TERMINALS_DATA_DIR": scratch, "TERMINALS_HOMES": scratch},
    )
