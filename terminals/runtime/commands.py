"""Commands in a shell terminal: where each one's output starts and ends, and how it exited.

A command sent through the API is typed between two calls of shell functions
that the startup hooks define: they print its begin (B) and end (E) markers,
signed with the terminal's secret and naming the command's id, so its output
is exactly the bytes between them and its exit status is the shell's own `$?`.
The secret is never typed: a program that reads what the service types (it can,
with the terminal open on an inherited descriptor) learns only the id, and a
marker counts only with the secret and the current command's id. In bash and
zsh, the hooks also report commands typed by people (C markers) and every
prompt (P markers), signed the same way. The echo of the typed text is shown to watchers as the command as given
(shown.py).

A shell without hooks (not bash, zsh, sh or dash) gets its API commands typed
between printf's of markers carrying a fresh nonce instead: a program that
steals typed text can forge those.
"""

from __future__ import annotations

import itertools
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from .flag import Flag
from .markers import Marker
from .processes import signal_name

RUNNING, COMPLETED = "running", "completed"
API, SHELL = "api", "shell"
HISTORY_LIMIT = 1000
NOT_IN_HISTORY = "(not kept in the shell's history)"
LAST_SIGNAL = 64  # exit statuses 129..192 are 128 + a signal number
MARKS_KEPT = 64


@dataclass
class Command:
    """One command line and what became of it."""

    id: str
    command: str
    source: str
    started_at: float
    nonce: str = ""
    typed_at: int | None = None  # where the echo of its typed text begins
    echo_end: int | None = None  # where the command as shown in place of that echo ends (shown.py)
    start_byte: int | None = None  # where its output begins, once it runs
    end_byte: int | None = None
    finished_at: float | None = None
    exit_code: int | None = None
    signal: str | None = None
    status: str = RUNNING
    actor: dict | None = None  # who sent it (an API command), for its end's audit row, in this worker or the next
    done: Flag = field(default_factory=Flag, repr=False)
    on_finish: Callable[[Command], None] | None = field(default=None, repr=False)

    @property
    def duration(self) -> float | None:
        return None if self.finished_at is None else self.finished_at - self.started_at

    def finish(self, *, exit_code: int | None, at_byte: int, when: float, signal: str | None = None) -> None:
        self.exit_code = exit_code
        self.signal = signal if signal is not None else _signal_of(exit_code)
        self.end_byte = at_byte
        if self.start_byte is None:
            self.start_byte = at_byte
        self.finished_at = when
        self.status = COMPLETED
        self.done.set()
        if self.on_finish is not None:
            self.on_finish(self)


def _saved(record: Command) -> dict:
    return {name: getattr(record, name) for name in ("id", "command", "source", "started_at", "nonce", "typed_at",
                                                      "echo_end", "start_byte", "end_byte", "finished_at",
                                                      "exit_code", "signal", "status", "actor")}


def _signal_of(exit_code: int | None) -> str | None:
    """The shell reports a command killed by signal N as 128 + N."""
    if exit_code is not None and 128 < exit_code <= 128 + LAST_SIGNAL:
        return signal_name(exit_code - 128)
    return None


def wrap(command: str, command_id: str) -> str:
    """The text typed for an API command: its own markers around it, and the command itself given to `eval` as
    one single-quoted word.

    Quoted, the typed text is always one complete line the shell accepts, whatever the command holds: a syntax
    error, an unclosed quote or a stray `fi` inside becomes eval's status (2 in bash and dash, 1 in zsh) with the
    end marker still printed, instead of a line the shell refuses and the rest of the text read as further
    commands, each with a prompt that could be taken for the end of the next command. `eval` runs in the shell
    itself, so `cd`, `export` and `exit` act on it, and no history expansion happens inside single quotes. The
    functions sign the markers with the secret only the shell knows.
    """
    return f"__terminals_begin {command_id}; eval {_single_quoted(command)}; __terminals_end {command_id} \"$?\"\n"


def _single_quoted(command: str) -> str:
    """command as one single-quoted shell word. A last newline ends a here-document whose end line is last, and
    lets a trailing backslash continue onto an empty line rather than escape eval's end of input."""
    if "\n" in command or command.endswith("\\"):
        command += "\n"
    return "'" + command.replace("'", "'\\''") + "'"


def wrap_unsigned(command: str, nonce: str) -> str:
    """The same for a shell without hooks: markers carrying a nonce, which is typed and so not private."""
    begin = f"printf '\\033]6973;{nonce};B\\007'"
    end = f"printf '\\033]6973;{nonce};E;%s\\007' \"$?\""
    return f"{{ {begin}; {command}\n\n}}; {end}\n"


class CommandTracker:
    """Follows the commands of one shell terminal through the markers in its output."""

    def __init__(self, *, clock: Callable[[], float] = time.time, history_limit: int = HISTORY_LIMIT) -> None:
        self.secret = secrets.token_hex(16)
        self.signed = True  # the shell's hooks sign API commands' markers; False: nonces (a shell without hooks)
        self._clock = clock
        self._numbers = itertools.count(1)
        # A list, not a deque(maxlen): an empty deque already holds a block of 64 slots, in every terminal.
        self._history: list[Command] = []
        self._history_limit = history_limit
        self._by_id: dict[str, Command] = {}
        self.current: Command | None = None  # the API command in flight
        self.typed: Command | None = None  # a command typed by a person, reported by the hooks
        self.at_prompt = Flag()
        self.prompted = Flag()  # the shell has shown a prompt once: its line editor is running
        # Prompt markers still to come that belong to before the current command was typed
        # (it was typed before the previous prompt's marker arrived, e.g. during startup).
        self._stale_prompts = 0
        self._last_history_number = ""
        # Finds where a refused command's error message begins (set by the session that owns the output).
        self.locate_refusal: Callable[[Command, int], int] | None = None
        # The newest typed-command (C) and prompt (P) markers, (offset, kind): they tell the echo of typed lines
        # from their output (echo.py).
        self._marks: list[tuple[int, str]] = []
        self.on_change: Callable[[], None] = lambda: None  # told after a command begins and after each marker

    # Handing over to another worker (adoption.py)

    def state(self) -> dict:
        """Everything this tracker knows, as JSON-able data: restore() in another process goes on from it."""
        return {"secret": self.secret, "signed": self.signed, "history": [_saved(record) for record in self._history],
                "current": self.current.id if self.current else None, "typed": self.typed.id if self.typed else None,
                "atPrompt": self.at_prompt.is_set(), "prompted": self.prompted.is_set(),
                "stalePrompts": self._stale_prompts, "lastHistoryNumber": self._last_history_number,
                "marks": self._marks}

    def restore(self, state: dict) -> None:
        self.secret, self.signed = state["secret"], state["signed"]
        for saved in state["history"]:
            record = Command(**saved)
            if record.status == COMPLETED:
                record.done.set()
            self._remember(record)
        numbers = [int(record.id.split("_")[1]) for record in self._history if record.id.count("_") >= 2]
        self._numbers = itertools.count(max(numbers, default=0) + 1)
        self.current, self.typed = self._by_id.get(state["current"] or ""), self._by_id.get(state["typed"] or "")
        for flag, saved_flag in ((self.at_prompt, state["atPrompt"]), (self.prompted, state["prompted"])):
            flag.set() if saved_flag else flag.clear()
        self._stale_prompts, self._last_history_number = state["stalePrompts"], state["lastHistoryNumber"]
        self._marks = [tuple(mark) for mark in state["marks"]]

    # Starting

    def begin(self, command: str) -> tuple[Command, str]:
        """Registers an API command; returns it and the text to type."""
        record = Command(
            id=f"cmd_{next(self._numbers)}_{secrets.token_hex(3)}",
            command=command,
            source=API,
            started_at=self._clock(),
            nonce="" if self.signed else secrets.token_hex(12),
        )
        self._remember(record)
        self.current = record
        self._stale_prompts = 0 if self.at_prompt.is_set() else 1
        self.at_prompt.clear()
        self.on_change()
        return record, wrap(command, record.id) if self.signed else wrap_unsigned(command, record.nonce)

    def _remember(self, record: Command) -> None:
        if len(self._history) >= self._history_limit:
            self._by_id.pop(self._history.pop(0).id, None)
        self._history.append(record)
        self._by_id[record.id] = record

    def get(self, command_id: str) -> Command | None:
        return self._by_id.get(command_id)

    def history(self) -> list[Command]:
        return list(self._history)

    def prompt_due(self) -> bool:
        """Whether the next prompt marker belongs before the current command (typed before it was shown)."""
        return self.current is not None and self.current.start_byte is None and self._stale_prompts > 0

    @property
    def running(self) -> Command | None:
        return self.current or self.typed

    # Markers

    def on_marker(self, marker: Marker, offset: int) -> bool:
        """Applies a marker seen at byte offset; returns False when it is not ours (it stays in the output)."""
        ours = self._apply(marker, offset)
        if ours:
            self.on_change()
        return ours

    def _apply(self, marker: Marker, offset: int) -> bool:
        current = self.current
        if current is not None and current.nonce and marker.token == current.nonce:
            self._on_command_marker(current, marker.kind, marker.data, offset)
            return True
        if marker.token != self.secret:
            return False
        # Signed by the shell: taken out of the output whatever it says, as it carries the secret.
        if marker.kind in ("B", "E") and self.signed:
            command_id, _, data = marker.data.partition(";")
            if current is not None and command_id == current.id:
                self._on_command_marker(current, marker.kind, data, offset)
        elif marker.kind == "C" and current is None:
            self._mark(offset, "C")
            self._begin_typed(self._typed_line(marker.data), offset)
        elif marker.kind == "P":
            self._mark(offset, "P")
            self._on_prompt(_exit_code(marker.data), offset)
        return True

    def _mark(self, offset: int, kind: str) -> None:
        self._marks.append((offset, kind))
        del self._marks[:-MARKS_KEPT]

    def marks_from(self, offset: int) -> list[tuple[int, str]]:
        """The typed-command and prompt markers seen at or after offset, oldest first."""
        return [mark for mark in self._marks if mark[0] >= offset]

    def _on_command_marker(self, current: Command, kind: str, data: str, offset: int) -> None:
        if kind == "B":
            current.start_byte = offset
        elif kind == "E":
            self._finish_current(_exit_code(data), offset)

    def _typed_line(self, data: str) -> str:
        """bash sends "<history number>;<line>": the same number twice means history kept no new line,
        and its last line is some earlier command (ignorespace), so the text is not known."""
        number, separator, line = data.partition(";")
        if not separator or not number.isdigit():
            return data  # zsh sends the line itself
        previous, self._last_history_number = self._last_history_number, number
        # Whether ignorespace or ignoredups left it out, history's last line is an earlier command.
        return NOT_IN_HISTORY if number == previous else line

    def _begin_typed(self, line: str, offset: int) -> None:
        record = Command(
            id=f"cmd_{next(self._numbers)}_{secrets.token_hex(3)}",
            command=line,
            source=SHELL,
            started_at=self._clock(),
            start_byte=offset,
        )
        self._remember(record)
        self.typed = record
        self.at_prompt.clear()

    def _on_prompt(self, exit_code: int | None, offset: int) -> None:
        if self.typed is not None:
            self.typed.finish(exit_code=exit_code, at_byte=offset, when=self._clock())
            self.typed = None
        current = self.current
        if current is not None and current.start_byte is None and self._stale_prompts:
            # The prompt before the command, reported late. The shell reads the command's line next, so it is not
            # at a prompt: were at_prompt set here, the next command begun right after this one ends would count
            # this one's own prompt, still to come, as its end (with exit code 0).
            self._stale_prompts -= 1
            self.prompted.set()
            return
        elif current is not None:
            # The prompt is back without the end marker: Ctrl-C or a signal abandoned the rest of the
            # line, or (before it began) the shell refused its text, a syntax error.
            if current.start_byte is None:
                if self.locate_refusal is not None:
                    current.start_byte = self.locate_refusal(current, offset)
            self._finish_current(exit_code, offset)
        self.at_prompt.set()
        self.prompted.set()

    def _finish_current(self, exit_code: int | None, offset: int) -> None:
        assert self.current is not None
        self.current.finish(exit_code=exit_code, at_byte=offset, when=self._clock())
        self.current = None

    def on_shell_exit(self, exit_code: int | None, signal: str | None, offset: int) -> None:
        """The shell ended (`exit 3`, `set -e`): what was running reports the shell's status."""
        for record in (self.current, self.typed):
            if record is not None and record.status == RUNNING:
                record.finish(exit_code=exit_code, at_byte=offset, when=self._clock(), signal=signal)
        self.current = self.typed = None


def _exit_code(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None
