"""What a terminal may use and who it runs as: per-terminal limits, control groups and a Unix account.

Spawning goes through vfork, so no Python runs in the child between fork and
exec. Everything the child must do first is done by small programs that exec
each other, keeping one pid from the first to the last:

    sh -c 'take the PTY; join the cgroups; ulimit ...; exec "$@"'  ->  chroot (drop to the account)  ->  shell

(The spawn makes sh a session leader and pty.py prepends taking the PTY as its controlling
terminal, while still privileged, so that dropping to the account is the last step before
the shell: see there.)

The cgroups are joined and the limits set while still privileged; chroot then
drops to the terminal's account, so the program cannot undo either.
"""

from __future__ import annotations

import logging
import os
import pwd
import shutil
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import signals

logger = logging.getLogger(__name__)

SH = "/bin/sh"
# coreutils chroot with NEWROOT "/" changes no root: it drops to the account with plain
# setgroups/setgid/setuid, which clear every capability before it execs. setpriv keeps
# them until the exec; a program exec'd with CAP_DAC_OVERRIDE counts as readable to it,
# and the kernel would not make a shell from an execute-only copy non-dumpable (sealed.py).
CHROOT = shutil.which("chroot") or "/usr/sbin/chroot"
PRLIMIT = shutil.which("prlimit") or "/usr/bin/prlimit"
CGROUP_ROOT = Path("/sys/fs/cgroup")
CONTROLLERS = ("pids", "memory", "cpu")
CPU_PERIOD_US = 100_000
KILL_ROUNDS = 200  # a fork bomb refills what one kill round empties; each round kills every member


@dataclass(frozen=True)
class Account:
    """A Unix account terminals run as."""

    name: str
    uid: int
    gid: int
    groups: tuple[int, ...]
    home: str

    @classmethod
    def lookup(cls, name: str) -> Account:
        """Raises KeyError when the account does not exist."""
        entry = pwd.getpwnam(name)
        return cls(name=entry.pw_name, uid=entry.pw_uid, gid=entry.pw_gid,
                   groups=tuple(sorted(set(os.getgrouplist(entry.pw_name, entry.pw_gid)))), home=entry.pw_dir)

    def can_enter(self, path: str) -> bool:
        """Whether this account may enter the directory path (every component searchable)."""
        if self.uid == 0:
            return os.path.isdir(path)
        return self.blocked_at(path) is None

    def blocked_at(self, path: str) -> str | None:
        """The first directory on the way to path that this account may not search (enter); None when none is."""
        current = Path("/")
        for part in [*Path(path).parts[1:], None]:
            try:
                info = current.stat()
            except OSError:
                return str(current)
            if info.st_uid == self.uid:
                allowed = info.st_mode & 0o100
            elif info.st_gid in self.groups or info.st_gid == self.gid:
                allowed = info.st_mode & 0o010
            else:
                allowed = info.st_mode & 0o001
            if not allowed:
                return str(current)
            if part is None:
                return None
            current = current / part
        return None


@dataclass(frozen=True)
class ResourceLimits:
    """Per terminal; None means no limit. Core dumps are always off: they would write the terminal's memory to disk."""

    processes: int | None = 512
    open_files: int | None = 4096
    memory_bytes: int | None = None
    cpu_cores: float | None = None


@dataclass
class Cgroups:
    """Control groups for terminals: a parent per worker, a child per terminal, in v1 or v2 hierarchies.

    controllers maps each usable controller to the directory of this worker's
    parent group in its hierarchy (one directory for all of them under v2).
    """

    controllers: dict[str, Path] = field(default_factory=dict)
    version: int | None = None
    problem: str = ""

    @property
    def directories(self) -> list[Path]:
        return list(dict.fromkeys(self.controllers.values()))

    @classmethod
    def detect(cls, name: str, root: Path = CGROUP_ROOT, wanted=CONTROLLERS) -> Cgroups:
        """Creates this worker's parent groups where the machine lets us; reports what it found."""
        found = cls()
        try:
            v1 = {controller: root / controller for controller in wanted if (root / controller / "cgroup.procs").exists()}
            if v1:
                found.version = 1
                for controller, mount in v1.items():
                    parent = mount / name
                    parent.mkdir(exist_ok=True)
                    found.controllers[controller] = parent
            elif (root / "cgroup.controllers").exists():
                found.version = 2
                available = (root / "cgroup.controllers").read_text().split()
                usable = [controller for controller in wanted if controller in available]
                if usable:
                    _enable(root, usable)
                    parent = root / name
                    parent.mkdir(exist_ok=True)
                    _enable(parent, usable)
                    found.controllers = {controller: parent for controller in usable}
            else:
                found.problem = f"no cgroup hierarchy under {root}"
        except OSError as error:
            found.controllers = {}
            found.problem = f"cgroups are not writable here: {error.strerror} ({error.filename})"
        if found.controllers and found.version == 1 and "cpu" in found.controllers:
            # The worker competes with all terminals together, not with each: a
            # terminal burning every core leaves it half the CPU at worst.
            _write(found.controllers["cpu"] / "cpu.shares", "1024")
        return found

    def create(self, terminal: str, limits: ResourceLimits) -> list[str]:
        """Makes the terminal's groups with their limits; returns the files its process joins by writing its pid."""
        procs = []
        for directory in self.directories:
            group = directory / terminal
            try:
                group.mkdir(exist_ok=True)
            except FileNotFoundError:
                # The worker's own group is gone (a cleanup outside the service removed it while it had no
                # terminal): make it again, as at start, rather than fail every creation from now on.
                self._restore(directory)
                group.mkdir(exist_ok=True)
            procs.append(str(group / "cgroup.procs"))
        for controller, directory in self.controllers.items():
            group = directory / terminal
            if controller == "pids" and limits.processes:
                _write(group / "pids.max", str(limits.processes))
            elif controller == "memory" and limits.memory_bytes:
                _write(group / ("memory.limit_in_bytes" if self.version == 1 else "memory.max"), str(limits.memory_bytes))
                if self.version == 2:
                    _write(group / "memory.swap.max", "0", missing_ok=True)
            elif controller == "cpu" and limits.cpu_cores:
                quota = max(1000, int(limits.cpu_cores * CPU_PERIOD_US))
                if self.version == 1:
                    _write(group / "cpu.cfs_period_us", str(CPU_PERIOD_US))
                    _write(group / "cpu.cfs_quota_us", str(quota))
                else:
                    _write(group / "cpu.max", f"{quota} {CPU_PERIOD_US}")
        return procs

    def _restore(self, directory: Path) -> None:
        directory.mkdir(exist_ok=True)
        controllers = [controller for controller, parent in self.controllers.items() if parent == directory]
        if self.version == 2:
            _enable(directory, controllers)
        elif "cpu" in controllers:
            _write(directory / "cpu.shares", "1024")

    def members(self, terminal: str) -> list[int]:
        pids: set[int] = set()
        for directory in self.directories:
            pids.update(_read_pids(directory / terminal / "cgroup.procs"))
        return sorted(pids)

    def kill(self, terminal: str) -> bool:
        """SIGKILLs everything in the terminal's groups; returns whether they emptied."""
        for _ in range(KILL_ROUNDS):
            members = self.members(terminal)
            if not members:
                return True
            signals.signal_owned(members, signal.SIGKILL, lambda pid: self.holds(terminal, pid))
            time.sleep(0.001)  # let the kernel take them out before looking again
        return not self.members(terminal)

    def holds(self, terminal: str, pid: int) -> bool:
        """Whether pid is in one of the terminal's groups now (as /proc/<pid>/cgroup tells)."""
        suffixes = tuple(f"/{directory.name}/{terminal}" for directory in self.directories)
        try:
            with open(f"/proc/{pid}/cgroup") as memberships:
                return any(line.rstrip("\n").endswith(suffixes) for line in memberships)
        except OSError:
            return False

    def remove(self, terminal: str) -> bool:
        """Removes the terminal's groups once empty; returns whether all are gone."""
        removed = True
        for directory in self.directories:
            try:
                (directory / terminal).rmdir()
            except FileNotFoundError:
                pass
            except OSError:
                removed = False  # still has members (zombies not yet reaped); the worker tries again later
        return removed

    def remove_parents(self) -> None:
        """Removes this worker's parent groups once its terminals' groups are gone."""
        for directory in self.directories:
            try:
                directory.rmdir()
            except OSError:
                pass

    def terminals(self) -> list[str]:
        names: set[str] = set()
        for directory in self.directories:
            try:
                names.update(entry.name for entry in directory.iterdir() if entry.is_dir())
            except OSError:
                continue
        return sorted(names)

    def usage(self, terminal: str) -> dict:
        """What the terminal's group reports: processes and memory in use, and how often a limit said no."""
        found: dict = {}
        pids = self.controllers.get("pids")
        if pids is not None:
            found["processes"] = _read_int(pids / terminal / "pids.current")
            events = _read_text(pids / terminal / "pids.events")
            found["processLimitHits"] = int(events.split()[-1]) if events.split() else 0
        memory = self.controllers.get("memory")
        if memory is not None:
            name = "memory.usage_in_bytes" if self.version == 1 else "memory.current"
            found["memoryBytes"] = _read_int(memory / terminal / name)
        return found


def reap_departed(prefix: str, root: Path = CGROUP_ROOT, own: str = "") -> int:
    """Kills what is left in the groups of workers of this host that are gone; returns how many processes.

    A worker's parent group is named <prefix><pid>; one whose pid is not running
    any more belonged to a worker that was killed, and its terminals' processes
    (nohup'd, setsid'd, double-forked ones too) must not outlive it.
    """
    killed = 0
    parents: list[Path] = []
    for hierarchy in [root, *(root / controller for controller in CONTROLLERS)]:
        try:
            parents.extend(entry for entry in hierarchy.iterdir() if entry.name.startswith(prefix) and entry.is_dir())
        except OSError:
            continue
    for parent in parents:
        suffix = parent.name[len(prefix):]
        if parent.name == own or not suffix.isdigit() or signals.process_exists(int(suffix)):
            continue
        departed = Cgroups(controllers={"any": parent})
        for terminal in departed.terminals():
            killed += len(departed.members(terminal))
            departed.kill(terminal)
            departed.remove(terminal)
        try:
            parent.rmdir()
        except OSError:
            pass
    return killed


@dataclass
class Confinement:
    """How one worker confines its terminals: the limits, the control groups, and the account to run as."""

    limits: ResourceLimits = field(default_factory=ResourceLimits)
    cgroups: Cgroups = field(default_factory=Cgroups)

    def launch_argv(self, terminal: str, argv: list[str], account: Account | None) -> list[str]:
        """argv prefixed with what joins the terminal's groups, sets its limits and drops to account."""
        procs = self.cgroups.create(terminal, self.limits) if self.cgroups.controllers else []
        steps = ['for f in $1; do echo $$ > "$f" || exit 125; done', "shift", "ulimit -c 0"]
        if self.limits.open_files:
            steps.append(f"ulimit -n {int(self.limits.open_files)}")
        if self.limits.processes and "pids" not in self.cgroups.controllers and account and account.uid != 0:
            # Without a pids group, RLIMIT_NPROC is the fallback: it counts every
            # process of the account, not of the terminal, and root ignores it. prlimit, not ulimit: /bin/sh may
            # be dash, whose ulimit has no -u, and a limit that cannot be set must stop the launch.
            limit = int(self.limits.processes)
            steps.append(f"{PRLIMIT} --pid $$ --nproc={limit}:{limit} || exit 125")
        if self.limits.memory_bytes and "memory" not in self.cgroups.controllers:
            steps.append(f"ulimit -v {int(self.limits.memory_bytes) // 1024}")  # address space: a rough stand-in
        steps.append('exec "$@"')
        wrapped = [SH, "-c", "; ".join(steps), "terminal-launch", " ".join(procs)]
        if account is not None and account.uid != os.geteuid():
            groups = ",".join(str(group) for group in account.groups or (account.gid,))
            wrapped += [CHROOT, f"--userspec={account.uid}:{account.gid}", f"--groups={groups}", "--skip-chdir", "/"]
        return wrapped + argv

    def members(self, terminal: str) -> list[int]:
        return self.cgroups.members(terminal) if self.cgroups.controllers else []

    def holds(self, terminal: str, pid: int) -> bool:
        return bool(self.cgroups.controllers) and self.cgroups.holds(terminal, pid)

    def release(self, terminal: str) -> bool:
        """Ends whatever is left in the terminal's groups and removes them; returns whether they are gone."""
        if not self.cgroups.controllers:
            return True
        self.cgroups.kill(terminal)
        return self.cgroups.remove(terminal)

    def describe(self) -> dict:
        """What holds on this worker, for /api/health."""
        limits = self.limits
        return {
            "cgroups": {"version": self.cgroups.version, "controllers": sorted(self.cgroups.controllers),
                        "problem": self.cgroups.problem or None},
            "limits": {
                "processes": limits.processes,
                "processesEnforcedBy": "cgroup" if "pids" in self.cgroups.controllers else "rlimit (per account; not for root)",
                "openFiles": limits.open_files,
                "memoryBytes": limits.memory_bytes,
                "memoryEnforcedBy": ("cgroup" if "memory" in self.cgroups.controllers else "rlimit (address space)")
                if limits.memory_bytes else None,
                "cpuCores": limits.cpu_cores if "cpu" in self.cgroups.controllers else None,
                "coreDumps": False,
            },
        }


def _enable(group: Path, controllers: list[str]) -> None:
    enabled = (group / "cgroup.subtree_control").read_text().split()
    missing = [controller for controller in controllers if controller not in enabled]
    if missing:
        _write(group / "cgroup.subtree_control", " ".join(f"+{controller}" for controller in missing))


def _write(path: Path, value: str, missing_ok: bool = False) -> None:
    try:
        path.write_text(value)
    except FileNotFoundError:
        if not missing_ok:
            raise


def _read_text(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _read_int(path: Path) -> int | None:
    text = _read_text(path).strip()
    return int(text) if text.isdigit() else None


def _read_pids(path: Path) -> list[int]:
    return [int(line) for line in _read_text(path).split() if line.isdigit()]


PR_SET_DUMPABLE = 4


def make_undumpable() -> bool:
    """Hides this process's memory, environment and /proc entries from processes of the same account.

    A non-dumpable process's /proc/<pid>/environ, mem and fd need CAP_SYS_PTRACE to
    read, so a terminal running as the service's own (non-root) account cannot
    read the service's secrets from them. Core dumps of the service are off too.
    Returns whether it worked.
    """
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False
