"""What the library returns: plain dataclasses over the service's answers (the raw answer stays in `data`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Optional

from .errors import CommandFailed


@dataclass(frozen=True)
class ExitStatus:
    """How a process ended: `exit_code`, or `signal` (a name such as "SIGKILL") when a signal ended it."""

    exit_code: Optional[int]
    signal: Optional[str]

    @property
    def code(self) -> int:
        """One number, as a shell reports it: the exit code, or 128 + N for signal N (255 when unknown)."""
        if self.exit_code is not None:
            return self.exit_code
        if self.signal:
            return 128 + signal_number(self.signal)
        return 255


@dataclass(frozen=True)
class CommandResult:
    """A command run in a shell terminal. `exit_code` is None only while it still runs (it stopped for input)."""

    command_id: str
    command: str
    exit_code: Optional[int]
    output: str
    duration: Optional[float]
    truncated: bool
    signal: Optional[str]
    waiting_for_input: bool
    data: Dict[str, Any] = field(repr=False, default_factory=dict)

    @property
    def running(self) -> bool:
        return self.exit_code is None

    def check(self) -> "CommandResult":
        """Raises CommandFailed for a non-zero exit (or a command still running); returns self otherwise."""
        if self.exit_code != 0:
            how = "still runs, waiting for input" if self.exit_code is None else f"exited with {self.exit_code}"
            raise CommandFailed(f"command {self.command_id} ({self.command}) {how}", result=self)
        return self

    @classmethod
    def from_data(cls, data: Dict[str, Any]) -> "CommandResult":
        duration_ms = data.get("durationMs")
        return cls(
            command_id=str(data.get("commandId", "")),
            command=str(data.get("command", "")),
            exit_code=data.get("exitCode"),
            output=str(data.get("output", "")),
            duration=duration_ms / 1000.0 if isinstance(duration_ms, (int, float)) else None,
            truncated=bool(data.get("truncated", False)),
            signal=data.get("signal"),
            waiting_for_input=bool(data.get("waitingForInput", False)),
            data=data,
        )


@dataclass(frozen=True)
class Chunk:
    """Output read by byte offset: `text` runs from byte `start` to byte `next`; `eof` once nothing more comes."""

    text: str
    start: int
    next: int
    eof: bool
    truncated: bool
    exit_status: Optional[ExitStatus]


@dataclass(frozen=True)
class OutputMatch:
    """What wait_for found: the matched text, what was printed up to it, and the byte after what was searched."""

    match: str
    output: str
    next_byte: int


_SIGNALS = {"SIGHUP": 1, "SIGINT": 2, "SIGQUIT": 3, "SIGKILL": 9, "SIGUSR1": 10, "SIGUSR2": 12, "SIGPIPE": 13,
            "SIGALRM": 14, "SIGTERM": 15, "SIGCONT": 18, "SIGSTOP": 19, "SIGTSTP": 20}


def signal_number(name: str) -> int:
    """The Linux number of a signal name ("SIGTERM" -> 15): the service's processes run on Linux whatever the
    client's platform, so its own table is used rather than the local `signal` module's."""
    return _SIGNALS.get(name.upper(), 0) or 127


def exit_status(data: Optional[Dict[str, Any]]) -> Optional[ExitStatus]:
    if not data:
        return None
    return ExitStatus(exit_code=data.get("exitCode"), signal=data.get("signal"))
