"""The service's settings as a worker's runtime policy: whom terminals run as, the limits and control groups that
confine them, and how many a worker holds."""

from __future__ import annotations

import hashlib
import logging
import os
import signal
import threading

from django.conf import settings

from ..environment import PER_USER, SERVICE, homes_base, run_as_policy
from ..runtime import confinement as confine
from ..runtime import integrity
from ..runtime.accounts import provision, unix_name
from ..runtime.errors import AccountUnavailable
from ..runtime.keeping import holder_pid
from ..runtime.manager import Limits
from ..runtime.processes import process_space

logger = logging.getLogger(__name__)


# Ignored signals stay ignored across exec: a service started with nohup or `&`
# would hand its terminals a Ctrl-C that does nothing. A handler (here one that
# does nothing) is reset to the default in every child.
INHERITABLE_IGNORES = (signal.SIGINT, signal.SIGQUIT, signal.SIGHUP, signal.SIGTERM, signal.SIGTSTP,
                       signal.SIGTTIN, signal.SIGTTOU, signal.SIGUSR1, signal.SIGUSR2)


def stop_ignoring_signals() -> None:
    if threading.current_thread() is not threading.main_thread():
        return
    for signum in INHERITABLE_IGNORES:
        if signal.getsignal(signum) == signal.SIG_IGN:
            signal.signal(signum, lambda *_: None)


def cgroup_prefix() -> str:
    """A worker's parent group is <this><pid>: its pid gone, the worker was killed. The prefix carries the process
    space, because only there does a pid say anything: containers (and our tests' hosts) that share the cgroup
    tree but not their pids must not take each other's groups for those of dead workers and empty them."""
    space = hashlib.sha256(process_space().encode()).hexdigest()[:12]
    return f"terminals-worker-{space}-"


def confinement_from_settings() -> confine.Confinement:
    """The limits every terminal gets, and the control groups that enforce them where the machine lets us."""
    config = settings.TERMINALS
    limits = confine.ResourceLimits(
        processes=config["LIMIT_PROCESSES"] or None,
        open_files=config["LIMIT_OPEN_FILES"] or None,
        memory_bytes=(config["LIMIT_MEMORY_MB"] << 20) or None,
        cpu_cores=config["LIMIT_CPU_CORES"] or None,
    )
    if not config["CGROUPS"]:
        return confine.Confinement(limits=limits, cgroups=confine.Cgroups(problem="turned off (TERMINALS_CGROUPS=off)"))
    prefix = cgroup_prefix()
    reaped = confine.reap_departed(prefix, own=f"{prefix}{holder_pid()}")
    if reaped:
        logger.warning("killed %d processes left behind by terminals of workers that are gone", reaped)
    cgroups = confine.Cgroups.detect(f"{prefix}{holder_pid()}")
    if not cgroups.controllers:
        logger.warning("terminal limits without cgroups: %s", cgroups.problem or "no usable controller")
    return confine.Confinement(limits=limits, cgroups=cgroups)


def check_run_as() -> None:
    """Refuses to start a worker that could not run terminals as the configured account."""
    policy = run_as_policy()
    if settings.TERMINALS["RUN_AS"] == "":
        logger.warning("TERMINALS_RUN_AS is set but empty, read as 'service'; say TERMINALS_RUN_AS=service")
    if policy == PER_USER:
        try:
            unix_name("check", settings.TERMINALS["RUN_AS_PREFIX"])
        except ValueError as error:
            raise RuntimeError(f"TERMINALS_RUN_AS_PREFIX: {error}") from None
    if policy in (SERVICE, PER_USER) or os.geteuid() == 0:
        return
    account = confine.Account.lookup(policy)
    if account.uid != os.geteuid():
        raise RuntimeError(f"TERMINALS_RUN_AS={policy}: a worker running as uid {os.geteuid()} cannot switch to "
                           f"uid {account.uid}; run the worker as root or set TERMINALS_RUN_AS=service")


def terminal_account_kind() -> str:
    """Whom terminals run as, as integrity.describe sees it: root, the service's own account, or another."""
    policy = run_as_policy()
    if policy == PER_USER:
        return integrity.OTHER
    uid = os.geteuid()
    if policy != SERVICE:
        try:
            uid = confine.Account.lookup(policy).uid
        except KeyError:
            pass
    if uid == 0:
        return integrity.ROOT
    return integrity.SERVICE if uid == os.geteuid() else integrity.OTHER


def account_for(message: dict) -> confine.Account | None:
    """The account a new terminal runs as; per user, one this worker made for the terminal's owner, never another."""
    name = message.get("run_as")
    if run_as_policy() == PER_USER:
        if not message.get("username"):
            raise AccountUnavailable("this worker runs each user's terminals as their own account, and the request "
                                     "names no user: run web processes of the same version as the workers")
        account = provision(message["username"], prefix=settings.TERMINALS["RUN_AS_PREFIX"], homes=homes_base())
        if account.name != name:
            raise AccountUnavailable(f"this worker runs each user's terminals as their own account ({account.name!r}), "
                                     f"not as {name or 'its own'!r}: set TERMINALS_RUN_AS the same in every process",
                                     account=account.name)
        return account
    expected = "" if run_as_policy() == SERVICE else run_as_policy()
    if (name or "") != expected:
        # Whatever reaches the channel layer, this worker runs terminals only as it is configured to.
        raise AccountUnavailable(f"this worker runs terminals as {expected or 'its own account'!r}, not as "
                                 f"{name or 'its own account'!r}: set TERMINALS_RUN_AS the same in every process",
                                 account=name or "")
    if not name:
        return None
    try:
        account = confine.Account.lookup(name)
    except KeyError:
        raise AccountUnavailable(f"there is no Unix account {name!r} on this worker's host", account=name) from None
    if account.uid != os.geteuid() and os.geteuid() != 0:
        raise AccountUnavailable(f"this worker cannot run terminals as {name!r}", account=name)
    return account


def limits_from_settings() -> Limits:
    config = settings.TERMINALS
    return Limits(
        max_sessions=config["MAX_TOTAL"],
        buffer_lines=config["MAX_BUFFER_LINES"],
        buffer_bytes=config["MAX_BUFFER_BYTES"],
        max_pending_input=config["MAX_PENDING_INPUT_BYTES"],
        idle_timeout=config["SESSION_TIMEOUT_MS"] / 1000,
        kill_grace=config["KILL_GRACE_MS"] / 1000,
    )
