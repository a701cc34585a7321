"""Test settings: the real settings, with every file in a fresh folder shared with the servers the tests start."""

import os
import tempfile

# A worker of a parallel run (pytest-xdist) inherits the controller's environment: it gets folders of its own, so
# its database and its servers' are not another worker's.
_PARALLEL_WORKER = os.environ.get("PYTEST_XDIST_WORKER")
if _PARALLEL_WORKER and os.environ.get("TERMINALS_TEST_FOLDERS_OF") != _PARALLEL_WORKER:
    os.environ["TERMINALS_TEST_FOLDERS_OF"] = _PARALLEL_WORKER
    os.environ.pop("TERMINALS_DATA_DIR", None)
    os.environ.pop("TERMINALS_HOMES", None)
os.environ.setdefault("TERMINALS_DATA_DIR", tempfile.mkdtemp(prefix="terminals-test-"))
# Terminals of the tests that are not about separation run as the service's own account, so they can use files
# the tests make; tests/test_separation.py and tests/test_isolation.py start servers with the real default.
os.environ.setdefault("TERMINALS_RUN_AS", "service")
if "TERMINALS_HOMES" not in os.environ:
    os.environ["TERMINALS_HOMES"] = tempfile.mkdtemp(prefix="terminals-homes-")
    os.chmod(os.environ["TERMINALS_HOMES"], 0o755)  # per-user homes in it must be reachable by their accounts

from config.settings import *  # noqa: E402,F403
