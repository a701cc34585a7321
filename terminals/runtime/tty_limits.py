"""What a PTY can hold: a window of at most 16 bits a side, and lines of at most 4095 bytes while the program reads
whole lines (canonical mode)."""

from __future__ import annotations

import fcntl
import re
import struct
import termios

from .errors import WindowSizeInvalid

# In canonical mode the kernel's line discipline holds 4096 bytes per line, the
# newline included; what goes past that is dropped without a word (n_tty.c).
MAX_CANONICAL_LINE = 4095
LINE_ENDS = re.compile(rb"[\n\r\x04]")
LARGEST_WINDOW_SIDE = 0xFFFF  # struct winsize holds each side in an unsigned short


def longest_line(data: bytes) -> int:
    return max(len(line) for line in LINE_ENDS.split(data))


def check_window_size(cols: int, rows: int, largest: tuple[int, int] = (LARGEST_WINDOW_SIDE, LARGEST_WINDOW_SIDE)) -> None:
    """Refuses a size the PTY cannot hold (struct.error, a 500, before) or past the caller's limits (cols, rows).
    The service checks sizes before they reach a worker (sessions.checked_window_size); this is the last guard."""
    for name, value, limit in (("cols", cols, largest[0]), ("rows", rows, largest[1])):
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= limit:
            raise WindowSizeInvalid(f"{name}: must be a whole number from 1 to {limit}", fields={name: [f"from 1 to {limit}"]})


def set_window_size(fd: int, cols: int, rows: int) -> None:
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
