"""Starting a terminal: what it runs, as whom, where, and whether it is recorded."""

from __future__ import annotations

import uuid

from django.conf import settings

from ..audit import Actor
from ..environment import (
    AccountMissing,
    build_env,
    invalid,
    resolve_cwd,
    resolve_program,
    resolve_shell,
    run_as_account,
    shell_argv,
    validate_env,
)
from ..remote import client as worker_client
from ..remote import protocol
from .checks import checked_window_size, require_audit_writable
from .routing import _creation_channel

def session_create(
    *,
    actor: Actor,
    shell=None,
    command=None,
    args=None,
    cwd=None,
    env=None,
    cols=80,
    rows=24,
    name="",
    pty=True,
    output_byte_limit=None,
    session_id="",
    login=False,
    host=None,
    record=False,
) -> dict:
    """Starts a shell (with login, as a login shell), or with command a program run directly (no shell in between).
    With record (or by the recording policy), what it shows is recorded (recordings.py)."""
    cols, rows = checked_window_size(cols, rows)
    username = actor.user.get_username()
    record = should_record(username, record)
    account = _run_as(username)
    directory = resolve_cwd(cwd, account, username=username)
    requested_env = validate_env(env or {})
    if command:
        environment, fields = _program_to_run(command, args, pty, requested_env, account, directory)
    else:
        environment, fields = _shell_to_run(shell, login, pty, requested_env, account)
    run_as = account.name if account is not None else ""
    creation = _creation_audit(actor, fields, run_as=run_as, cwd=directory, name=name, env=requested_env,
                               recorded=record)
    return _create_on_a_worker(
        host,
        id=str(uuid.uuid4()),
        owner_id=actor.user.pk,
        api_key_id=actor.api_key.pk if actor.api_key is not None else None,
        name=name or "",
        cwd=directory,
        env=environment,
        cols=cols,
        rows=rows,
        output_byte_limit=output_byte_limit,
        session_id=session_id or "",
        run_as=run_as,
        username=username,
        record=record,
        creation=creation,
        **fields,
    )


def _program_to_run(command: str, args, pty: bool, requested_env: dict, account, directory: str) -> tuple[dict, dict]:
    """(its environment, the request's fields) for a program run directly, found on the PATH it will have."""
    environment = build_env(requested_env, shell="", account=account)
    program = resolve_program(command, environment["PATH"], directory)
    return environment, {"kind": "command", "shell": "", "command": program, "args": list(args or []),
                         "argv": [program, *(args or [])], "pty": pty}


def _shell_to_run(shell, login: bool, pty: bool, requested_env: dict, account) -> tuple[dict, dict]:
    """(its environment, the request's fields) for a shell, a login shell with login."""
    if not pty:
        raise invalid("pty", "a shell needs a PTY; pty: false is for commands")
    shell_path = resolve_shell(shell)
    environment = build_env(requested_env, shell=shell_path, account=account)
    return environment, {"kind": "shell", "shell": shell_path,
                         "argv": shell_argv(shell_path) + (["-l"] if login else [])}


def _creation_audit(actor: Actor, fields: dict, *, run_as: str, cwd: str, name, env: dict, recorded: bool) -> dict:
    """The creation's audit row, which the worker writes: the worker writes the terminal's record before it starts
    anything (a database that cannot take it refuses the create, 503 AUDIT_UNAVAILABLE, with nothing started), and
    this audit row with the pid in the same transaction, or ends the terminal: none runs off the record."""
    return {"actor": actor.as_dict(), "details": {
        "shell": fields["shell"], "command": fields.get("command", ""), "run_as": run_as,
        "args": fields.get("args", []), "cwd": cwd, "name": name or "", "env": sorted(env),
        "recorded": recorded,
    }}


def _create_on_a_worker(host: str | None, **request) -> dict:
    """Has a worker start the terminal: the one on host, or any."""
    # A locked database is told as what it is, within its busy timeout: asked first, the worker would still be
    # waiting for the lock when this process stops waiting for it (WORKER_TIMEOUT_MS), a 503 WORKER_UNAVAILABLE.
    require_audit_writable()
    return worker_client.request_sync(
        _creation_channel(host),
        protocol.CREATE,
        host=host or "",
        **request,
    )


def should_record(username: str, requested: bool) -> bool:
    """A terminal is recorded when its creation asks, or when the policy records all, or all of its user's."""
    config = settings.TERMINALS
    return bool(requested) or config["RECORD_ALL"] or username in config["RECORD_USERS"]


def _run_as(username: str):
    """The user's account; on a user's first terminal, a worker (which runs as root) makes it."""
    try:
        return run_as_account(username)
    except AccountMissing:
        worker_client.request_sync(protocol.CREATE_CHANNEL, protocol.ACCOUNT, username=username)
        return run_as_account(username)
