"""The `terminals` command: run a command remotely for its exit code, list, read, type into, end and attach to
terminals. Like ssh, it exits with the remote exit code (128 + N for signal N) and with 255 when the service could
not be reached or refused. The key comes from TERMINALS_API_KEY only, never from the command line, where other
users of the machine could read it."""

from __future__ import annotations

import argparse
import codecs
import os
import sys
import threading
import time
from typing import BinaryIO, List, Optional, Sequence

from .client import Client, Stream, Terminal
from .errors import ServerError, TerminalInactive, TerminalsError

OWN_FAILURE = 255
INPUT_CHUNK = 16 * 1024  # bytes of standard input per request, well under TERMINALS_MAX_INPUT_BYTES


def main(argv: Optional[Sequence[str]] = None) -> None:
    arguments = parser().parse_args(argv)
    if not os.environ.get("TERMINALS_API_KEY"):
        fail("no API key: set TERMINALS_API_KEY (create one in the dashboard, or with manage.py create_api_key)")
    try:
        with Client(arguments.url) as client:
            status = arguments.action(client, arguments)
    except TerminalsError as error:
        fail(error.message)
    except KeyboardInterrupt:
        status = 130
    except BrokenPipeError:  # `terminals logs ID | head`: the reader left, as for any Unix filter
        sys.stderr.close()
        status = 141
    sys.exit(status)


def fail(message: str) -> None:
    print(f"terminals: {message}", file=sys.stderr)
    sys.exit(OWN_FAILURE)


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="terminals", description="Use the persistent terminal service "
                                  "(TERMINALS_URL, and the key in TERMINALS_API_KEY).")
    top.add_argument("--url", default=None, help="the service (default: TERMINALS_URL, else http://127.0.0.1:3001)")
    commands = top.add_subparsers(dest="command", required=True)

    run = commands.add_parser("run", help="run a program in a new terminal; exit with its exit code")
    run.add_argument("--cwd", default=None)
    run.add_argument("--name", default=None)
    run.add_argument("--keep", action="store_true", help="leave the terminal (and its output) for later")
    run.add_argument("argv", nargs=argparse.REMAINDER, metavar="-- CMD [ARGS...]")
    run.set_defaults(action=run_command)

    ls = commands.add_parser("ls", help="list terminals")
    ls.add_argument("--all", action="store_true", help="ended ones too")
    ls.set_defaults(action=list_terminals)

    logs = commands.add_parser("logs", help="print a terminal's output")
    logs.add_argument("id")
    logs.add_argument("--follow", "-f", action="store_true", help="go on printing until the process ends")
    logs.add_argument("--from-byte", type=int, default=None, help="start at this byte (default: the oldest held)")
    logs.set_defaults(action=print_logs)

    attach = commands.add_parser("attach", help="attach this terminal to a remote one (detach: ctrl-])")
    attach.add_argument("id")
    attach.add_argument("--detach-key", default="ctrl-]")
    attach.set_defaults(action=attach_terminal)

    send = commands.add_parser("send", help="type text (Enter added, as the API does)")
    send.add_argument("id")
    send.add_argument("text")
    send.add_argument("--no-newline", action="store_true")
    send.set_defaults(action=send_text)

    kill = commands.add_parser("kill", help="end a terminal's processes, keeping its output readable")
    kill.add_argument("id")
    kill.add_argument("--signal", default=None)
    kill.set_defaults(action=kill_terminal)

    close = commands.add_parser("close", help="end a terminal and free its output")
    close.add_argument("id")
    close.set_defaults(action=close_terminal)
    return top


def run_command(client: Client, arguments: argparse.Namespace) -> int:
    argv: List[str] = arguments.argv[1:] if arguments.argv[:1] == ["--"] else arguments.argv
    if not argv:
        fail("nothing to run: terminals run [--cwd D] [--name N] -- CMD [ARGS...]")
    # On pipes rather than a PTY: the input arrives exactly as piped, and its end closes the program's input.
    terminal = client.create(command=argv[0], args=argv[1:], pty=False, cwd=arguments.cwd, name=arguments.name)
    pump = threading.Thread(target=pipe_input, args=(terminal, sys.stdin.buffer), daemon=True)
    pump.start()
    try:
        stream = terminal.stream(from_byte=0)
        try:
            write_all(stream)
        except KeyboardInterrupt:  # Ctrl-C goes to the remote program, as a local one would get it
            terminal.signal("SIGINT")
            write_all(stream)
        status = stream.exit_status or terminal.wait(timeout=30)
        return status.code
    finally:
        if not arguments.keep:
            try:
                terminal.close()
            except TerminalsError:
                pass
        else:
            print(f"terminals: kept terminal {terminal.id}", file=sys.stderr)


def write_all(stream: Stream) -> None:
    out = sys.stdout.buffer
    for text in stream:
        out.write(text.encode("utf-8", errors="surrogateescape"))
        out.flush()


def pipe_input(terminal: Terminal, source: BinaryIO) -> None:
    """Sends standard input as it comes, whole characters only, then closes the program's input at its end."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    try:
        while True:
            data = os.read(source.fileno(), INPUT_CHUNK)
            text = decoder.decode(data, final=not data)
            if text:
                send_patiently(terminal, text, eof=False)
            if not data:
                send_patiently(terminal, "", eof=True)
                return
    except (TerminalInactive, OSError):
        return  # the program ended (or stdin is unreadable): nothing more to send
    except TerminalsError as error:
        print(f"terminals: input not sent: {error.message}", file=sys.stderr)


def send_patiently(terminal: Terminal, text: str, eof: bool) -> None:
    """Input waits while the program's input queue is full (WRITE_FAILED), as a local pipe would block."""
    while True:
        try:
            terminal.send(text, newline=False, eof=eof)
            return
        except ServerError as error:
            if error.code != "WRITE_FAILED":
                raise
            time.sleep(0.2)


def list_terminals(client: Client, arguments: argparse.Namespace) -> int:
    for terminal in client.terminals(status="all" if arguments.all else "active"):
        info = terminal.info
        what = " ".join([info.get("command") or info.get("shell") or "", *info.get("args", [])]).strip()
        print(f"{terminal.id}  {info.get('status', ''):<9}  {info.get('created', '')}  "
              f"{info.get('name') or '-'}  {what}")
    return 0


def print_logs(client: Client, arguments: argparse.Namespace) -> int:
    terminal = client.terminal(arguments.id)
    if arguments.follow:
        write_all(terminal.stream(from_byte=arguments.from_byte))
        return 0
    out = sys.stdout.buffer
    position = arguments.from_byte or 0
    while True:
        chunk = terminal.read(from_byte=position)
        out.write(chunk.text.encode("utf-8", errors="surrogateescape"))
        if chunk.next == position or chunk.eof:
            break
        position = chunk.next
    out.flush()
    return 0


def send_text(client: Client, arguments: argparse.Namespace) -> int:
    Terminal(client, {"terminalId": arguments.id}).send(arguments.text, newline=not arguments.no_newline)
    return 0


def kill_terminal(client: Client, arguments: argparse.Namespace) -> int:
    Terminal(client, {"terminalId": arguments.id}).kill(arguments.signal)
    return 0


def close_terminal(client: Client, arguments: argparse.Namespace) -> int:
    Terminal(client, {"terminalId": arguments.id}).close()
    return 0


def attach_terminal(client: Client, arguments: argparse.Namespace) -> int:
    from ._attach import attach

    return attach(client.terminal(arguments.id), arguments.detach_key)


