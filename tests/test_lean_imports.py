"""The service's processes leave out optional packages they never use (config/lean.py): the same start-up as
`manage.py serve`, in a fresh interpreter, loads the whole application without pyOpenSSL, requests or click, and
another command still has them."""

from __future__ import annotations

import subprocess
import sys

from .servers import ROOT, service_env

PROBE = """
import sys
from config.lean import leave_out_unused
leave_out_unused(["manage.py", sys.argv[1]])
import django
django.setup(set_prefix=False)
import config.asgi  # the whole application: Django, DRF, channels, daphne and Twisted, MCP's endpoint
loaded = [name for name in ("OpenSSL", "requests", "click") if sys.modules.get(name) is not None]
print(",".join(loaded) or "none")
"""


def loaded_by(command: str) -> str:
    done = subprocess.run([sys.executable, "-c", PROBE, command], cwd=ROOT, env=service_env(), capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]


def test_the_service_commands_load_the_application_without_the_unused_packages():
    assert loaded_by("serve") == "none"
    assert loaded_by("terminal_worker") == "none"


def test_other_commands_keep_every_package():
    assert loaded_by("migrate") != "none"
