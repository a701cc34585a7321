"""The shared fixture world: users with keys (alice, bob, staff, a revoked one), real servers, clients."""

from __future__ import annotations

import os
import shutil
import uuid

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command

from terminals.models import ApiKey

from . import prerequisites, run_manifest
from .client import Api
from .servers import KEYS_MADE, STARTED, start_embedded, start_split


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items):
    """The secrets check runs last, in whatever order the files were named: it reads what every other test left."""
    items.sort(key=lambda item: item.nodeid.split("::")[0].endswith("test_zz_no_secrets.py"))


LOG_LINES_ON_FAILURE = 40


def pytest_runtest_setup(item):
    item.log_sizes = {id(process): _size(process) for process in STARTED}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed test's report ends with what the service processes logged while it ran (the last lines of each),
    so a failure seen only in CI says what the servers saw."""
    report = (yield).get_result()
    if not report.failed or report.when == "teardown":
        return
    before = getattr(item, "log_sizes", {})
    for process in STARTED:
        start = before.get(id(process), 0)
        if _size(process) > start:
            with open(process.log_path, "rb") as log:
                log.seek(start)
                lines = log.read().decode(errors="replace").splitlines()[-LOG_LINES_ON_FAILURE:]
            report.sections.append((f"{process.name} (pid {process.pid}) logged", "\n".join(lines)))


def _size(process) -> int:
    try:
        return process.log_path.stat().st_size
    except OSError:
        return 0


def pytest_sessionstart(session):
    """A machine without root, useradd or writable control groups stops the run at once, saying what to do,
    rather than failing tests one by one for a reason they do not name."""
    missing = prerequisites.missing()
    if missing:
        pytest.exit(prerequisites.report(missing), returncode=pytest.ExitCode.USAGE_ERROR)


def pytest_sessionfinish(session):
    """A worker of a parallel run leaves what it made for the secrets check that runs after all of them."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker:
        run_manifest.write(worker, keys=KEYS_MADE, started=STARTED,
                           database=str(settings.DATABASES["default"]["NAME"]), secret_key=settings.SECRET_KEY)


@pytest.fixture(scope="session")
def django_db_setup(django_db_blocker):
    """The tests share one real database file with the servers they start, so nothing is renamed or flushed."""
    with django_db_blocker.unblock():
        call_command("migrate", interactive=False, verbosity=0)


@pytest.fixture
def orm(django_db_setup, django_db_blocker):
    """Direct database access for assertions on rows the servers wrote."""
    with django_db_blocker.unblock():
        yield


def make_key(*, staff: bool = False, revoked: bool = False, name: str = "") -> tuple[object, str]:
    user = get_user_model().objects.create(username=f"{name or 'user'}-{uuid.uuid4().hex[:8]}", is_staff=staff)
    record, key = ApiKey.objects.create_key(user=user, name=name)
    KEYS_MADE.append(key)
    if revoked:
        record.revoke()
    return user, key


@pytest.fixture(scope="session")
def keys(django_db_setup, django_db_blocker) -> dict[str, str]:
    """Plaintext keys by role; the users are made fresh for each test run."""
    with django_db_blocker.unblock():
        return {
            "alice": make_key(name="alice")[1],
            "bob": make_key(name="bob")[1],
            "staff": make_key(name="staff", staff=True)[1],
            "revoked": make_key(name="revoked", revoked=True)[1],
        }


@pytest.fixture(scope="session")
def embedded_server(django_db_setup):
    server = start_embedded()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def split_server(django_db_setup):
    # A worker busy with a flood or a burst of 50 creations on a loaded machine may take more than the 5 s default
    # to answer; the tests of that timeout start deployments of their own.
    server = start_split(webs=2, workers=2, TERMINALS_WORKER_TIMEOUT_MS="60000")
    yield server
    server.stop()


DEPLOYMENTS = ("embedded", "split")


def pytest_generate_tests(metafunc):
    """Every test that reaches `server` (through alice, bob, staff, anonymous or client too) runs once per
    deployment, with the deployment in its id; `@pytest.mark.embedded_only("why")` keeps one on the embedded server."""
    if "server" not in metafunc.fixturenames:
        return
    marker = metafunc.definition.get_closest_marker("embedded_only")
    if marker is not None:
        assert marker.args and marker.args[0], f"{metafunc.definition.nodeid}: say why it is embedded only"
    deployments = ["embedded"] if marker is not None else list(DEPLOYMENTS)
    metafunc.parametrize("server", deployments, indirect=True, scope="session")


@pytest.fixture(scope="session")
def server(request):
    """The deployment the test is parametrised with: the embedded server, or the shared split deployment."""
    return request.getfixturevalue(f"{request.param}_server")


def _client(server, key):
    api = Api(server.url, key)
    yield api
    api.cleanup()


@pytest.fixture
def alice(server, keys):
    yield from _client(server, keys["alice"])


@pytest.fixture
def bob(server, keys):
    yield from _client(server, keys["bob"])


@pytest.fixture
def staff(server, keys):
    yield from _client(server, keys["staff"])


@pytest.fixture
def anonymous(server):
    yield from _client(server, None)


@pytest.fixture
def alice_user(orm, keys):
    """Alice's user record, for tests that look at her audit rows or change her account."""
    return ApiKey.objects.for_key(keys["alice"]).user


@pytest.fixture
def terminal(alice) -> str:
    """A live bash of alice's that has run one command."""
    terminal_id = alice.create(shell="/bin/bash")["terminalId"]
    assert alice.run(terminal_id, "echo ready") == "ready"
    return terminal_id


@pytest.fixture
def client(server, keys):
    """Alice's client on whichever deployment the test is parametrised with."""
    yield from _client(server, keys["alice"])


@pytest.fixture(scope="session")
def client_venv():
    """clients/python installed into a fresh virtualenv, once per run (tests/client_venv.py)."""
    from . import client_venv as venvs

    venv = venvs.create()
    yield venv
    shutil.rmtree(venv.folder, ignore_errors=True)
