"""What the keeper (keeper.py) and the worker it runs (keeping.py) say to each other, and how: JSON messages on a
Unix socket pair (SOCK_SEQPACKET, one message per packet), with the fds they hand over attached (SCM_RIGHTS); and
the environment variables the keeper starts its worker with."""

from __future__ import annotations

import json
import os
import signal
import socket

FD_VARIABLE = "TERMINALS_KEEPER_FD"
# The keeper's pid and an id of its own, the same for every worker it runs: the worker registers under that id and
# names the keeper's pid as the one holding its terminals (their control groups, and what other workers of the
# host check to tell whether it is gone), so a restart is not a departure.
PID_VARIABLE, ID_VARIABLE = "TERMINALS_KEEPER_PID", "TERMINALS_KEEPER_ID"
REHEARSAL_VARIABLE = "TERMINALS_KEEPER_REHEARSAL"  # a rehearsal: check every terminal held, then wait to go on
MESSAGE_BYTES = 1 << 16  # the longest message either side sends
MAX_FDS = 4  # fds sent with one message
HANDOVER_SIGNAL = signal.SIGUSR1  # to the worker: hand the terminals over and exit, leaving them running


def send(sock: socket.socket, message: dict, fds: list[int] = ()) -> None:
    data = json.dumps(message, separators=(",", ":")).encode()
    if len(data) > MESSAGE_BYTES:
        raise ValueError(f"a keeper message is at most {MESSAGE_BYTES} bytes; this one is {len(data)}")
    if fds:
        socket.send_fds(sock, [data], list(fds))
    else:
        sock.send(data)


def receive(sock: socket.socket) -> tuple[dict | None, list[int]]:
    """The next message and the fds that came with it; (None, []) when the other end has closed."""
    data, fds, _, _ = socket.recv_fds(sock, MESSAGE_BYTES, MAX_FDS)
    if not data:
        for fd in fds:
            os.close(fd)
        return None, []
    return json.loads(data), fds


def describe(returncode: int) -> str:
    if returncode < 0:
        return f"killed by {signal.Signals(-returncode).name}"
    return f"exit status {returncode}"
