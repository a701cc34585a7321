"""Use cases shared by every interface (REST, the live WebSocket's attachments, ACP, MCP, the dashboard): every one
checks access, audits and talks to the worker. One module per concern; the interfaces call them as sessions.<name>."""

from .checks import checked_input, checked_window_size, require_audit_writable
from .commands import session_command_get, session_command_list, session_command_run, session_command_wait
from .control import (
    SIGNALS,
    normalize_input,
    session_kill,
    session_resize,
    session_signal,
    session_terminate,
    session_write,
)
from .creation import session_create, should_record
from .health import confinement_report, health, liveness, readiness, workers_report
from .lookup import (
    HOSTED_RECORD_SECONDS,
    READ_RECORD_SECONDS,
    forget_record,
    session_detail,
    session_get_for,
    session_get_for_typing,
    session_get_for_viewing,
    session_list,
    session_live,
)
from .output import session_follow, session_newest_output, session_read, session_screen, session_stats
from .routing import hosting_channel, worker_hosts
from .sharing import session_share, session_shared_with, session_shares, session_unshare
from .waiting import session_wait_exit, session_wait_output, wait_bound_ms, worker_client_wait

__all__ = [
    "HOSTED_RECORD_SECONDS",
    "READ_RECORD_SECONDS",
    "SIGNALS",
    "checked_input",
    "checked_window_size",
    "confinement_report",
    "forget_record",
    "health",
    "hosting_channel",
    "liveness",
    "normalize_input",
    "readiness",
    "require_audit_writable",
    "session_command_get",
    "session_command_list",
    "session_command_run",
    "session_command_wait",
    "session_create",
    "session_detail",
    "session_follow",
    "session_get_for",
    "session_get_for_typing",
    "session_get_for_viewing",
    "session_kill",
    "session_list",
    "session_live",
    "session_newest_output",
    "session_read",
    "session_resize",
    "session_screen",
    "session_share",
    "session_shared_with",
    "session_shares",
    "session_signal",
    "session_stats",
    "session_terminate",
    "session_unshare",
    "session_wait_exit",
    "session_wait_output",
    "session_write",
    "should_record",
    "wait_bound_ms",
    "worker_client_wait",
    "worker_hosts",
    "workers_report",
]
