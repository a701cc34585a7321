"""What a new terminal runs in: allowed shells, its working directory and its environment."""

from __future__ import annotations

import os
import re
import shutil
from functools import lru_cache
from pathlib import Path

from django.conf import settings

from .exceptions import Forbidden, InvalidInput
from .runtime.confinement import Account

ETC_SHELLS = "/etc/shells"
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

# Only these variables of the service's own environment reach a terminal: none
# of its settings or secrets (SECRET_KEY, DATABASE_URL, REDIS_URL) do.
INHERITED_VARIABLES = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR")

# Friendly to programs driven by agents: no pager waits for a keypress.
TERMINAL_DEFAULTS = {"TERM": "xterm-256color", "PAGER": "cat", "GIT_PAGER": "cat", "LANG": "C.UTF-8"}


@lru_cache(maxsize=1)
def _etc_shells() -> tuple[str, ...]:
    try:
        with open(ETC_SHELLS) as shells:
            return tuple(dict.fromkeys(line.strip() for line in shells if line.strip().startswith("/")))
    except OSError:
        return ("/bin/sh",)


def allowed_shells() -> tuple[str, ...]:
    configured = settings.TERMINALS["ALLOWED_SHELLS"]
    return tuple(configured) if configured else _etc_shells()


def default_shell() -> str:
    configured = settings.TERMINALS["DEFAULT_SHELL"]
    if configured:
        return configured
    allowed = allowed_shells()
    for candidate in (os.environ.get("SHELL", ""), "/bin/bash", "/usr/bin/bash", "/bin/sh"):
        if candidate in allowed and _is_executable(candidate):
            return candidate
    return allowed[0]


def resolve_shell(shell: str | None) -> str:
    """Returns the absolute path of an allowed shell; a bare name like "bash" is looked up among them."""
    if not shell:
        return default_shell()
    allowed = allowed_shells()
    if "/" not in shell:
        matches = [path for path in allowed if Path(path).name == shell and _is_executable(path)]
        if matches:
            return matches[0]
    elif shell in allowed and _is_executable(shell):
        return shell
    raise invalid("shell", f"{shell!r} is not an allowed shell", allowed=list(allowed))


def invalid(field: str, problem: str, **extra) -> InvalidInput:
    """An INVALID_INPUT naming the field, with details shaped like a serializer's."""
    return InvalidInput(f"{field}: {problem}", {"fields": {field: [problem]}, **extra})


def _is_executable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


def run_as_account(username: str) -> Account | None:
    """The Unix account a user's terminals run as under TERMINALS_RUN_AS; None: the service's own."""
    policy = settings.TERMINALS["RUN_AS"]
    if not policy:
        return None
    name = settings.TERMINALS["RUN_AS_PREFIX"] + username if policy == "per-user" else policy
    try:
        account = Account.lookup(name)
    except KeyError:
        raise Forbidden(f"there is no Unix account {name!r} for terminals to run as", {"account": name}) from None
    if policy == "per-user" and account.uid == 0:
        # A Django user named "root" must not get a root shell by its name alone.
        raise Forbidden(f"terminals of user {username!r} would run as root; refused", {"account": name})
    return account


def cwd_root() -> Path | None:
    root = settings.TERMINALS["CWD_ROOT"]
    return Path(root).resolve() if root else None


def default_cwd() -> str:
    configured = settings.TERMINALS["DEFAULT_CWD"]
    root = cwd_root()
    return configured or (str(root) if root else os.getcwd())


def resolve_cwd(cwd: str | None, account: Account | None = None) -> str:
    """Returns the real path of an existing directory, inside TERMINALS_CWD_ROOT when that is set.

    With an account, the default is its home directory (when nothing else is configured) and
    the directory must be one the account can enter.
    """
    root = cwd_root()
    if not cwd:
        configured = settings.TERMINALS["DEFAULT_CWD"] or (str(root) if root else "")
        home_fits = account is not None and os.path.isdir(account.home) and account.can_enter(account.home)
        cwd = configured or (account.home if home_fits else default_cwd())
    if "\x00" in cwd:
        raise invalid("cwd", "must not contain NUL")
    base = root or Path(default_cwd())
    # Resolving follows symlinks and "..", so the containment check sees where the path really leads.
    path = (base / cwd).resolve()
    if root is not None and path != root and root not in path.parents:
        raise invalid("cwd", f"{cwd!r} is outside the allowed root")
    if not path.is_dir():
        raise invalid("cwd", f"{cwd!r} is not an existing directory")
    if not os.access(path, os.X_OK):
        raise invalid("cwd", f"{cwd!r} cannot be entered")
    if account is not None and not account.can_enter(str(path)):
        raise invalid("cwd", f"{cwd!r} cannot be entered by account {account.name!r}")
    return str(path)


def validate_env(env: dict[str, str]) -> dict[str, str]:
    config = settings.TERMINALS
    if len(env) > config["MAX_ENV_VARS"]:
        raise invalid("env", f"at most {config['MAX_ENV_VARS']} variables")
    for name, value in env.items():
        if not ENV_NAME.match(name):
            raise invalid("env", f"{name!r} is not a valid variable name")
        if not isinstance(value, str) or "\x00" in value:
            raise invalid("env", f"{name} must be a string without NUL")
        if len(value.encode()) > config["MAX_ENV_VALUE_BYTES"]:
            raise invalid("env", f"{name} is longer than {config['MAX_ENV_VALUE_BYTES']} bytes")
    return env


def build_env(requested: dict[str, str], *, shell: str, account: Account | None = None) -> dict[str, str]:
    """The terminal's environment: the inherited allowlist, the defaults, then the caller's own."""
    env = {name: os.environ[name] for name in INHERITED_VARIABLES if name in os.environ and name != "TZ"}
    if account is not None:
        env.update(HOME=account.home, USER=account.name, LOGNAME=account.name)
    if settings.ORIGINAL_TZ:
        env["TZ"] = settings.ORIGINAL_TZ
    env.setdefault("PATH", os.defpath)
    for name, value in TERMINAL_DEFAULTS.items():
        if name == "LANG":
            env.setdefault(name, value)
        else:
            env[name] = value
    env["SHELL"] = shell
    env.update(requested)
    return env


def resolve_program(command: str, path: str, cwd: str) -> str:
    """Returns the absolute path of the program a command terminal runs, found like a shell would."""
    if "\x00" in command:
        raise invalid("command", "must not contain NUL")
    if "/" in command:
        candidate = os.path.join(cwd, command)
        found = candidate if _is_executable(candidate) else None
    else:
        found = shutil.which(command, path=path)
    if found is None:
        raise invalid("command", f"{command!r} is not an executable program (looked in PATH {path})")
    return os.path.abspath(found)


def shell_argv(shell: str) -> list[str]:
    # setsid(1) looks argv[0] up on PATH; an absolute path avoids the lookup.
    return [shutil.which(shell) or shell]
