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
        "terminals/sessions/control.py",
        '''    """Sends a signal to the terminal's foreground process group, as Ctrl-C does."""
    record = session_get_for_typing(user=actor.user, terminal_id=terminal_id)''',
        '''    """Sends a signal to the terminal's foreground process group, as Ctrl-C does."""
    record = TerminalSession.objects.select_related("worker").get(pk=terminal_id)''',
        (MATRIX,),
    ),
    Mutant(
        "owner-check-resize", "another user's terminal answers like an unknown one (resize)",
        "terminals/sessions/control.py",
        '''def session_resize(*, actor: Actor, terminal_id, cols: int, rows: int) -> dict:
    record = session_get_for_typing(user=actor.user, terminal_id=terminal_id)''',
        '''def session_resize(*, actor: Actor, terminal_id, cols: int, rows: int) -> dict:
    record = TerminalSession.objects.select_related("worker").get(pk=terminal_id)''',
        (MATRIX,),
    ),
    Mutant(
        "audit-after-input", "an input's audit row is committed before its bytes reach the terminal",
        "terminals/sessions/control.py",
        '''    audit(actor, "input", terminal_id=record.id, outcome="sent", input=data, **({"close": True} if close else {}))
    reply = _ask_worker(record, protocol.INPUT, data=data, close=close)''',
        '''    reply = _ask_worker(record, protocol.INPUT, data=data, close=close)
    audit(actor, "input", terminal_id=record.id, outcome="sent", input=data, **({"close": True} if close else {}))''',
        ("tests/test_api_input.py::test_an_inputs_audit_row_is_committed_before_the_program_reads_it",),
    ),
    Mutant(
        "kill-without-audit", "kill is refused without effect when the audit trail cannot be written",
        "terminals/sessions/control.py",
        '''    kill_grace = settings.TERMINALS["KILL_GRACE_MS"] / 1000
    require_audit_writable()''',
        '''    kill_grace = settings.TERMINALS["KILL_GRACE_MS"] / 1000''',
        ("tests/test_audit_unavailable.py",),
    ),
    Mutant(
        "throttle-always-allows", "a key over its rate gets 429",
        "terminals/throttling.py",
        '''        try:
            return self._counted(request, view)''',
        '''        try:
            return True''',
        ("tests/test_throttling.py",),
    ),
    Mutant(
        "key-secret-in-log", "no key appears in any log",
        "terminals/auth.py",
        '''    record = ApiKey.objects.for_key(key)''',
        '''    __import__("sys").stderr.write(f"authenticating {key}\\n")
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
        "terminals/audit.py",
        '''        if event.compute_hash() != event.hash:''',
        '''        if False:''',
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
    # Issue 29: one user cannot hang the service, nor a page on the same host type into a terminal, nor lost access
    # stay open, nor bad input crash.
    Mutant(
        "size-check-resize", "every resize's size goes through the core's one check, whatever the interface",
        "terminals/sessions/control.py",
        '''    record = session_get_for_typing(user=actor.user, terminal_id=terminal_id)
    cols, rows = checked_window_size(cols, rows)
''',
        '''    record = session_get_for_typing(user=actor.user, terminal_id=terminal_id)
''',
        ("tests/test_service_bounds.py::test_mcp_resize_past_the_limits_is_refused_and_the_size_stays",),
    ),
    Mutant(
        "screen-on-event-loop", "a screen is rendered off the worker's event loop, so it stalls no other user",
        "terminals/worker/requests.py",
        '''**(await session.render_screen())}''',
        '''**session.screen()}''',
        ("tests/test_service_bounds.py::test_reading_the_largest_screen_over_and_over_stalls_no_other_user",),
    ),
    Mutant(
        "live-connection-cap", "a user's live connections past the cap are refused (4429, 429)",
        "terminals/live_connections.py",
        '''        if _held[user.pk] >= limit:''',
        '''        if False:''',
        ("tests/test_service_bounds.py::test_live_connections_are_capped_per_user",),
    ),
    Mutant(
        "origin-host-only", "a cookie WebSocket is accepted only from the service's own origin (scheme, host and port)",
        "terminals/origins.py",
        '''    return origin == own_origin(scheme=scheme, host=host)''',
        '''    return bool(urlsplit(origin).hostname) and validate_host(urlsplit(origin).hostname, settings.ALLOWED_HOSTS)''',
        ("tests/test_live_origins.py::test_cookie_websocket_refuses_every_origin_but_the_services_own",),
    ),
    Mutant(
        "staff-type-into-others", "only a terminal's owner types into, resizes or signals it; staff watch",
        "terminals/sessions/lookup.py",
        '''    if record.owner_id != user.pk:''',
        '''    if False:''',
        ("tests/test_staff_read_only.py", "tests/test_authorization_matrix.py::test_owner_and_staff_reach_every_route"),
    ),
    Mutant(
        "staff-interactive-attach", "staff attach to another user's terminal only with mode=view",
        "terminals/attachments.py",
        '''    find = sessions.session_get_for_viewing if read_only else sessions.session_get_for_typing''',
        '''    find = sessions.session_get_for_viewing if read_only else sessions.session_get_for''',
        ("tests/test_staff_read_only.py::test_staff_attach_to_another_users_terminal_only_to_watch",),
    ),
    Mutant(
        "live-access-credential-only", "an open connection ends when its share or staff flag is taken away",
        "terminals/access.py",
        '''        if not (staff or owners.get(hold.terminal) == user or (hold.view and (hold.terminal, user) in granted)):''',
        '''        if False:''',
        ("tests/test_live_access.py::test_taking_access_away_ends_every_live_connection",),
    ),
    Mutant(
        "wait-output-ignores-access", "a wait ends when its caller's access is taken away",
        "terminals/sessions/waiting.py",
        '''        access.require(hold)
        checked = time.monotonic()''',
        '''        checked = time.monotonic()''',
        ("tests/test_live_access.py::test_taking_access_away_ends_every_live_connection",),
    ),
    Mutant(
        "ws-frame-type-unhashable", "a frame whose type is not a string gets INVALID_INPUT, never a 1011",
        "terminals/live/consumer.py",
        '''        handler = handlers.get(kind) if isinstance(kind, str) else None  # a list or an object cannot be a key''',
        '''        handler = handlers.get(kind)''',
        ("tests/test_bad_input.py::test_a_frame_type_that_is_not_a_string_gets_an_error_frame_and_leaves_no_ghost_viewer",),
    ),
    Mutant(
        "accept-strict-negotiation", "the API answers JSON whatever Accept asks, never a 500",
        "config/settings.py",
        '''    "DEFAULT_CONTENT_NEGOTIATION_CLASS": "terminals.api.negotiation.JsonWhateverAccept",
''',
        '''''',
        ("tests/test_bad_input.py::test_the_api_answers_json_whatever_the_accept_header_asks",),
    ),
    Mutant(
        "dashboard-next-offsite", "a form's next page is followed only within the site",
        "terminals/dashboard/views.py",
        '''    back = _same_site(request, request.POST.get("next"))''',
        '''    back = request.POST.get("next") or "dashboard:terminals"''',
        ("tests/test_bad_input.py::test_ending_a_terminal_redirects_only_within_the_site",),
    ),
    # Issue 30: a wait matches what a program printed, and a paste keeps its echo.
    Mutant(
        "wait-matches-echo", "a wait matches what programs printed, never the echo of the typed input",
        "terminals/sessions/waiting.py",
        '''stream=None, without_echo=True)''',
        '''stream=None, without_echo=False)''',
        ("tests/test_output_wait.py::test_a_wait_matches_what_the_command_printed_not_the_echo_of_the_line_typed",),
    ),
    Mutant(
        "paste-echo-bounded", "the echo of a paste into a terminal nobody reads is read in full",
        "terminals/runtime/child.py",
        '''            self._input_written(written)''',
        '''            pass''',
        ("tests/test_runtime_pty.py::test_a_paste_is_written_no_faster_than_its_echo_is_read_and_never_waits_on_echo_that_does_not_come",),
    ),
    Mutant(
        "rest-unknown-fields-ignored", "an unknown body field is refused, not ignored",
        "terminals/api/serializers.py",
        '''            refuse_unknown(data.keys(), self.fields, "field")''',
        '''            pass''',
        ("tests/test_api_first_contact.py::test_unknown_body_field_is_refused_naming_the_field_meant",),
    ),
    Mutant(
        "rest-unknown-query-ignored", "an unknown query parameter is refused, not ignored",
        "terminals/api/strict.py",
        '''        s.refuse_unknown(request.query_params.keys(), accepted, "query parameter")''',
        '''        pass''',
        ("tests/test_api_first_contact.py::test_unknown_query_parameter_is_refused_naming_the_one_meant",),
    ),
    Mutant(
        "mcp-wait-cap", "no MCP call waits past TERMINALS_MCP_MAX_WAIT_MS",
        "terminals/mcp/identity.py",
        '''max_wait_ms=settings.TERMINALS["MCP_MAX_WAIT_MS"]''',
        '''max_wait_ms=None''',
        ("tests/test_mcp.py::test_no_mcp_call_waits_past_the_mcp_bound_and_the_command_can_be_waited_for_next",),
    ),
    Mutant(
        "api-command-echo-shown", "a watcher sees an API command as given, never the wrapper typed for it",
        "terminals/runtime/shell.py",
        '''            self._hold_echo(record, len(typed))''',
        '''            pass''',
        ("tests/test_shown_commands.py::test_an_api_command_is_shown_as_given_in_the_byte_and_line_output",),
    ),
    Mutant(
        "held-echo-kept-from-caller", "output held for a command answered before it began is its caller's to read",
        "terminals/runtime/shell.py",
        '''        if self._held is not None and self._held.record is record:''',
        '''        if False:''',
        ("tests/test_command_integrity.py::test_stolen_typed_input_gives_no_secret",),
    ),
    Mutant(
        "create-audit-check", "a create on a locked database answers AUDIT_UNAVAILABLE before any worker is asked",
        "terminals/sessions/creation.py",
        '''    require_audit_writable()
    return worker_client.request_sync(
        _creation_channel(host),''',
        '''    return worker_client.request_sync(
        _creation_channel(host),''',
        ("tests/test_audit_unavailable.py::test_a_create_while_the_database_is_locked_answers_audit_unavailable_within_the_busy_timeout",),
    ),
    Mutant(
        "ws-unknown-path", "an unknown WebSocket path closes 4404 instead of an HTTP 500",
        "terminals/live/routing.py",
        ''',
                         re_path(r"", UnknownPath.as_asgi())]''',
        ''']''',
        ("tests/test_live.py::test_live_path_without_its_slash_attaches_and_unknown_paths_close_4404",),
    ),
    Mutant(
        "remove-accounts-while-running", "remove_accounts removes nothing while their terminals run",
        "terminals/management/commands/remove_accounts.py",
        '''if not active.exists() and not running:''',
        '''if True:''',
        ("tests/test_remove_accounts.py::test_remove_accounts_removes_only_what_the_service_made_and_never_while_a_terminal_runs",),
    ),
    Mutant(
        "database-outage-500", "a database out of reach answers 503 DATABASE_UNAVAILABLE, not 500",
        "terminals/exceptions.py",
        '''    unavailable = database_unavailable(exc)
    if unavailable is not None:
        return unavailable
''',
        '''''',
        ("tests/test_database_outage.py",),
    ),
    Mutant(
        "outage-logged-each-time", "a database outage is logged once, not per request",
        "terminals/plumbing/outage.py",
        '''        if _since is not None:
            return
        _since = time.monotonic()''',
        '''        _since = time.monotonic()''',
        ("tests/test_database_outage.py",),
    ),
    Mutant(
        "daphne-cancels-before-hooks", "a stopping web process closes its clients before daphne cancels them",
        "terminals/plumbing/lifecycle.py",
        '''        await shut_down()
        await cancel_applications(server)''',
        '''        asyncio.ensure_future(shut_down())
        await cancel_applications(server)''',
        ("tests/test_web_stop.py",),
    ),
    Mutant(
        "lease-never-expires", "a viewer whose web process stopped renewing it is dropped and audited",
        "terminals/worker/streaming.py",
        '''                elif now - subscriber.renewed > lease_seconds:''',
        '''                elif False:''',
        ("tests/test_live_detach.py::test_the_viewers_of_a_sigkilled_web_process_are_dropped_and_audited_by_their_worker",),
    ),
    Mutant(
        "in-flight-409-at-deadline", "a request in flight on a killed worker answers 409 once its terminal is lost",
        "terminals/remote/client.py",
        '''        exchange = _unless_lost(exchange, fields["id"])''',
        '''        pass''',
        ("tests/test_live_detach.py::test_a_command_in_flight_on_a_killed_worker_answers_409_once_the_terminal_is_lost",),
    ),
    Mutant(
        "rest-bound-not-its-setting", "a request bound is its setting, read when used",
        "terminals/api/serializers.py",
        '''        return settings.TERMINALS[setting] if setting else None''',
        '''        return 10**9 if setting else None''',
        ("tests/test_api_limits.py::test_a_request_bound_is_its_setting_read_when_used_by_the_check_and_the_schema",),
    ),
    Mutant(
        "client-stream-reconnect", "a client stream reconnects by byte offset after a dropped WebSocket",
        "clients/python/terminals_client/_stream.py",
        "        return self.failed()\n",
        "        return None\n",
        ("tests/test_client_library.py::test_a_stream_survives_dropped_websockets_with_every_byte_once",),
    ),
    Mutant(
        "client-run-exit-code", "terminals run exits with the remote exit code",
        "clients/python/terminals_client/cli.py",
        "        return status.code\n",
        "        return 0\n",
        ("tests/test_client_cli.py::test_run_exits_with_the_remote_exit_code",),
    ),
    Mutant(
        "lost-by-clock", "a database outage makes no worker lost",
        "terminals/worker/bookkeeping.py",
        '''    live = [*Worker.objects.filter(stopped__isnull=True, lost__isnull=True).values_list("id", flat=True), own_worker_id]''',
        '''    live = [*Worker.objects.live().values_list("id", flat=True), own_worker_id]''',
        ("tests/test_split_faults.py::test_a_database_outage_ends_no_terminal_and_loses_no_output",),
    ),
    Mutant(
        "no-readopt", "a worker judged gone while it still ran keeps its terminals",
        "terminals/worker/bookkeeping.py",
        '''        if row.status == LOST and str(row.id) in running and _readopt(row.id, worker_id):''',
        '''        if False:''',
        ("tests/test_split_faults.py::test_a_worker_judged_gone_while_frozen_takes_its_terminals_back_when_it_resumes",),
    ),
    Mutant(
        "health-ignores-lost", "/api/health shows a killed worker dead once its terminals are lost",
        "terminals/models.py",
        ''', f"{prefix}lost__isnull": True,''',
        ''',''',
        ("tests/test_split_faults.py::test_health_shows_a_killed_worker_dead_as_soon_as_its_terminals_are_lost",),
    ),
    Mutant(
        "silence-in-judges-beats", "silence is counted in the silent worker's own intervals",
        "terminals/worker/liveness.py",
        '''SILENT_BEATS * self._interval_of(worker_id) / self.interval - 1e-9))''',
        '''SILENT_BEATS * self.interval / self.interval - 1e-9))''',
        ("tests/test_worker_liveness.py::test_silence_is_counted_in_the_silent_workers_intervals_not_the_judges",),
    ),
    Mutant(
        "waits-uncapped", "one user's waits can take every request thread of a web process",
        "terminals/live_connections.py",
        "        if _waiting[user.pk] >= limit:",
        "        if False:",
        ("tests/test_request_bound.py::test_waits_are_capped_per_user_and_a_full_process_answers_server_busy",),
    ),
    Mutant(
        "request-threads-unbounded", "a web process runs any number of requests, each with a database connection",
        "terminals/plumbing/request_threads.py",
        "        self.executors = ExecutorPool(limit=settings.TERMINALS[\"REQUEST_THREADS\"])",
        "        self.executors = ExecutorPool()",
        ("tests/test_request_bound.py::test_waits_are_capped_per_user_and_a_full_process_answers_server_busy",),
    ),
    Mutant(
        "streams-hold-threads", "each follow stream keeps a request thread for as long as it lasts",
        "terminals/plumbing/request_threads.py",
        "                on_streaming()  # a stream runs",
        "                pass  # a stream runs",
        ("tests/test_request_bound.py::test_follow_streams_do_not_hold_request_threads",),
    ),
    Mutant(
        "heartbeat-behind-queue", "the heartbeat waits behind the worker's database queue and shared threads",
        "terminals/worker/server.py",
        "        self._spawn(self.upkeep.keep_alive())",
        "        pass",
        ("tests/test_worker.py::test_the_heartbeat_is_written_on_time_while_the_workers_database_writes_and_threads_are_stuck",),
    ),
    Mutant(
        "ring-not-written", "output a killed worker held is not in memory its keeper holds",
        "terminals/runtime/child.py",
        "            self.ring.append(data)",
        "            pass",
        ("tests/test_keeper.py::test_terminals_outlive_their_worker[kill]",),
    ),
    Mutant(
        "keeper-not-subreaper", "a program that exits while its worker is away is never reported",
        "terminals/runtime/keeper.py",
        "        become_subreaper()\n        wakeup_read",
        "        wakeup_read",
        ("tests/test_keeper.py::test_terminals_outlive_their_worker[kill]",),
    ),
    Mutant(
        "commands-not-restored", "a command in flight loses its exit code across a restart",
        "terminals/runtime/adoption.py",
        "        session.commands.restore(state[\"commands\"])",
        "        pass",
        ("tests/test_keeper.py::test_terminals_outlive_their_worker[hup]",),
    ),
    Mutant(
        "restart-not-told", "a live client of a crashed worker waits for ever",
        "terminals/worker/requests.py",
        "        if restarted:\n            await self.fanout.tell_restarted(restarted)",
        "        if False:\n            await self.fanout.tell_restarted(restarted)",
        ("tests/test_worker_restart.py::test_terminals_outlive_a_restart_or_a_crash_of_their_worker[split-kill]",),
    ),
    Mutant(
        "silence-by-beats-alone", "beats that come faster than their interval judge other workers gone early",
        "terminals/worker/liveness.py",
        "                and (now is None or now - since >= SILENT_BEATS * self._interval_of(worker_id))}",
        "                }",
        ("tests/test_worker_liveness.py::test_beats_that_come_faster_than_their_interval_judge_nobody_until_the_time_has_passed",),
    ),
    Mutant(
        "request-threads-joined-at-exit", "a request stuck as the server stops keeps the old process alive",
        "terminals/plumbing/daemon_executor.py",
        "name=f\"{name}_{next(_numbers)}\", daemon=True)",
        "name=f\"{name}_{next(_numbers)}\", daemon=False)",
        ("tests/test_worker_restart.py::test_a_reload_with_a_request_waiting_on_the_worker_goes_through[embedded]",),
    ),
    Mutant(
        "waits-left-at-handover", "a request running when the worker hands over waits out its timeout",
        "terminals/worker/server.py",
        "            if self._handing_over and message.get(\"reply_to\"):",
        "            if False:",
        ("tests/test_worker_restart.py::test_a_reload_with_a_request_waiting_on_the_worker_goes_through[split]",),
    ),
    Mutant(
        "rehearsal-not-heeded", "a reload to code that cannot take the terminals over strands them",
        "terminals/runtime/keeper_rehearsal.py",
        "            if not message.get(\"failed\"):",
        "            if True:",
        ("tests/test_keeper.py::test_code_that_cannot_take_the_terminals_over_leaves_them_to_the_running_worker[2-a saved state of version 1, kind 'pty'; this worker reads version 2]",),
    ),
    Mutant(
        "rehearsal-reads-no-state", "the rehearsal passes code that cannot read the saved state",
        "terminals/runtime/adoption.py",
        "    _readable_state(held)\n    ring_fd",
        "    ring_fd",
        ("tests/test_keeper.py::test_code_that_cannot_take_the_terminals_over_leaves_them_to_the_running_worker[2-a saved state of version 1, kind 'pty'; this worker reads version 2]",),
    ),
]
