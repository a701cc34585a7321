"""Every message between web processes and terminal workers on the channel layer.

A web process sends a request to a worker and waits for one reply on a
channel of its own. Every request carries:

    type      one of the request types below
    reply_to  the channel the reply goes to
    deadline  the time after which the caller has given up, in unix seconds by the
              database's clock (clock.py), which every host shares; a worker drops
              requests past it, so a creation nobody waits for never runs

Creations go to CREATE_CHANNEL, a queue every live worker takes from, so a
new terminal lands on whichever worker is free; a worker with no room left
passes it on to a live worker that has room. Every other request goes to
the channel of the worker that hosts the terminal (its TerminalSession.worker).

The reply is {"type": REPLY, "ok": True, "data": {...}} or
{"type": REPLY, "ok": False, "error": {"code", "message", "details"}}; its data
is already in the shape the REST API returns.
"""

CREATE_CHANNEL = "terminals.create"
# Reply, worker, live-client and follow channels all come from layer.new_channel() with
# its default prefix: channels_redis keeps one Redis list per process and prefix and lets
# one receive at a time block on a list, so a second prefix would wait behind the first.

# Requests, with their fields besides type/reply_to/deadline. "read" is a dict of
# read options: mode, head_lines, tail_lines, max_lines, strip_ansi.
CREATE = "terminal.create"  # id, owner_id, api_key_id, name, shell, argv, cwd, env, cols, rows,
#                             kind ("shell" | "command"), pty, command, args, output_byte_limit, session_id,
#                             run_as (the account, "" for the worker's own), username (the owner's)
#                             record (whether to record it; the worker adds "recording": where, on which host)
#                             declined (ids of the full workers that passed it on to another worker's channel)
#                             creation (the audit row the worker writes with the pid: actor, as Actor.as_dict(),
#                             and details)
INPUT = "terminal.input"  # id, data (str, sent as UTF-8), close (end of input, pipes only)
OUTPUT = "terminal.output"  # id, since, since_time (unix time), stream, read
BYTES = "terminal.bytes"  # id, from_byte, max_bytes, strip_ansi, stream
NEWEST = "terminal.newest"  # id, limit: the newest limit bytes as plain text (the Agent Client Protocol's output)
STATS = "terminal.stats"  # id
INFO = "terminal.info"  # id: busy, foreground process, running command, waiting for input
SCREEN = "terminal.screen"  # id: the screen as an emulator renders it
RESIZE = "terminal.resize"  # id, cols, rows
SIGNAL = "terminal.signal"  # id, signal (name): to the foreground process group
WAIT = "terminal.wait"  # id, timeout (seconds): until the process exits
KILL = "terminal.kill"  # id, signal, grace: ends the processes, keeps the output readable
TERMINATE = "terminal.terminate"  # id, signal (name), grace (seconds): ends and frees the terminal
COMMAND_RUN = "terminal.command.run"  # id, command, timeout, wait, read, actor (who, for the audit)
COMMAND_GET = "terminal.command.get"  # id, command_id, read
COMMAND_WAIT = "terminal.command.wait"  # id, command_id, timeout, read
COMMAND_LIST = "terminal.command.list"  # id
ATTACH = "terminal.attach"  # id, subscriber (a channel), from_byte: stream the output there from from_byte (None: oldest); who: the user
DETACH = "terminal.detach"  # id, subscriber; sent with no reply_to, nothing answers it
RENEW = "worker.viewers.renew"  # subscribers: [[terminal id, channel], ...], the leases a web process renews
#                                 (leases.py); no reply_to, nothing answers it
RECORDING_READ = "worker.recording.read"  # path, offset, length: part of a recording file on this worker's host
RECORDING_CHUNK_BYTES = 256 * 1024  # the most one RECORDING_READ answers, well under a channel message's size
ACCOUNT = "worker.account"  # username: makes the user's own Unix account (per-user), answers its name and home
PING = "worker.ping"  # nothing; answers the worker's id and how many terminals it hosts
WAKE = "worker.wake"  # nothing: sent by a worker to its own channel to end its wait as it hands over; no reply

# Pushed by the worker to an attached channel, in order (see streaming.py).
STREAM_OUTPUT = "terminal.stream.output"  # terminal, offset, data (bytes, whole characters)
STREAM_GAP = "terminal.stream.gap"  # terminal, from, to: bytes evicted before they could be sent
STREAM_EXIT = "terminal.stream.exit"  # terminal, exitCode, signal, offset
STREAM_RESTARTING = "terminal.stream.restarting"  # terminal, fromByte: the worker restarts; reattach from there
STREAM_DROPPED = "terminal.stream.dropped"  # terminal: the subscriber's lease expired, nothing more comes (leases.py)

REPLY = "terminal.reply"


def reply_ok(data: dict) -> dict:
    return {"type": REPLY, "ok": True, "data": data}


def reply_error(code: str, message: str, details: dict | None = None) -> dict:
    return {"type": REPLY, "ok": False, "error": {"code": code, "message": message, "details": details or {}}}
