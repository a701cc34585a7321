"""`terminals attach`: this terminal becomes the remote one, as `manage.py attach` does (docs/live.md): raw
keys in, output out, the window size sent, a detach key to leave it running; piped input is typed as it is."""

from __future__ import annotations

import codecs
import contextlib
import os
import shutil
import signal
import sys
import threading
from typing import Any, Iterator

from .client import Stream, Terminal
from .errors import InvalidInput


def detach_byte(name: str) -> int:
    """ "ctrl-]" -> 0x1d, "ctrl-a" -> 0x01."""
    key = name.lower()
    for prefix in ("ctrl-", "^"):
        if key.startswith(prefix):
            key = key[len(prefix):]
    if len(key) != 1 or not 0x40 <= ord(key.upper()) <= 0x5F:
        raise InvalidInput(f"--detach-key: {name!r} is not a control key such as ctrl-]", code="INVALID_INPUT")
    return ord(key.upper()) - 0x40


@contextlib.contextmanager
def raw_mode(fd: int) -> Iterator[None]:
    import termios
    import tty

    saved = termios.tcgetattr(fd)
    tty.setraw(fd)
    try:
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def attach(terminal: Terminal, detach_key: str) -> int:
    """Exit status: the remote one (128 + N for a signal), 0 after the detach key."""
    detach = detach_byte(detach_key)
    stream = terminal.stream()
    interactive = os.isatty(0)
    detached = threading.Event()
    keys = threading.Thread(target=_type, args=(stream, detach, interactive, detached), daemon=True)
    out = sys.stdout.buffer
    with raw_mode(0) if interactive else contextlib.nullcontext():
        if interactive:
            _watch_window(stream)
        keys.start()
        for text in stream:
            out.write(text.encode("utf-8", errors="surrogateescape"))
            out.flush()
    if detached.is_set():
        print(f"\r\n[detached; terminal {terminal.id} keeps running]", file=sys.stderr)
        return 0
    return stream.exit_status.code if stream.exit_status else 255


def _type(stream: Stream, detach: int, interactive: bool, detached: threading.Event) -> None:
    """Passes keys (or piped input) to the remote terminal until the detach key or the end of input."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    while True:
        try:
            data = os.read(0, 4096)
        except OSError:
            return
        if interactive and detach in data:
            data = data[:data.index(detach)]
            detached.set()
        text = decoder.decode(data, final=not data)
        if text:
            _send_when_open(stream, {"type": "input", "data": text})
        if detached.is_set():
            stream.close()
            return
        if not data:
            return


def _send_when_open(stream: Stream, frame: Any) -> None:
    """Input typed before the connection is open waits for it (it opens at the start of the iteration)."""
    for _ in range(500):
        if stream._connection is not None:
            break
        threading.Event().wait(0.01)
    stream.send_frame(frame)


def _watch_window(stream: Stream) -> None:
    def resize(*_: Any) -> None:
        size = shutil.get_terminal_size()
        threading.Thread(target=_send_when_open, args=(stream, {"type": "resize", "cols": size.columns,
                                                                "rows": size.lines}), daemon=True).start()

    signal.signal(signal.SIGWINCH, resize)
    resize()
