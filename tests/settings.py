"""Test settings: the real settings, with every file in a fresh folder shared with the servers the tests start."""

import os
import tempfile

os.environ.setdefault("TERMINALS_DATA_DIR", tempfile.mkdtemp(prefix="terminals-test-"))

from config.settings import *  # noqa: E402,F403
