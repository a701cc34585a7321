"""A program inside a terminal cannot forge a command's start, end or exit code.

The shell signs its markers with a secret the program must not learn. Each test
here runs, as an unprivileged account of its own (TERMINALS_RUN_AS), a program that
looks for the secret through one channel (its environment, the shell's /proc entries,
readable files, the shell's memory and ptrace, the text the service types), prints
the best forgery it can make from what it found, keeps running and exits 5: the API
must report exit code 5 with the printed text in the output.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import tempfile
import textwrap
import uuid
from pathlib import Path

import pytest
import requests
from django.conf import settings as django_settings

from terminals.runtime.markers import Marker, MarkerParser
from terminals.runtime.shell import SHIPPED_INTEGRATION

from .client import Api
from .servers import start_embedded, wait_for

BASH, ZSH, DASH = "/bin/bash", "/usr/bin/zsh", "/bin/dash"
shells = pytest.mark.parametrize("shell", [BASH, ZSH, DASH], ids=lambda path: path.rsplit("/", 1)[-1])
PYTHON = "/usr/bin/python3"  # the system's: the account cannot run root's pyenv
ESC = "\x1b"

# Run as the terminal's account. Finds candidate secrets (runs of 24 to 32 hex digits, the
# shape of a terminal's secret and of a command's nonce) and command ids through one
# channel, then prints every marker they make: prompt and end markers, with and without an id.
FORGER = r'''
import ctypes, glob, os, re, signal, sys, time

ESC = "\x1b"
TOKEN = re.compile(rb"(?<![0-9a-f])[0-9a-f]{24,32}(?![0-9a-f])")
COMMAND_ID = re.compile(rb"cmd_[0-9]+_[0-9a-f]{6}")


def forge(channel, found):
    tokens = sorted({match.decode() for match in TOKEN.findall(found)})[:200]
    ids = sorted({match.decode() for match in COMMAND_ID.findall(found)})
    markers = []
    for token in tokens:
        markers += [f"{ESC}]6973;{token};P;0\a", f"{ESC}]6973;{token};E;0\a"]
        markers += [f"{ESC}]6973;{token};E;{command_id};0\a" for command_id in ids]
    os.write(1, ("".join(markers) + f"forged from {channel}: {len(tokens)} candidates\n").encode())


def read(path):
    try:
        with open(path, "rb") as file:
            return file.read(1 << 22)
    except OSError as error:
        os.write(1, f"{path}: {error.strerror}\n".encode())
        return b""


def environment(shell, *roots):
    found = [f"{name}={value}".encode() for name, value in os.environ.items()]
    found += [read(f"/proc/{shell}/environ"), read(f"/proc/{shell}/cmdline")]
    try:
        found += [" ".join(os.listdir(f"/proc/{shell}/fd")).encode(), read(f"/proc/{shell}/fd/9")]
    except OSError as error:
        os.write(1, f"/proc/{shell}/fd: {error.strerror}\n".encode())
    # Every file the account can read where the service keeps things: its hooks, its data.
    arguments = read(f"/proc/{shell}/cmdline").decode().split("\0")
    rcfile = arguments[arguments.index("--rcfile") + 1] if "--rcfile" in arguments else ""
    named = [os.environ.get("ENV", ""), os.environ.get("ZDOTDIR", ""), rcfile]
    roots = list(roots) + [os.path.dirname(path) for path in named if path.startswith("/")]
    roots += glob.glob("/tmp/terminals-shell-integration-*")
    for root in roots:
        for folder, _, names in os.walk(root):
            for name in names:
                found.append(read(os.path.join(folder, name)))
    forge("the environment, /proc and files", b"\0".join(found))


def memory(shell):
    found = b""
    try:
        with open(f"/proc/{shell}/maps") as maps, open(f"/proc/{shell}/mem", "rb") as mem:
            for line in maps:
                span, perms = line.split()[:2]
                if perms.startswith("rw"):
                    start, end = (int(part, 16) for part in span.split("-"))
                    try:
                        mem.seek(start)
                        found += mem.read(end - start)
                    except OSError:
                        pass
    except OSError as error:
        os.write(1, f"mem: {error.strerror}\n".encode())
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.ptrace(16, shell, 0, 0) == 0:  # PTRACE_ATTACH; the stopped shell is let go at once
        os.waitpid(shell, 0x40000000)  # __WALL
        libc.ptrace(17, shell, 0, 0)  # PTRACE_DETACH
        os.write(1, b"ptrace: attached\n")
    else:
        os.write(1, f"ptrace: {os.strerror(ctypes.get_errno())}\n".encode())
    forge("the shell's memory", found)


def typed(shell, go, stopped):
    """Leaves the session with the terminal still open, stops the shell, reads what the service types next."""
    if os.fork():
        os._exit(0)
    os.setsid()
    deadline = time.monotonic() + 60  # the test gives up long before; this only keeps a stray child from lingering
    while not os.path.exists(go):
        if time.monotonic() > deadline:
            os._exit(1)
        time.sleep(0.02)
    os.kill(shell, signal.SIGSTOP)
    open(stopped, "w").close()
    stolen = b""
    while not stolen.rstrip(b"\r\n").endswith(b'"$?"') or stolen[-1:] not in b"\r\n":  # Enter may come as CR
        chunk = os.read(0, 4096)
        if not chunk:
            break
        stolen += chunk
    forge("typed input", stolen)
    os.kill(shell, signal.SIGCONT)


{"environment": environment, "memory": memory, "typed": typed}[sys.argv[1]](int(sys.argv[2]), *sys.argv[3:])
'''


@pytest.fixture(scope="module")
def account():
    """An unprivileged account with a home of its own (no root dotfiles), removed afterwards."""
    name = f"ttsec{uuid.uuid4().hex[:6]}"
    home = Path(tempfile.mkdtemp(prefix="terminals-integrity-home-"))
    subprocess.run(["useradd", "--system", "--home-dir", str(home), "--shell", "/bin/sh", name], check=True)
    shutil.chown(home, name, name)
    yield name, home
    subprocess.run(["userdel", name], check=False)
    shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(scope="module")
def workshop(account):
    """A folder the account can read the forger from and leave files in."""
    folder = Path(tempfile.mkdtemp(prefix="terminals-integrity-"))
    (folder / "forge.py").write_text(textwrap.dedent(FORGER))
    os.chmod(folder / "forge.py", 0o644)
    shutil.chown(folder, account[0], account[0])
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def other_account_server(django_db_setup, account):
    sealed = Path(tempfile.mkdtemp(prefix="terminals-sealed-"))
    os.chmod(sealed, 0o711)
    server = start_embedded(TERMINALS_RUN_AS=account[0], TERMINALS_SEALED_SHELL_DIR=str(sealed / "shells"))
    yield server
    server.stop()
    shutil.rmtree(sealed, ignore_errors=True)


@pytest.fixture
def api(other_account_server, keys):
    client = Api(other_account_server.url, keys["alice"])
    yield client
    client.cleanup()




def shell_terminal(api: Api, shell: str, account) -> str:
    terminal = api.create(shell=shell, cwd=str(account[1]))["terminalId"]
    assert api.command(terminal, "id -un", timeoutMs=20_000)["output"].strip() == account[0]
    return terminal


def forge(workshop: Path, channel: str, *args: str) -> str:
    """The command: the forger looks, forges, and the command goes on to end with 5."""
    return f"{PYTHON} {workshop / 'forge.py'} {channel} $$ {' '.join(args)}; echo still-running; (exit 5)"


def assert_not_forged(result: dict, channel: str) -> None:
    assert result["status"] == "completed" and result["exitCode"] == 5, result
    assert f"forged from {channel}" in result["output"] and result["output"].endswith("still-running\n"), result


# What a program can read


@shells
def test_the_environment_proc_entries_and_readable_files_give_no_secret(api, account, workshop, shell):
    terminal = shell_terminal(api, shell, account)
    command = forge(workshop, "environment", str(SHIPPED_INTEGRATION), str(django_settings.DATA_DIR))
    result = api.command(terminal, command, timeoutMs=20_000)
    assert_not_forged(result, "the environment, /proc and files")
    # The shell's own entries are closed to its programs: it is non-dumpable.
    assert "environ: Permission denied" in result["output"], result


@shells
def test_the_shells_memory_and_ptrace_give_no_secret(api, account, workshop, shell):
    terminal = shell_terminal(api, shell, account)
    result = api.command(terminal, forge(workshop, "memory"), timeoutMs=20_000)
    assert_not_forged(result, "the shell's memory")
    assert "mem: Permission denied" in result["output"] and "ptrace: Operation not permitted" in result["output"]


@shells
def test_stolen_typed_input_gives_no_secret(api, account, workshop, shell):
    """A program that left the session keeping the terminal reads what the service types for the next command:
    it eats that command, and what it forges from it is only output; the command is never reported done."""
    terminal = shell_terminal(api, shell, account)
    go, stopped = workshop / f"go-{terminal}", workshop / f"stopped-{terminal}"
    started = api.command(terminal, f"{PYTHON} {workshop / 'forge.py'} typed $$ {go} {stopped} &", timeoutMs=20_000)
    assert started["exitCode"] == 0, started
    go.touch()
    wait_for(stopped.exists, 20, "the thief stopping the shell")
    result = api.command(terminal, "echo ran; (exit 5)", timeoutMs=3000)
    assert result["status"] == "running" and result["exitCode"] is None, result
    # The thief prints its report once it has read what was typed: on a loaded machine, after the wait above ends.
    wait_for(lambda: "forged from typed input" in api.full_output(terminal), 20, "the thief's report")
    output = api.full_output(terminal)
    assert "forged from typed input: 0 candidates" in output and "ran" not in output.split("forged from")[1], output


# The parser


def test_a_bare_introducer_cannot_swallow_the_marker_after_it():
    parser = MarkerParser()
    pieces = parser.feed(f"x{ESC}]6973;junk".encode()) + parser.feed(f"{ESC}]6973;s3;E;cmd_1_abcdef;5\a".encode())
    markers = [piece for piece in pieces if isinstance(piece, Marker)]
    assert [(marker.token, marker.kind, marker.data) for marker in markers] == [("s3", "E", "cmd_1_abcdef;5")]
    assert b"".join(piece for piece in pieces if isinstance(piece, bytes)) == f"x{ESC}]6973;junk".encode()


@shells
def test_a_printed_bare_introducer_does_not_hide_the_commands_end(api, account, shell):
    terminal = shell_terminal(api, shell, account)
    result = api.command(terminal, r"printf 'x\033]6973;'; (exit 5)", timeoutMs=20_000)
    assert result["status"] == "completed" and result["exitCode"] == 5, result
    assert result["output"] == f"x{ESC}]6973;", result


# Execute-only copies, and what health says


def test_a_sealed_shell_is_execute_only_and_follows_an_upgrade():
    from terminals.runtime.sealed import SealedShells

    place = Path(tempfile.mkdtemp(prefix="terminals-sealed-"))
    place.chmod(0o711)  # other accounts must be able to reach the copies
    original = place / "bin" / "sh"
    original.parent.mkdir()
    shutil.copyfile("/bin/dash", original)
    copies = SealedShells(place / "sealed" / "shells")
    copy = Path(copies.copy_of(str(original)))
    assert copy.name == "sh" and stat.S_IMODE(copy.stat().st_mode) == 0o111 and copy.stat().st_uid == 0
    assert stat.S_IMODE(copy.parent.stat().st_mode) == 0o711
    original.write_bytes(Path("/bin/bash").read_bytes())  # the system's shell upgraded in place
    assert Path(copies.copy_of(str(original))).read_bytes() == original.read_bytes()
    assert not copies.problem
    shutil.rmtree(place)


def test_health_says_whether_commands_can_be_forged_on_this_machine(api, account):
    integrity = api.get("/api/health").json()["data"]["worker"]["commandIntegrity"]
    injection = Path("/proc/sys/dev/tty/legacy_tiocsti").read_text().strip() != "0"
    assert integrity["terminalAccount"] == "other" and integrity["secretDelivery"] == "pipe"
    assert integrity["keystrokeInjection"] is injection
    assert integrity["holds"] is (not injection)
    assert any("dev.tty.legacy_tiocsti=0" in problem for problem in integrity["problems"]) is injection


def test_health_says_root_terminals_can_forge(alice):
    integrity = alice.get("/api/health").json()["data"]["worker"]["commandIntegrity"]
    assert integrity["terminalAccount"] == "root" and integrity["holds"] is False
    assert "TERMINALS_RUN_AS" in integrity["problems"][0]


@pytest.mark.parametrize("shell", [BASH, ZSH], ids=["bash", "zsh"])
def test_keystrokes_a_program_injects_show_as_typed_commands(api, account, shell):
    """TIOCSTI is the channel this service cannot close (SECURITY.md): where the kernel allows it, what a program
    pushes into its shell's input runs as typed, and the hooks report it as a command typed in the shell."""
    terminal = shell_terminal(api, shell, account)
    inject = (f"{PYTHON} -c \"import fcntl, termios\n"
              "try:\n [fcntl.ioctl(0, termios.TIOCSTI, bytes([c])) for c in b'echo injected-$((6*7))\\n']\n"
              "except OSError as error: print('refused:', error.strerror)\"")
    result = api.command(terminal, inject, timeoutMs=20_000)
    assert result["exitCode"] == 0, result
    if Path("/proc/sys/dev/tty/legacy_tiocsti").read_text().strip() == "0":
        assert "refused" in result["output"], result
        return
    wait_for(lambda: "injected-42" in api.full_output(terminal), 20, "the injected line to run")

    def reported():
        listed = api.get(f"/api/terminals/{terminal}/commands").json()["data"]["commands"]
        return any(entry["source"] == "shell" and "injected" in entry["command"] for entry in listed)

    wait_for(reported, 20, "the injected line among the commands typed in the shell")


def test_health_names_a_sealed_shell_directory_other_accounts_cannot_enter(django_db_setup, account):
    closed = Path(tempfile.mkdtemp(prefix="terminals-sealed-closed-"))  # 0700: other accounts cannot enter
    server = start_embedded(TERMINALS_RUN_AS=account[0], TERMINALS_SEALED_SHELL_DIR=str(closed / "shells"))
    try:
        response = requests.get(f"{server.url}/api/health", timeout=30)
        integrity = response.json()["data"]["worker"]["commandIntegrity"]
        assert integrity["holds"] is False and "cannot enter" in integrity["sealedShells"]["problem"], integrity
        assert any("TERMINALS_SEALED_SHELL_DIR" in problem for problem in integrity["problems"]), integrity
    finally:
        server.stop()
        shutil.rmtree(closed, ignore_errors=True)


@shells
def test_tracing_the_shell_prints_no_secret(api, account, shell):
    """Under set -x a shell prints the commands its hooks run; those carry the secret, so the hooks stop tracing."""
    terminal = shell_terminal(api, shell, account)
    assert api.command(terminal, "set -x", timeoutMs=20_000)["exitCode"] == 0
    result = api.command(terminal, "echo traced; (exit 5)", timeoutMs=20_000)
    assert result["exitCode"] == 5 and "traced" in result["output"], result
    output = api.full_output(terminal)
    assert "+ echo traced" in output or "> echo traced" in output, output  # tracing is on
    assert not re.search(r"(?<![0-9a-f])[0-9a-f]{24,32}(?![0-9a-f])", output), output


def test_a_sealed_shell_is_not_made_where_another_account_could_swap_it():
    from terminals.runtime.sealed import SealedShells

    place = Path(tempfile.mkdtemp(prefix="terminals-sealed-"))
    place.chmod(0o777)  # anyone may rename what is in it
    copies = SealedShells(place / "shells")
    assert copies.copy_of("/bin/dash") is None
    assert "not root's alone" in copies.problem and str(place) in copies.problem
    shutil.rmtree(place)
