"""What a new terminal runs in: allowed shells, its working directory and its environment."""

from __future__ import annotations

import json
import os
import pwd
import re
import shlex
import shutil
from functools import lru_cache
from pathlib import Path

from django.conf import settings

from .exceptions import Forbidden, InvalidInput
from .runtime.accounts import AccountRefused, lookup_own, unix_name
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


PER_USER, SERVICE = "per-user", "service"


def run_as_policy(euid: int | None = None) -> str:
    """Who terminals run as: "per-user", "service" (the service's own account) or the name of one account.

    Unset, it is the safe choice wherever the service can switch accounts (it runs as root): "per-user".
    """
    configured = settings.TERMINALS["RUN_AS"]
    if configured is None:
        return PER_USER if (os.geteuid() if euid is None else euid) == 0 else SERVICE
    return configured or SERVICE  # empty: the old spelling of "service"


def isolation() -> dict:
    """Whether users are kept from the service and from each other, and if not, why and what to do."""
    policy = run_as_policy()
    if policy == PER_USER:
        return {"usersSeparated": True, "runAs": policy, "problem": None}
    if policy != SERVICE:
        problem = (f"every user's terminals run as the one account {policy!r}: kept from the service's files, not "
                   "from each other. Set TERMINALS_RUN_AS=per-user (the service must run as root) to separate users")
    elif os.geteuid() == 0:
        problem = ("terminals run as the service's own account, root: any user's terminal can read and change the "
                   "service's database, secret key and every other user's terminals and files. Unset "
                   "TERMINALS_RUN_AS (or set it to per-user) to give each user an account of their own")
    else:
        problem = (f"terminals run as the service's own account (uid {os.geteuid()}): any user's terminal can read "
                   "and change the service's database, secret key and every other user's terminals and files. "
                   "Run the service as root (as in most containers) so each user's terminals run as an account of "
                   "their own, or keep to one user per service")
    if settings.TERMINALS["RUN_AS"] == "":
        problem += " (TERMINALS_RUN_AS is set but empty: read as 'service')"
    return {"usersSeparated": False, "runAs": policy, "problem": problem}


def separation_warning() -> str:
    """One paragraph for an operator when users are not separated; empty when they are."""
    report = isolation()
    if report["usersSeparated"]:
        return ""
    return f"WARNING: users are NOT separated: {report['problem']}."


def homes_base() -> Path:
    """Where users' homes (per-user) or workspaces (service) are made."""
    configured = settings.TERMINALS["HOMES"]
    if configured:
        return Path(configured)
    if os.geteuid() == 0:
        return Path("/home")
    return Path(pwd.getpwuid(os.geteuid()).pw_dir) / "terminal-homes"


def own_account_name(username: str) -> str:
    return unix_name(username, settings.TERMINALS["RUN_AS_PREFIX"])


def run_as_account(username: str) -> Account | None:
    """The Unix account a user's terminals run as; None: the service's own.

    Per user, the account must be one the service made for this user; while there is none yet, AccountMissing
    (a 403) is raised, and the caller has a worker make it (sessions/creation.py).
    """
    policy = run_as_policy()
    if policy == SERVICE:
        return None
    if policy == PER_USER:
        return own_account(username)
    try:
        return Account.lookup(policy)
    except KeyError:
        raise Forbidden(f"there is no Unix account {policy!r} for terminals to run as", {"account": policy}) from None


class AccountMissing(Forbidden):
    """The user's own account has not been made yet (on this host)."""


def own_account(username: str) -> Account:
    name = own_account_name(username)
    try:
        account = lookup_own(name, username)
    except AccountRefused as refused:
        raise Forbidden(refused.message, refused.details) from None
    if account is None:
        raise AccountMissing(f"there is no Unix account {name!r} for user {username!r} on this host, and the "
                             "worker that answered could not make it here; run web processes and terminal workers "
                             "on the same host, as root", {"account": name})
    return account


def workspace(username: str) -> str:
    """A user's own starting directory when terminals run as the service's account (made 0700 on first use)."""
    path = homes_base() / own_account_name(username)
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        path.mkdir(mode=0o700, exist_ok=True)
    except OSError as error:
        raise invalid("cwd", f"the default directory {str(path)!r} cannot be made ({error.strerror}); "
                      "name a cwd, or set TERMINALS_HOMES to a directory the service can write") from None
    return str(path)


def start_directory(username: str, account: Account | None) -> str:
    """Where a terminal starts when neither the request nor the settings name a directory: never the checkout."""
    if account is None:
        return workspace(username)
    if os.path.isdir(account.home) and account.can_enter(account.home):
        return account.home
    return "/"  # a shared account without a usable home (nobody's is /nonexistent)


def cwd_root() -> Path | None:
    root = settings.TERMINALS["CWD_ROOT"]
    return Path(root).resolve() if root else None


def resolve_cwd(cwd: str | None, account: Account | None = None, *, username: str = "") -> str:
    """Returns the real path of an existing directory, inside TERMINALS_CWD_ROOT when that is set.

    Without a cwd: TERMINALS_DEFAULT_CWD, else the root, else the user's own home or workspace; a relative cwd
    starts from there too. With an account, the directory must be one the account can enter.
    """
    root = cwd_root()
    start = settings.TERMINALS["DEFAULT_CWD"] or (str(root) if root else "")
    if not start and (not cwd or not cwd.startswith("/")):
        start = start_directory(username, account)
    cwd = cwd or start
    if "\x00" in cwd:
        raise invalid("cwd", "must not contain NUL")
    base = root or Path(start or "/")
    # Resolving follows symlinks and "..", so the containment check sees where the path really leads.
    path = (base / cwd).resolve()
    if root is not None and path != root and root not in path.parents:
        raise invalid("cwd", f"{cwd!r} is outside the allowed root")
    if not path.is_dir():
        raise invalid("cwd", f"{cwd!r} is not an existing directory")
    if not os.access(path, os.X_OK):
        raise invalid("cwd", f"{cwd!r} cannot be entered by the service (no search permission); name a directory "
                      "it can enter")
    if account is not None and not account.can_enter(str(path)):
        raise invalid("cwd", unenterable(cwd, str(path), account))
    return str(path)


def unenterable(cwd: str, path: str, account: Account) -> str:
    """Why the account cannot enter path, and the ways out."""
    blocked = account.blocked_at(path) or path
    return (f"{cwd!r} cannot be entered by {account.name!r}, the account this user's terminals run as: "
            f"the directory {blocked!r} does not give that account search (x) permission. Make the path "
            f"traversable (e.g. chmod o+x {blocked}, or chown the project to {account.name}), use a directory under "
            f"the account's home ({account.home}), or set TERMINALS_RUN_AS to an account that can enter it")


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
        raise invalid("command", _not_a_program(command))
    return os.path.abspath(found)


def _not_a_program(command: str) -> str:
    """What to send instead of a command that names no program. The service's own PATH is never quoted: it tells a
    caller about the service's machine, not about what to send."""
    words = _words(command)
    if len(words) > 1:
        corrected = json.dumps({"command": words[0], "args": words[1:]})
        return (f"{command!r} is not a program: command names the program alone and its arguments go in args, "
                f"e.g. {corrected}; or leave command out for a shell, and type the line there")
    return (f"{command!r} is not an executable program on the terminal's PATH; give the program's name "
            "(e.g. python3) or its path (e.g. /usr/bin/python3)")


def _words(command: str) -> list[str]:
    try:
        return shlex.split(command)
    except ValueError:  # an unbalanced quote: the words as they stand
        return command.split()


def shell_argv(shell: str) -> list[str]:
    # setsid(1) looks argv[0] up on PATH; an absolute path avoids the lookup.
    return [shutil.which(shell) or shell]
