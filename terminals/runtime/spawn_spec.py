"""What a terminal's process is started from, how it ended, and its queue of input not written yet."""

from __future__ import annotations

from dataclasses import dataclass, field

from . import processes


@dataclass(frozen=True)
class SpawnSpec:
    """What to run: argv[0] is looked up on the PATH of env."""

    argv: list[str]
    cwd: str
    env: dict[str, str]
    cols: int = 80
    rows: int = 24
    launch: tuple[str, ...] = ()  # what runs first and execs the rest: see confinement.Confinement.launch_argv
    account_uid: int | None = None  # the account launch drops to; None: the worker's own


@dataclass(frozen=True)
class ExitStatus:
    exit_code: int | None
    signal: str | None

    @property
    def returncode(self) -> int:
        """As subprocess says it: the exit code, or minus the signal's number."""
        if self.exit_code is not None:
            return self.exit_code
        if not self.signal:
            return 0
        return -int(self.signal[3:]) if self.signal[3:].isdigit() else -processes.signal_number(self.signal)

    @classmethod
    def from_returncode(cls, returncode: int) -> ExitStatus:
        if returncode < 0:
            return cls(exit_code=None, signal=processes.signal_name(-returncode))
        return cls(exit_code=returncode, signal=None)


@dataclass
class InputQueue:
    data: bytearray = field(default_factory=bytearray)
    limit: int = 1 << 20
