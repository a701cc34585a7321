"""The behaviour mutants of scripts/mutation_check.py: each breaks one promise, and names the tests that must notice.

`find` must occur exactly once in `path`; when the code moves, the check says so and this list is updated with it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Mutant:
    name: str
    breaks: str
    path: str
    find: str
    replace: str
    tests: tuple[str, ...]
    timeout: float = 900.0


MATRIX = "tests/test_authorization_matrix.py::test_strangers_get_the_unknown_answer_and_change_nothing"

MUTANTS = [
    Mutant(
        "owner-check-signal", "another user's terminal answers like an unknown one (signal)",
        "terminals/sessions.py",
        '''    """Sends a signal to the terminal's foreground process group, as Ctrl-C does."""
    record = session_get_for(user=actor.user, terminal_id=terminal_id)''',
        '''    """Sends a signal to the terminal's foreground process group, as Ctrl-C does."""
    record = TerminalSession.objects.select_related("worker").get(pk=terminal_id)''',
        (MATRIX,),
    ),
    Mutant(
        "owner-check-resize", "another user's terminal answers like an unknown one (resize)",
        "terminals/sessions.py",
        '''def session_resize(*, actor: Actor, terminal_id, cols: int, rows: int) -> dict:
    record = session_get_for(user=actor.user, terminal_id=terminal_id)''',
        '''def session_resize(*, actor: Actor, terminal_id, cols: int, rows: int) -> dict:
    record = TerminalSession.objects.select_related("worker").get(pk=terminal_id)''',
        (MATRIX,),
    ),
    Mutant(
        "audit-after-input", "an input's audit row is committed before its bytes reach the terminal",
        "terminals/sessions.py",
        '''    audit(actor, "input", terminal_id=record.id, outcome="sent", input=data, **({"close": True} if close else {}))
    reply = _ask_worker(record, protocol.INPUT, data=data, close=close)''',
        '''    reply = _ask_worker(record, protocol.INPUT, data=data, close=close)
    audit(actor, "input", terminal_id=record.id, outcome="sent", input=data, **({"close": True} if close else {}))''',
        ("tests/test_api_input.py::test_an_inputs_audit_row_is_committed_before_the_program_reads_it",),
    ),
    Mutant(
        "kill-without-audit", "kill is refused without effect when the audit trail cannot be written",
        "terminals/sessions.py",
        '''    kill_grace = settings.TERMINALS["KILL_GRACE_MS"] / 1000
    require_audit_writable()''',
        '''    kill_grace = settings.TERMINALS["KILL_GRACE_MS"] / 1000''',
        ("tests/test_audit_unavailable.py",),
    ),
    Mutant(
        "throttle-always-allows", "a key over its rate gets 429",
        "terminals/throttling.py",
        '''        try:
            return super().allow_request(request, view)''',
        '''        try:
            return True''',
        ("tests/test_throttling.py",),
    ),
    Mutant(
        "key-secret-in-log", "no key appears in any log",
        "terminals/auth.py",
        '''        record = ApiKey.objects.for_key(key)''',
        '''        __import__("sys").stderr.write(f"authenticating {key}\\n")
        record = ApiKey.objects.for_key(key)''',
        ("tests/test_api_auth.py", "tests/test_zz_no_secrets.py"),
    ),
    Mutant(
        "key-stored-plain", "only a hash of each key is stored",
        "terminals/models.py",
        '''record = self.create(user=user, name=name, prefix=prefix''',
        '''record = self.create(user=user, name=name or key, prefix=prefix''',
        ("tests/test_promises_keys.py",),
    ),
    Mutant(
        "chain-check-passes", "verify_audit reports a changed audit row",
        "terminals/management/commands/verify_audit.py",
        '''            if event.compute_hash() != event.hash:''',
        '''            if False:''',
        ("tests/test_audit_chain.py",),
    ),
    Mutant(
        "signal-group-zero", "a signal never reaches group 0 (the service's own)",
        "terminals/runtime/signals.py",
        '''    if group <= 1 or group == service.group:''',
        '''    if group < 0:''',
        ("tests/test_runtime_signals.py",),
    ),
    Mutant(
        "exit-code-from-output", "a program cannot forge a command's exit code with printed markers",
        "terminals/runtime/commands.py",
        '''        if marker.token != self.secret:
            return False''',
        '''        if False:
            return False''',
        ("tests/test_command_integrity.py",
         "tests/test_api_commands.py::test_markers_a_program_prints_without_the_secret_change_nothing"),
    ),
    Mutant(
        "command-typed-unquoted", "a command's own text cannot end it or the next one early (a syntax error)",
        "terminals/runtime/commands.py",
        '''    return f"__terminals_begin {command_id}; eval {_single_quoted(command)}; __terminals_end {command_id} \\"$?\\"\\n"''',
        '''    return f"{{ __terminals_begin {command_id}; {command}\\n\\n}}; __terminals_end {command_id} \\"$?\\"\\n"''',
        ("tests/test_api_commands.py::test_a_syntax_error_leaves_no_prompt_behind_even_with_a_slow_prompt_hook",),
    ),
    Mutant(
        "refused-websocket-acts", "a refused WebSocket acts on none of its frames",
        "terminals/live/consumer.py",
        '''        if not self.attached or self.closing:''',
        '''        if False:''',
        ("tests/test_hostile_input.py::test_a_refused_websocket_acts_on_none_of_its_frames",),
    ),
    Mutant(
        "service-dumpable", "every service process is non-dumpable",
        "terminals/apps.py",
        '''        make_undumpable()''',
        '''        pass''',
        ("tests/test_promises_dumpable.py",),
    ),
]
