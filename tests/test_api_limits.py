"""Limits on a tightly configured server: cwd root, terminals per user, env size, buffer lines and bytes, input size."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from functools import partial
from types import SimpleNamespace

import pytest

from terminals.models import AuditEvent, TerminalSession

from .client import Api
from .conftest import make_key
from .helpers import clean, names_field
from .servers import start_embedded, start_split, wait_for

MAX_PER_USER = 3
MAX_INPUT_BYTES = 1024
MAX_BUFFER_LINES = 100
MAX_BUFFER_BYTES = 65536
MAX_ENV_VARS = 5


@pytest.fixture(scope="module", params=["embedded", "split"])
def limited(request, tmp_path_factory, django_db_setup):
    """A deployment of its own with tight limits and a cwd root holding a symlink that leads out of it: an embedded
    server, or a split one whose two workers must hold one user to one limit."""
    root = tmp_path_factory.mktemp("cwd-root").resolve()
    (root / "inside" / "deeper").mkdir(parents=True)
    outside = tmp_path_factory.mktemp("outside").resolve()
    (root / "escape").symlink_to(outside)
    start = start_embedded if request.param == "embedded" else partial(start_split, webs=1, workers=2)
    server = start(
        TERMINALS_CWD_ROOT=str(root),
        TERMINALS_MAX_PER_USER=str(MAX_PER_USER),
        TERMINALS_MAX_INPUT_BYTES=str(MAX_INPUT_BYTES),
        TERMINALS_MAX_BUFFER_LINES=str(MAX_BUFFER_LINES),
        TERMINALS_MAX_BUFFER_BYTES=str(MAX_BUFFER_BYTES),
        TERMINALS_MAX_ENV_VARS=str(MAX_ENV_VARS),
    )
    yield SimpleNamespace(server=server, root=root, outside=outside)
    server.stop()


@pytest.fixture
def user(orm, limited):
    """A fresh user with a client on the limited server, so no other test's terminals count against its quota."""
    record, key = make_key(name="limits")
    api = Api(limited.server.url, key)
    yield SimpleNamespace(record=record, api=api)
    api.cleanup()


def refusals(user, action: str, outcome: str) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(user=user.record, action=action, outcome=outcome).order_by("id"))


@pytest.mark.parametrize("cwd", ["inside", "inside/deeper", "ABSOLUTE/inside/deeper", ".", ""])
def test_cwd_inside_root_is_accepted(limited, user, cwd):
    """Relative paths resolve against the root; absolute paths inside it and the root itself are accepted."""
    requested = cwd.replace("ABSOLUTE", str(limited.root))
    created = user.api.create(shell="/bin/bash", cwd=requested)
    expected = limited.root / cwd.replace("ABSOLUTE/", "") if cwd not in (".", "") else limited.root
    assert created["cwd"] == str(expected)
    assert user.api.run(created["terminalId"], "pwd") == str(expected)


@pytest.mark.parametrize(
    "cwd", ["..", "inside/../..", "OUTSIDE", "/etc", "escape", "escape/", "ABSOLUTE/escape", "ABSOLUTE/inside/../.."]
)
def test_cwd_outside_root_is_refused(limited, user, cwd):
    """"..", absolute paths outside the root and symlinks leading out are refused with 400 INVALID_INPUT naming cwd."""
    requested = cwd.replace("OUTSIDE", str(limited.outside)).replace("ABSOLUTE", str(limited.root))
    working = user.api.create(shell="/bin/bash", cwd="inside")["terminalId"]
    response = user.api.post("/api/terminals", json={"shell": "/bin/bash", "cwd": requested})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "INVALID_INPUT"
    assert names_field(error, "cwd"), error
    assert "cwd" in error["message"]
    assert len(refusals(user, "create", "INVALID_INPUT")) == 1
    listed = user.api.get("/api/terminals", params={"status": "all"}).json()["data"]
    assert [item["terminalId"] for item in listed["terminals"]] == [working]
    assert user.api.run(working, "pwd") == str(limited.root / "inside")


def test_terminal_limit_per_user(limited, orm):
    """A user's fourth active terminal is refused with 429 LIMIT_REACHED; others still create; a delete frees a slot."""
    first_user, first_key = make_key(name="quota")
    _, second_key = make_key(name="quota")
    first, second = Api(limited.server.url, first_key), Api(limited.server.url, second_key)
    try:
        terminals = [first.create(shell="/bin/bash")["terminalId"] for _ in range(MAX_PER_USER)]
        refused = first.post("/api/terminals", json={"shell": "/bin/bash"})
        assert refused.status_code == 429, refused.text
        assert refused.json()["error"]["code"] == "LIMIT_REACHED"
        assert AuditEvent.objects.filter(user=first_user, action="create", outcome="LIMIT_REACHED").count() == 1
        assert first.get("/api/terminals").json()["data"]["count"] == MAX_PER_USER

        other = second.create(shell="/bin/bash")["terminalId"]
        assert second.run(other, "echo other-$((1+1))") == "other-2"
        assert first.run(terminals[0], "echo still-$((1+2))") == "still-3"

        assert first.delete(f"/api/terminals/{terminals[0]}").status_code == 200
        again = first.create(shell="/bin/bash")["terminalId"]
        assert first.run(again, "echo again-$((2+2))") == "again-4"
        assert first.post("/api/terminals", json={"shell": "/bin/bash"}).status_code == 429

        # A shell that exits by itself frees its slot too.
        first.send(terminals[1], "exit")
        first.wait_status(terminals[1], "exited")
        last = first.create(shell="/bin/bash")["terminalId"]
        assert first.run(last, "echo last-$((2+3))") == "last-5"
        assert AuditEvent.objects.filter(user=first_user, action="create", outcome="LIMIT_REACHED").count() == 2
    finally:
        first.cleanup()
        second.cleanup()


def test_terminal_limit_per_user_holds_for_concurrent_creates(limited, orm):
    """Twelve creates of one user at once, spread over the workers, start exactly the user's limit of terminals;
    the rest are refused with 429 LIMIT_REACHED. Counting and starting apart let every create pass a count that
    none of the others had yet added to."""
    owner, key = make_key(name="burst")
    api = Api(limited.server.url, key)
    try:
        with ThreadPoolExecutor(12) as pool:
            answers = list(pool.map(lambda _: api.post("/api/terminals", json={"command": "sleep", "args": ["60"]}),
                                    range(12)))
        created = [answer for answer in answers if answer.status_code == 201]
        refused = [answer for answer in answers if answer.status_code != 201]
        assert 1 <= len(created) <= MAX_PER_USER, [answer.status_code for answer in answers]
        assert {(answer.status_code, answer.json()["error"]["code"]) for answer in refused} == {(429, "LIMIT_REACHED")}
        assert TerminalSession.objects.active().filter(owner=owner).count() == len(created)
        # Once the burst is over, the user gets exactly the rest of the limit: no place stays taken.
        for _ in range(MAX_PER_USER - len(created)):
            assert api.post("/api/terminals", json={"command": "sleep", "args": ["60"]}).status_code == 201
        assert api.post("/api/terminals", json={"command": "sleep", "args": ["60"]}).status_code == 429
        assert api.get("/api/terminals").json()["data"]["count"] == MAX_PER_USER
    finally:
        api.cleanup()


def test_env_over_limit_is_refused(limited, user):
    """Over TERMINALS_MAX_ENV_VARS variables are refused with 400 INVALID_INPUT naming env; the limit itself is fine."""
    allowed = {f"V{number}": str(number) for number in range(1, MAX_ENV_VARS + 1)}
    terminal = user.api.create(shell="/bin/bash", env=allowed)["terminalId"]

    too_many = {f"V{number}": str(number) for number in range(1, MAX_ENV_VARS + 2)}
    response = user.api.post("/api/terminals", json={"shell": "/bin/bash", "env": too_many})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "INVALID_INPUT"
    assert names_field(error, "env"), error
    assert len(refusals(user, "create", "INVALID_INPUT")) == 1
    assert user.api.run(terminal, "echo $V1-$V5") == "1-5"


def test_buffer_keeps_only_the_newest_lines(limited, user):
    """After 1000 lines only the newest 100 finished lines are held; reading from 0 says what was evicted."""
    api = user.api
    terminal = api.create(shell="/bin/bash")["terminalId"]
    api.send(terminal, "seq 1 1000; sleep 60")

    def settled():
        read = api.output(terminal)
        done = read["output"].split("\n")[-1] == "1000" and read["nextReadFrom"] == read["totalLines"]
        return read if done else None

    wait_for(settled, 15, "1000 as the last finished line")
    stats = api.get(f"/api/terminals/{terminal}/stats").json()["data"]
    finished = stats["totalLines"]  # the shell is busy: no unfinished prompt line
    assert finished > 1000
    assert stats["oldestLine"] == finished - MAX_BUFFER_LINES
    assert stats["bufferSize"] == MAX_BUFFER_LINES
    assert stats["newestLine"] == finished - 1

    read = api.output(terminal, since=0)
    assert read["truncated"] is True
    assert read["linesEvicted"] == finished - MAX_BUFFER_LINES
    assert read["linesEvicted"] > 0
    assert read["oldestLine"] == stats["oldestLine"]
    assert read["output"].split("\n") == [str(number) for number in range(901, 1001)]
    assert read["stats"]["linesShown"] == MAX_BUFFER_LINES
    assert read["nextReadFrom"] == finished

    head = api.output(terminal, since=0, mode="head", headLines=3)
    assert head["output"] == "901\n902\n903"
    assert head["truncated"] is True
    inside = api.output(terminal, since=stats["oldestLine"] + 10, maxLines=2)
    assert inside["output"] == "911\n912"
    assert inside["linesEvicted"] == 0

    # With the prompt back, the unfinished prompt line is held beside the newest 100 finished lines.
    api.send(terminal, "\x03")
    assert api.run(terminal, "echo back") == "back"
    prompt = wait_for(
        lambda: (lambda data: data if data["nextReadFrom"] == data["totalLines"] - 1 else None)(api.output(terminal)),
        15, "an unfinished prompt line",
    )
    stats = api.get(f"/api/terminals/{terminal}/stats").json()["data"]
    assert stats["totalLines"] == prompt["totalLines"]
    assert stats["oldestLine"] == prompt["nextReadFrom"] - MAX_BUFFER_LINES
    assert stats["bufferSize"] == MAX_BUFFER_LINES + 1


def test_buffer_bytes_stay_bounded_for_one_long_line(limited, user):
    """A single 200 KB line keeps the buffer within its byte limit plus eviction slack; output stays readable."""
    api = user.api
    slack = max(4096, MAX_BUFFER_BYTES // 4)
    terminal = api.create(shell="/bin/bash")["terminalId"]
    api.send(terminal, "head -c 200000 /dev/zero | tr '\\0' x; echo; echo long-''done")
    api.wait_output(terminal, lambda out: "long-done" in [clean(line) for line in out.split("\n")], what="long-done")
    stats = api.get(f"/api/terminals/{terminal}/stats").json()["data"]
    assert stats["totalBytes"] > 200000
    assert stats["bufferBytes"] <= MAX_BUFFER_BYTES + slack
    assert stats["oldestByte"] == stats["totalBytes"] - stats["bufferBytes"]

    read = api.output(terminal, since=0)
    assert read["truncated"] is True
    assert read["linesEvicted"] > 0
    kept = clean(read["output"].split("\n")[0])
    assert set(kept) == {"x"}
    assert 0 < len(kept) < 200000
    assert api.run(terminal, "echo alive-$((2+3))") == "alive-5"


def test_buffer_byte_eviction_never_splits_a_character(limited, user):
    """When eviction cuts into a line of 3-byte characters, what is left of it starts at a whole character."""
    api = user.api
    slack = max(4096, MAX_BUFFER_BYTES // 4)
    terminal = api.create(shell="/bin/bash")["terminalId"]
    api.send(terminal, "printf '€%.0s' $(seq 1 70000); echo; echo euro-''done")
    api.wait_output(terminal, lambda out: "euro-done" in [clean(line) for line in out.split("\n")], 30, "euro-done")
    stats = api.get(f"/api/terminals/{terminal}/stats").json()["data"]
    assert stats["totalBytes"] > 210000
    assert stats["bufferBytes"] <= MAX_BUFFER_BYTES + slack

    read = api.output(terminal, since=0)
    assert read["truncated"] is True
    kept = read["output"].split("\n")
    euros = [text for text in kept if "€" in text and "printf" not in text]
    assert euros
    assert all(set(clean(text)) == {"€"} for text in euros), [text[:20] for text in euros]
    assert "\ufffd" not in read["output"]


def test_input_over_limit_is_refused_and_audited(orm, limited, user):
    """Input over TERMINALS_MAX_INPUT_BYTES bytes is refused with 400 INVALID_INPUT naming input, and audited."""
    api = user.api
    terminal = api.create(shell="/bin/bash")["terminalId"]
    api.run(terminal, "true")
    # 1025 bytes; then 342 characters that take 1026 bytes.
    for text in ("echo " + "z" * (MAX_INPUT_BYTES + 1 - len("echo ")), "€" * 342):
        response = api.post(f"/api/terminals/{terminal}/input", json={"input": text})
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error["code"] == "INVALID_INPUT"
        assert names_field(error, "input"), error
        assert "input" in error["message"]
    refused = refusals(user, "input", "INVALID_INPUT")
    assert len(refused) == 2
    assert all(str(event.terminal_id) == terminal for event in refused)
    assert api.run(terminal, "echo fine-$((3+4))") == "fine-7"
    assert "zzzzzzzz" not in api.full_output(terminal)


def test_input_limit_accepts_input_below_the_limit(limited, user):
    """Input one byte under the limit is sent, with the newline it gets added."""
    api = user.api
    terminal = api.create(shell="/bin/bash")["terminalId"]
    api.run(terminal, "true")
    fits = "echo " + "y" * (MAX_INPUT_BYTES - 1 - len("echo "))
    assert api.send(terminal, fits).json()["data"]["bytesWritten"] == MAX_INPUT_BYTES
    api.wait_output(terminal, lambda out: "y" * 1018 in [clean(line) for line in out.split("\n")], what="the long echo")


def test_input_limit_accepts_input_of_exactly_the_limit(limited, user):
    """An input field of exactly TERMINALS_MAX_INPUT_BYTES bytes is not longer than the limit, so it is sent."""
    api = user.api
    terminal = api.create(shell="/bin/bash")["terminalId"]
    api.run(terminal, "true")
    exact = "echo " + "w" * (MAX_INPUT_BYTES - len("echo "))
    assert len(exact.encode()) == MAX_INPUT_BYTES
    response = api.post(f"/api/terminals/{terminal}/input", json={"input": exact})
    assert response.status_code == 200, response.text
    api.wait_output(terminal, lambda out: "w" * 1019 in [clean(line) for line in out.split("\n")], what="the long echo")


# Which shells may run, and how many terminals one worker holds

MAX_TOTAL = 2
ONLY_SHELL = "/bin/bash"


@pytest.fixture(scope="module")
def capped(django_db_setup):
    """An embedded server (one worker) that allows one shell and holds at most MAX_TOTAL terminals in all."""
    server = start_embedded(TERMINALS_ALLOWED_SHELLS=ONLY_SHELL, TERMINALS_MAX_TOTAL=str(MAX_TOTAL))
    yield server
    server.stop()


def test_a_shell_outside_the_allowed_ones_is_refused_naming_them(capped, orm):
    """TERMINALS_ALLOWED_SHELLS: /bin/sh (in /etc/shells, but not allowed here) gets 400 naming the allowed shell,
    an audit row, and nothing runs; the allowed shell still starts."""
    record, key = make_key(name="shells")
    api = Api(capped.url, key)
    try:
        refused = api.post("/api/terminals", json={"shell": "/bin/sh"})
        assert refused.status_code == 400, refused.text
        error = refused.json()["error"]
        assert error["code"] == "INVALID_INPUT"
        assert error["details"]["allowed"] == [ONLY_SHELL]
        assert AuditEvent.objects.filter(user=record, action="create", outcome="INVALID_INPUT").count() == 1
        assert api.get("/api/terminals").json()["data"]["count"] == 0

        allowed = api.create(shell="bash")["terminalId"]
        assert api.run(allowed, "echo allowed-$((1+1))") == "allowed-2"
    finally:
        api.cleanup()


def test_the_worker_total_is_reached_across_users_and_an_end_frees_a_slot(capped, orm):
    """TERMINALS_MAX_TOTAL: the creation past it, by any user, gets 429 LIMIT_REACHED, audited; ending one
    terminal frees a slot for another user."""
    first_user, first_key = make_key(name="total")
    second_user, second_key = make_key(name="total")
    first, second = Api(capped.url, first_key), Api(capped.url, second_key)
    try:
        held = [first.create(shell=ONLY_SHELL)["terminalId"], second.create(shell=ONLY_SHELL)["terminalId"]]
        refused = second.post("/api/terminals", json={"shell": ONLY_SHELL})
        assert refused.status_code == 429, refused.text
        assert refused.json()["error"]["code"] == "LIMIT_REACHED"
        assert AuditEvent.objects.filter(user=second_user, action="create", outcome="LIMIT_REACHED").count() == 1
        assert first.run(held[0], "echo held-$((1+2))") == "held-3"

        assert first.delete(f"/api/terminals/{held[0]}").status_code == 200
        freed = second.create(shell=ONLY_SHELL)["terminalId"]
        assert second.run(freed, "echo freed-$((2+2))") == "freed-4"
        assert first.post("/api/terminals", json={"shell": ONLY_SHELL}).status_code == 429
    finally:
        first.cleanup()
        second.cleanup()


def test_creations_at_once_past_the_worker_total_start_only_the_total(capped, orm):
    """Eight users create at once on a worker that holds MAX_TOTAL: exactly MAX_TOTAL terminals start (a place is
    held for each terminal while its record is written and it starts); the others get 429 LIMIT_REACHED, audited,
    and leave no terminal record."""
    made = [make_key(name="rush") for _ in range(8)]
    apis = [Api(capped.url, key) for _, key in made]
    try:
        with ThreadPoolExecutor(len(apis)) as pool:
            answers = list(pool.map(lambda api: api.post("/api/terminals", json={"shell": ONLY_SHELL}), apis))
        statuses = sorted(answer.status_code for answer in answers)
        assert statuses == [201] * MAX_TOTAL + [429] * (len(apis) - MAX_TOTAL), [answer.text for answer in answers]
        users = [user for user, _ in made]
        assert TerminalSession.objects.filter(owner__in=users).count() == MAX_TOTAL
        assert AuditEvent.objects.filter(user__in=users, action="create", outcome="LIMIT_REACHED").count() == 6
        for api, answer in zip(apis, answers):
            if answer.status_code == 201:
                api.created.append(answer.json()["data"]["terminalId"])
                assert api.run(api.created[-1], "echo up-$((3+3))") == "up-6"
    finally:
        for api in apis:
            api.cleanup()


@pytest.mark.parametrize("serializer,field,setting", [
    ("ResizeSerializer", "cols", "MAX_COLS"), ("ReadOptionsSerializer", "maxLines", "MAX_OUTPUT_LINES"),
    ("OutputQuerySerializer", "maxBytes", "MAX_READ_BYTES"), ("WaitQuerySerializer", "timeoutMs", "MAX_WAIT_MS"),
])
def test_a_request_bound_is_its_setting_read_when_used_by_the_check_and_the_schema(settings, serializer, field,
                                                                                     setting):
    """One source per bound: a setting changed after import moves both the check and the schema's maximum."""
    from terminals.api import serializers

    settings.TERMINALS = {**settings.TERMINALS, setting: 7}
    shape = getattr(serializers, serializer)
    assert shape().fields[field].max_value == 7
    refused = shape(data={"cols": 8, "rows": 1} if field == "cols" else {field: 8})
    assert not refused.is_valid()
    assert refused.errors[field] == ["Ensure this value is less than or equal to 7."]
    assert shape(data={"cols": 7, "rows": 1} if field == "cols" else {field: 7}).is_valid()
