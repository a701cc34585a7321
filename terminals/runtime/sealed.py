"""Execute-only copies of shells, so a shell running as another account is non-dumpable.

A process of the same account can read another's memory (/proc/<pid>/mem, ptrace),
environment and open files, unless the other is non-dumpable. Bash, zsh and dash have
no way to make themselves so, but the kernel does it for them: a process that execs a
file its account may not read is marked non-dumpable (fs/exec.c, would_dump), and stays
so until it execs something else. The worker, as root, therefore starts each shell of
another account from a root-owned copy of the shell with mode 0111 in a 0711 directory:
the shell's secret, the markers it signs and its /proc entries are out of reach of the
programs it runs. Programs it starts exec readable files and are ordinary again.

The copy is made again whenever the shell it came from changes (a system upgrade):
each start compares the original's size, modification time and inode with the copy's.
"""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import shutil
import stat
import threading
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger(__name__)

DEFAULT_DIRECTORY = Path("/var/lib/terminals/shells")
DIRECTORY_MODE = 0o711  # others may enter to exec a copy, not list or change the directory
COPY_MODE = 0o111  # execute only: the account running it may not read it, so the kernel makes it non-dumpable


@dataclass(frozen=True)
class _Original:
    size: int
    mtime_ns: int
    inode: int
    device: int

    @classmethod
    def of(cls, path: str) -> _Original:
        info = os.stat(path)
        return cls(info.st_size, info.st_mtime_ns, info.st_ino, info.st_dev)


class SealedShells:
    """Keeps an execute-only copy of each shell that terminals of other accounts run."""

    def __init__(self, directory: Path = DEFAULT_DIRECTORY) -> None:
        self.directory = Path(directory)
        self.problem = ""  # why the last copy could not be made, for /api/health
        self._copied: dict[str, _Original] = {}
        self._lock = threading.Lock()

    def available(self) -> bool:
        """Whether copies can be made here: only root can make a copy another account cannot read."""
        return os.geteuid() == 0

    def copy_of(self, program: str) -> str | None:
        """The path of an up-to-date execute-only copy of program (a path), or None when none can be made."""
        if not self.available():
            return None
        original = os.path.realpath(program)
        # The copy keeps the name it was asked by (sh, not dash; bash as sh behaves differently).
        folder = self.directory / hashlib.sha256(original.encode()).hexdigest()[:16]
        target = folder / Path(program).name
        try:
            with self._lock:
                current = _Original.of(original)
                if self._copied.get(str(target)) != current or not target.exists():
                    self._copy(original, folder, target)
                    self._copied[str(target)] = current
        except OSError as error:
            self.problem = f"cannot copy {original} to {folder}: {error.strerror}"
            logger.warning("shells of other accounts start dumpable: %s", self.problem)
            return None
        self.problem = ""
        return str(target)

    def _copy(self, original: str, folder: Path, target: Path) -> None:
        self.directory.mkdir(mode=DIRECTORY_MODE, parents=True, exist_ok=True)
        folder.mkdir(mode=DIRECTORY_MODE, exist_ok=True)
        for directory in (self.directory, folder):
            _own_by_root(directory, DIRECTORY_MODE)
        closed = _first_closed_to_others(folder)
        if closed is not None:
            raise OSError(errno.EACCES, f"other accounts cannot enter {closed}", str(closed))
        exposed = _first_changeable_by_others(folder)
        if exposed is not None:
            raise OSError(errno.EPERM, f"{exposed} is not root's alone: another account could swap the copies",
                          str(exposed))
        staging = folder / f".{target.name}.{os.getpid()}.{threading.get_ident()}"
        shutil.copyfile(original, staging)
        os.chmod(staging, COPY_MODE)
        os.replace(staging, target)  # a shell starting meanwhile runs the old copy or the new one, whole

    def describe(self) -> dict:
        return {"directory": str(self.directory), "problem": self.problem or None}


def _own_by_root(directory: Path, mode: int) -> None:
    """A directory someone else owns or may write could have its copies swapped for other programs."""
    info = os.lstat(directory)
    if info.st_uid != 0:
        os.chown(directory, 0, 0)
    if info.st_mode & 0o7777 != mode:
        os.chmod(directory, mode)


def _first_closed_to_others(path: Path) -> Path | None:
    """The first directory on the way to path that other accounts may not enter, if any."""
    for directory in [*reversed(path.parents), path]:
        if not os.stat(directory).st_mode & 0o001:
            return directory
    return None


def _first_changeable_by_others(path: Path) -> Path | None:
    """The first directory on the way to path whose entries another account could rename or replace, if any
    (a sticky directory such as /tmp protects root's entries)."""
    for directory in [*reversed(path.parents), path]:
        info = os.stat(directory)
        if info.st_uid != 0 or (info.st_mode & 0o022 and not info.st_mode & stat.S_ISVTX):
            return directory
    return None


SHELLS = SealedShells()


def use_directory(directory: str | os.PathLike) -> None:
    """Where the worker keeps the copies (TERMINALS_SEALED_SHELL_DIR)."""
    SHELLS.directory = Path(directory)
