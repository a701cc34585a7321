"""Unix accounts of the service's own making, one per user, for terminals to run as.

A user's name is mapped to an account name deterministically: a readable part
(the name, lowercased, anything a Unix name cannot hold replaced) and a hash of
the exact name, so "Alice" and "alice", or two long names sharing 20 letters,
never share an account. The account's comment (GECOS) carries a tag naming the
user by that hash: an account is used only when its tag names the same user, so
an account the service did not make (root, a daemon, someone's login) or made
for somebody else is never handed out, whatever a username maps to.
"""

from __future__ import annotations

import fcntl
import grp
import hashlib
import os
import pwd
import re
import shutil
import stat
import subprocess
from contextlib import contextmanager
from pathlib import Path

from .confinement import Account
from .errors import TerminalError

NAME_LIMIT = 32  # what useradd accepts
HASH_CHARS = 10  # 40 bits: a clash needs the same readable part too, and is refused, never shared
PREFIX_FORMAT = re.compile(r"^[a-z_][a-z0-9_-]{0,15}$")
TAG = "terminals-service-account"  # the start of the comment of every account the service makes
LOCK_NAME = ".terminals-accounts.lock"
# The host's, root's alone (not /run/lock, where any account could take the lock first and hold it): every
# service on the host takes the same lock.
HOST_LOCK_FOLDER = Path("/run/terminals")
NO_LOGIN = next((path for path in ("/usr/sbin/nologin", "/sbin/nologin") if os.path.exists(path)), "/bin/false")


class AccountRefused(TerminalError):
    """There is no account the user's terminals may run as, and none can be made."""

    code = "FORBIDDEN"


def unix_name(username: str, prefix: str) -> str:
    """The account name for username: prefix, a readable part and a hash of the exact username."""
    if not PREFIX_FORMAT.match(prefix or "u"):
        raise ValueError(f"account prefix {prefix!r}: lowercase letters, digits, _ and -, at most 16, "
                         "not a digit first")
    digest = user_tag(username)[:HASH_CHARS]
    readable = re.sub(r"[^a-z0-9_]", "_", username.lower())
    room = NAME_LIMIT - len(prefix or "u") - 1 - HASH_CHARS
    return f"{prefix or 'u'}{readable[:room]}-{digest}"


def user_tag(username: str) -> str:
    return hashlib.sha256(username.encode()).hexdigest()


def comment_for(username: str) -> str:
    return f"{TAG} {user_tag(username)}"


def lookup_own(name: str, username: str) -> Account | None:
    """The account name if the service made it for username; None if there is none; refused if it is another's."""
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        return None
    if entry.pw_uid == 0 or entry.pw_gecos != comment_for(username):
        raise AccountRefused(
            f"the Unix account {name!r} that user {username!r} maps to exists and was not made by this service for "
            "this user; it is never shared. Rename the Django user, or remove that account if it is a leftover",
            account=name)
    return Account.lookup(name)


def provision(username: str, *, prefix: str, homes: Path) -> Account:
    """The user's account, made on first use (needs root): a system account with a private home under homes.

    Safe against workers of the same host doing it at once, whatever homes each uses: one lock file of the host
    orders them (useradd itself gives up at once when another holds /etc/passwd).
    """
    name = unix_name(username, prefix)
    account = lookup_own(name, username)
    if account is not None and _home_ready(account):
        return account
    if os.geteuid() != 0:
        raise AccountRefused(f"there is no Unix account {name!r} for user {username!r}, and only a service "
                             "running as root can make one", account=name)
    _ensure_base(homes)
    with _host_lock(homes):
        account = lookup_own(name, username)
        if account is None:
            _useradd(name, username, homes / name)
            account = lookup_own(name, username)
            if account is None:
                raise AccountRefused(f"the Unix account {name!r} was made but cannot be found", account=name)
        _make_home(account)
    return account


def _home_ready(account: Account) -> bool:
    try:
        info = os.lstat(account.home)
    except OSError:
        return False
    return stat.S_ISDIR(info.st_mode) and info.st_uid == account.uid


def _ensure_base(homes: Path) -> None:
    """The directory of the homes: root's, searchable by all (to reach one's own home), writable by root alone."""
    homes.mkdir(mode=0o755, parents=True, exist_ok=True)
    info = homes.stat()
    if info.st_uid != 0 or info.st_mode & 0o022:
        raise AccountRefused(f"{homes} must belong to root and be writable by root alone to hold terminal homes",
                             homes=str(homes))
    for directory in (homes.resolve(), *homes.resolve().parents):
        if not directory.stat().st_mode & 0o001:
            raise AccountRefused(f"terminal accounts cannot reach their homes under {homes}: {directory} is not "
                                 "searchable by other accounts (chmod o+x it, or set TERMINALS_HOMES elsewhere)",
                                 homes=str(homes))


def _host_lock_folder() -> Path | None:
    try:
        HOST_LOCK_FOLDER.mkdir(mode=0o700, exist_ok=True)
        info = os.lstat(HOST_LOCK_FOLDER)
    except OSError:
        return None
    private = stat.S_ISDIR(info.st_mode) and info.st_uid == 0 and not info.st_mode & 0o022
    return HOST_LOCK_FOLDER if private else None


@contextmanager
def _host_lock(homes: Path):
    folder = _host_lock_folder() or homes
    descriptor = os.open(folder / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)


def _useradd(name: str, username: str, home: Path) -> None:
    # A system account: no password, no ageing, no mail spool. Its login shell is nologin (nobody logs in
    # with it); the shell a terminal runs is the one the API chose.
    command = [shutil.which("useradd") or "/usr/sbin/useradd", "--system", "--user-group", "--no-create-home",
               "--home-dir", str(home), "--shell", NO_LOGIN, "--comment", comment_for(username), name]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode not in (0, 9):  # 9: the name was taken meanwhile (lookup_own then checks whose it is)
        raise AccountRefused(f"making the Unix account {name!r} failed: {result.stderr.strip() or result.returncode}",
                             account=name)


def _make_home(account: Account) -> None:
    """The home, private to the account (0700): other terminal accounts can neither list nor read it."""
    home = Path(account.home)
    try:
        home.mkdir(mode=0o700)
    except FileExistsError:
        info = os.lstat(home)
        if not stat.S_ISDIR(info.st_mode) or info.st_uid not in (0, account.uid):
            raise AccountRefused(f"{home} exists and is not {account.name!r}'s home; move it away",
                                 account=account.name)
        if info.st_uid == account.uid:
            return
    os.chown(home, account.uid, account.gid, follow_symlinks=False)
    os.chmod(home, 0o700)


# Removing what the service made (manage.py remove_accounts)


def made_accounts() -> list[pwd.struct_passwd]:
    """Every account on this host that a terminal service made, for whichever user: its comment is the tag. No other
    account carries it (useradd's callers here alone write it), so root, daemons and logins are never among them."""
    return [entry for entry in pwd.getpwall() if entry.pw_uid != 0 and entry.pw_gecos.startswith(f"{TAG} ")]


def tag_of(entry: pwd.struct_passwd) -> str:
    """The hash of the user an account was made for (user_tag)."""
    return entry.pw_gecos.split(" ", 1)[1]


def processes_of(uids: set[int]) -> dict[int, list[int]]:
    """The live processes running as any of uids (real, effective, saved or file-system uid), by uid."""
    found: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status") as status:
                line = next(line for line in status if line.startswith("Uid:"))
        except (OSError, StopIteration):
            continue  # ended meanwhile
        for uid in {int(value) for value in line.split()[1:]} & uids:
            found.setdefault(uid, []).append(int(name))
    return found


def own_home(entry: pwd.struct_passwd) -> Path | None:
    """The account's home if it is what provision made: a real directory (no link) of the account's own."""
    home = Path(entry.pw_dir)
    try:
        info = os.lstat(home)
    except OSError:
        return None
    if not home.is_absolute() or home == Path("/") or not stat.S_ISDIR(info.st_mode) or info.st_uid != entry.pw_uid:
        return None
    return home


def remove_made_account(entry: pwd.struct_passwd) -> list[str]:
    """Removes an account provision made, its group of the same name and its home; returns what went. The caller
    checked that nothing runs as it; the host lock keeps a worker from making it again half-way."""
    if entry.pw_uid == 0 or not entry.pw_gecos.startswith(f"{TAG} "):
        raise ValueError(f"{entry.pw_name} was not made by the terminal service")
    removed = []
    home = own_home(entry)
    with _host_lock(Path(entry.pw_dir).parent):
        result = subprocess.run([shutil.which("userdel") or "/usr/sbin/userdel", entry.pw_name],
                                capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise AccountRefused(f"removing the Unix account {entry.pw_name!r} failed: "
                                 f"{result.stderr.strip() or result.returncode}", account=entry.pw_name)
        removed.append(f"account {entry.pw_name} (uid {entry.pw_uid})")
        if _group_named(entry.pw_name, entry.pw_gid):  # useradd --user-group made it; userdel may have left it
            subprocess.run([shutil.which("groupdel") or "/usr/sbin/groupdel", entry.pw_name],
                           capture_output=True, check=False)
        if home is not None:
            shutil.rmtree(home)  # unlinks links in it, never follows them
            removed.append(f"home {home}")
    return removed


def _group_named(name: str, gid: int) -> bool:
    try:
        return grp.getgrnam(name).gr_gid == gid
    except KeyError:
        return False
