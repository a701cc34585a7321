"""Every message between web processes and terminal workers on the channel layer.

A web process sends a request to a worker and waits for one reply on a
channel of its own. Every request carries:

    type      one of the request types below
    reply_to  the channel the reply goes to
    deadline  unix time after which the caller has given up; a worker drops
              requests past it, so a creation nobody waits for never runs

Creations go to CREATE_CHANNEL, a queue every live worker takes from, so a
new terminal lands on whichever worker is free. Every other request goes to
the channel of the worker that hosts the terminal (its TerminalSession.worker).

The reply is {"type": REPLY, "ok": True, "data": {...}} or
{"type": REPLY, "ok": False, "error": {"code", "message", "details"}}; its data
is already in the shape the REST API returns.
"""

CREATE_CHANNEL = "terminals.create"
REPLY_PREFIX = "terminals.reply."
WORKER_PREFIX = "terminals.worker."

# Requests, with their fields besides type/reply_to/deadline.
CREATE = "terminal.create"  # id, owner_id, api_key_id, name, shell, argv, cwd, env, cols, rows
INPUT = "terminal.input"  # id, data (str, sent as UTF-8)
OUTPUT = "terminal.output"  # id, since, mode, head_lines, tail_lines, max_lines
STATS = "terminal.stats"  # id
TERMINATE = "terminal.terminate"  # id, signal (name), grace (seconds)
PING = "worker.ping"  # nothing; answers the worker's id and how many terminals it hosts

REPLY = "terminal.reply"

REQUEST_TYPES = (CREATE, INPUT, OUTPUT, STATS, TERMINATE, PING)


def reply_ok(data: dict) -> dict:
    return {"type": REPLY, "ok": True, "data": data}


def reply_error(code: str, message: str, details: dict | None = None) -> dict:
    return {"type": REPLY, "ok": False, "error": {"code": code, "message": message, "details": details or {}}}
