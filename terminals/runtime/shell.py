"""A shell on a PTY that runs commands one at a time and reports each one's output and exit status."""

from __future__ import annotations

import asyncio
import atexit
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

from .commands import RUNNING, Command, CommandTracker
from .errors import SessionInactive, TerminalBusy, TerminalError
from .markers import Marker, MarkerParser
from . import echo, processes, sealed, shown
from .launch import HANDOVER_FD
from .pty import PtySession, SpawnSpec
from .tty_limits import MAX_CANONICAL_LINE, longest_line

SHIPPED_INTEGRATION = Path(__file__).with_name("shell_integration")
POLL_SECONDS = 0.1  # how often a waiting command is checked for a prompt that waits for input
CONFIRM_SECONDS = 0.05
LINE_EDITOR_SECONDS = 0.5  # how long a long command waits for the shell's line editor to take the terminal


COPY_PREFIX = "terminals-shell-integration-"


@lru_cache(maxsize=1)
def integration_dir() -> Path:
    """Where shells read the hooks from: a place every account can read.

    Terminals may run as another account (TERMINALS_RUN_AS) than the one that
    installed the service, whose checkout may be private (under /root, say);
    then the hooks are copied once to a world-readable directory, which goes
    when this process exits. Shells read the hooks only as they start, so the
    ones still running then lose nothing. A copy whose process was killed
    before it could remove it goes when the next process makes its own.
    """
    if _world_readable(SHIPPED_INTEGRATION):
        return SHIPPED_INTEGRATION
    _remove_stale_copies()
    copy = Path(tempfile.mkdtemp(prefix=f"{COPY_PREFIX}{_owner_tag(os.getpid())}-"))
    atexit.register(_remove_copy, copy, os.getpid())
    shutil.copytree(SHIPPED_INTEGRATION, copy, dirs_exist_ok=True)
    for path in [copy, *copy.rglob("*")]:
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    return copy


def _remove_copy(copy: Path, owner: int) -> None:
    if os.getpid() == owner:  # a forked child that exits through Python must not take its parent's copy
        shutil.rmtree(copy, ignore_errors=True)


def _owner_tag(pid: int) -> str:
    """Names a process in its copy's name: its PID namespace, its pid and its start time (pids are reused)."""
    fields = processes.stat_fields(pid)
    return f"{_pid_namespace()}.{pid}.{fields[19] if fields else 0}"


@lru_cache(maxsize=1)
def _pid_namespace() -> str:
    try:
        return "".join(filter(str.isdigit, os.readlink("/proc/self/ns/pid")))
    except OSError:
        return "0"


def _remove_stale_copies() -> None:
    """Removes the copies whose process is gone without removing its own (killed with SIGKILL): only this account's
    directories, named by a process of this PID namespace (pids of another mean nothing here) that no longer runs."""
    for entry in Path(tempfile.gettempdir()).glob(f"{COPY_PREFIX}*"):
        tag = entry.name[len(COPY_PREFIX) :].split("-", 1)[0]
        namespace, pid, _ = (tag.split(".") + ["", "", ""])[:3]
        if namespace != _pid_namespace() or not pid.isdigit() or _owner_tag(int(pid)) == tag:
            continue
        try:
            found = os.lstat(entry)
        except OSError:
            continue
        if stat.S_ISDIR(found.st_mode) and found.st_uid == os.geteuid():  # never through a link, never another's
            shutil.rmtree(entry, ignore_errors=True)


def _world_readable(directory: Path) -> bool:
    path = directory.resolve()
    for part in [*reversed(path.parents), path]:
        if not os.stat(part).st_mode & 0o001:
            return False
    return all(os.stat(entry).st_mode & 0o004 for entry in path.rglob("*"))


@dataclass(frozen=True)
class WaitResult:
    finished: bool
    waiting_for_input: bool = False


SECRET_FD_VARIABLE = "TERMINALS_SHELL_SECRET_FD"  # says the secret waits on fd HANDOVER_FD; never the secret itself
INTEGRATED_SHELLS = ("bash", "zsh", "sh", "dash")


def integrated_spec(spec: SpawnSpec) -> SpawnSpec:
    """The same shell, started with hooks: prompts with their exit status (bash, zsh, sh), typed commands (bash,
    zsh), and the functions that sign an API command's start and end. Unknown shells are left as they are."""
    name = Path(spec.argv[0]).name
    if name not in INTEGRATED_SHELLS:
        return spec
    env = dict(spec.env)
    integration = integration_dir()
    argv = [_sealed_if_other_account(spec), *spec.argv[1:]]
    if name == "bash":
        argv = [argv[0], "--rcfile", str(integration / "bashrc"), *argv[1:]]
    elif name == "zsh":
        if "ZDOTDIR" in env:
            env["TERMINALS_USER_ZDOTDIR"] = env["ZDOTDIR"]
        env["ZDOTDIR"] = str(integration)
    else:
        # POSIX shells read $ENV when interactive; its prompt can carry $? but no hook sees typed commands.
        if "ENV" in env:
            env["TERMINALS_USER_ENV"] = env["ENV"]
        env["ENV"] = str(integration / "shrc")
    env[SECRET_FD_VARIABLE] = str(HANDOVER_FD)
    return replace(spec, argv=argv, env=env)


def _sealed_if_other_account(spec: SpawnSpec) -> str:
    """The shell to exec: for an account other than root and the worker's, an execute-only copy (sealed.py),
    so that programs of that account cannot read the shell's memory; otherwise the shell as asked."""
    program = spec.argv[0]
    if spec.account_uid in (None, 0, os.geteuid()):
        return program
    found = shutil.which(program, path=spec.env.get("PATH"))
    if found is None:
        return program  # the spawn reports it missing
    return sealed.SHELLS.copy_of(found) or program


class ShellSession(PtySession):
    """A PtySession whose output is searched for command markers."""

    def __init__(self, spec: SpawnSpec, *, clock: Callable[[], float] = time.time, **kwargs) -> None:
        self.commands = CommandTracker(clock=clock)
        integrated = integrated_spec(spec)
        self.commands.signed = integrated is not spec
        super().__init__(integrated, clock=clock, **kwargs)
        self._markers = MarkerParser()
        self.commands.locate_refusal = self._refusal_start
        # bash's and zsh's hooks mark where each typed command's output starts (echo.py's PROMPT).
        self._marks_commands = self.commands.signed and Path(spec.argv[0]).name in ("bash", "zsh")
        # The output since an API command was typed, held back until its echo is known (shown.py).
        self._held: shown.HeldEcho | None = None
        self._hold_timer: asyncio.TimerHandle | None = None

    def spawn(self) -> None:
        """Spawns the shell with its secret in a pipe: read once by its startup file, never in its
        environment or command line, and gone from the pipe before any program of the user runs."""
        if not self.commands.signed:
            super().spawn()
            return
        read_end, write_end = os.pipe()
        try:
            os.write(write_end, f"{self.commands.secret}\n".encode())  # far below a pipe's capacity
        finally:
            os.close(write_end)
        try:
            super().spawn(handover=read_end)
        finally:
            os.close(read_end)

    def _ingest(self, data: bytes) -> None:
        for piece in self._markers.feed(data):
            if isinstance(piece, Marker):
                self._on_marker(piece)
            else:
                self._store(piece)
        self._answer_queries(data)

    def _on_marker(self, marker: Marker) -> None:
        held = self._held
        if held is not None and self._ends_echo(marker, held.record):
            # First, so that the marker's offset follows what is shown. A prompt due before the command: its line
            # editor (bash, zsh) echoes the text again after it, and shows it there.
            show = marker.kind == "B" or not (self.commands.prompt_due() and self._marks_commands)
            self._show_held(to_end=marker.kind == "B", show=show)
        if not self.commands.on_marker(marker, self.buffer.end):
            self._store(marker.raw)
        if held is not None and (held.record.start_byte is not None or held.record.status != RUNNING):
            self._stop_holding()  # it runs (B), or ended at a prompt without running

    def _ends_echo(self, marker: Marker, record: Command) -> bool:
        """A marker that ends a segment of held output: the command's begin (B), or a prompt (P)."""
        if marker.token != self.commands.secret:
            return False
        return marker.kind == "P" or (marker.kind == "B" and marker.data.partition(";")[0] == record.id)

    def _store(self, data: bytes) -> None:
        held = self._held
        if held is None:
            self._keep(data)
            return
        held.data += data
        held.last = self._loop.time() if self._loop is not None else 0.0
        if len(held.data) > held.limit:
            self._show_held(to_end=False)

    # What watchers see of an API command (shown.py)

    def _hold_echo(self, record: Command, typed: int) -> None:
        """Holds the output back from now until the echo of the typed bytes is known."""
        if self._loop is None:
            return
        self._held = shown.HeldEcho(record, limit=shown.HOLD_LIMIT_BYTES + 4 * typed, last=self._loop.time())
        self._hold_timer = self._loop.call_later(shown.HOLD_QUIET_SECONDS, self._hold_expired)

    def _hold_expired(self) -> None:
        """No B marker, and nothing more of the echo for a while (the shell is slow, or something read the typed
        text instead of the shell): what is held is stored, the echo found in it shown as the command."""
        self._hold_timer = None
        held = self._held
        if held is None or self._loop is None:
            return
        quiet = self._loop.time() - held.last
        if quiet < shown.HOLD_QUIET_SECONDS:
            self._hold_timer = self._loop.call_later(shown.HOLD_QUIET_SECONDS - quiet, self._hold_expired)
            return
        self._release_held()

    def _release_held(self) -> None:
        """Stores what is held at once, for whoever reads it next: the command did not begin as it should."""
        if self._held is not None:
            self._stop_holding()
            self._output_arrived()

    def _show_held(self, *, to_end: bool, show: bool = True) -> None:
        """Stores the held output, with the echo of the typed text replaced by the command as given."""
        held = self._held
        if held is None or not held.data:
            return
        at = self.buffer.end
        data, place = shown.replace_echo(bytes(held.data), held.record, to_end=to_end, show=show)
        held.data.clear()
        self._keep(data)
        if place is not None:
            held.record.echo_end = at + place[1]
            self.echoes.shown(at + place[0], at + place[1])

    def settle(self) -> None:
        """Stores output held back for an API command's echo: before a hand-over to the next worker, which would
        never see it."""
        self._release_held()

    def _stop_holding(self) -> None:
        self._show_held(to_end=False)
        self._held = None
        if self._hold_timer is not None:
            self._hold_timer.cancel()
            self._hold_timer = None

    def _refusal_start(self, record: Command, prompt_at: int) -> int:
        """Where the shell's complaint about a refused command begins: after the echo of its last typed line."""
        if record.echo_end is not None:
            return record.echo_end
        typed_at = record.typed_at if record.typed_at is not None else prompt_at
        text, _ = self.buffer.text_between(typed_at, prompt_at)
        echo_end = text.rfind(record.nonce or record.id)
        if echo_end < 0:
            return prompt_at
        newline = text.find("\n", echo_end)
        if newline < 0:
            return prompt_at
        return typed_at + len(text[: newline + 1].encode("utf-8", errors="surrogateescape"))

    def _echo_mode(self) -> tuple[str, int]:
        # Not running a command, the shell reads the input with its line editor: at its prompt, or at the next one
        # (a command has just ended, or it is starting), when the kernel may echo the line before the editor does.
        if self._marks_commands and self.commands.running is None and not self.busy:
            return echo.PROMPT, 0 if self.commands.at_prompt.is_set() else 1
        return super()._echo_mode()

    def answer_marks(self, offset: int) -> list[tuple[int, str]]:
        return self.commands.marks_from(offset)

    def _report_exit(self) -> None:
        if not self._exit_reported:
            self._stop_holding()
            self._keep(self._markers.flush())
            status = self.exit_status
            if status is not None:
                self.commands.on_shell_exit(status.exit_code, status.signal, self.buffer.end)
        super()._report_exit()

    # Commands

    async def started(self, timeout: float) -> bool:
        """Waits until the shell has shown its first prompt (at most timeout seconds); returns whether it has.

        Until then the terminal is still in canonical mode, where lines are cut
        at 4095 bytes, and the shell reads none of what is typed yet.
        """
        if self.commands.prompted.is_set():
            return True
        try:
            await asyncio.wait_for(self.commands.prompted.wait(), timeout)
        except TimeoutError:
            return False
        return True

    async def ready_for(self, command: str, timeout: float) -> None:
        """Waits until typing command now delivers it whole: the shell has started, and for a line longer
        than canonical mode holds, its line editor has switched the terminal to key-by-key reading (the
        prompt's marker arrives a moment before it does). A shell without a line editor (dash) never
        switches: then the wait ends after LINE_EDITOR_SECONDS and the write refuses the line clearly."""
        await self.started(timeout)
        if longest_line(command.encode("utf-8", errors="surrogateescape")) <= MAX_CANONICAL_LINE:
            return
        deadline = asyncio.get_running_loop().time() + LINE_EDITOR_SECONDS
        while self.canonical() and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.005)

    def run_command(self, command: str) -> Command:
        """Types an API command; raises TerminalBusy while another one holds the foreground."""
        if not self.is_alive:
            raise SessionInactive("the terminal's process has ended")
        running = self.commands.running
        if running is not None and running.status == RUNNING:
            raise TerminalBusy(
                f"command {running.id} is still running: {running.command[:200]}",
                runningCommand={"commandId": running.id, "command": running.command},
            )
        if self.busy:
            foreground = self.foreground_process()
            raise TerminalBusy(
                f"a program is running in the foreground: {(foreground or {}).get('command', '')[:200]}",
                foreground=foreground,
            )
        record, text = self.commands.begin(command)
        record.typed_at = self.buffer.end
        typed = text.encode("utf-8", errors="surrogateescape")
        if self.commands.signed:
            self._hold_echo(record, len(typed))
        try:
            self.write(typed)
        except TerminalError:
            self.commands.current = None
            self._stop_holding()
            raise
        return record

    async def wait_command(self, record: Command, timeout: float) -> WaitResult:
        """Waits until the command finishes, or stops at a prompt that waits for input, or timeout passes."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while record.status == RUNNING:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return self._unfinished(record, WaitResult(finished=False))
            try:
                await asyncio.wait_for(record.done.wait(), min(remaining, POLL_SECONDS))
            except TimeoutError:
                if self._quiet_for(POLL_SECONDS) and await self._confirmed_waiting(record):
                    return self._unfinished(record, WaitResult(finished=False, waiting_for_input=True))
        return WaitResult(finished=True)

    def _unfinished(self, record: Command, result: WaitResult) -> WaitResult:
        """A command answered before it began (its typed text read by something else, or a shell that takes
        long): the output held since it was typed is its caller's to read now."""
        if self._held is not None and self._held.record is record:
            self._release_held()
        return result

    async def _confirmed_waiting(self, record: Command) -> bool:
        """Waiting for input, seen twice: a shell back at its prompt reads the terminal too, a moment
        before the command's end marker has made its way through the PTY."""
        if not self.waiting_for_input():
            return False
        try:
            await asyncio.wait_for(record.done.wait(), CONFIRM_SECONDS)
        except TimeoutError:
            return record.status == RUNNING and self.waiting_for_input()
        return False

    def waiting_for_input(self) -> bool:
        """Also true when the shell itself waits in its line editor (a continuation prompt)."""
        if super().waiting_for_input():
            return True
        running = self.commands.current
        return running is not None and not self.busy and processes.is_polling_terminal(self.pid)

    def _quiet_for(self, seconds: float) -> bool:
        return self._clock() - self.last_activity >= seconds
