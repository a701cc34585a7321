"""Test settings: the real settings, with every file in a fresh folder shared with the servers the tests start."""

import os
import tempfile

os.environ.setdefault("TERMINALS_DATA_DIR", tempfile.mkdtemp(prefix="terminals-test-"))
# Terminals of the tests that are not about separation run as the service's own account, so they can use files
# the tests make; tests/test_separation.py and tests/test_isolation.py start servers with the real default.
os.environ.setdefault("TERMINALS_RUN_AS", "service")
if "TERMINALS_HOMES" not in os.environ:
    os.environ["TERMINALS_HOMES"] = tempfile.mkdtemp(prefix="terminals-homes-")
    os.chmod(os.environ["TERMINALS_HOMES"], 0o755)  # per-user homes in it must be reachable by their accounts

from config.settings import *  # noqa: E402,F403
