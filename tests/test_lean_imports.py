"""The service's processes leave out optional packages they never use (config/lean.py): the same start-up as
`manage.py serve`, in a fresh interpreter, loads the whole application without pyOpenSSL, requests, click or cbor2, and
another command still has them. Nor does it load what only unused features need until they are used: cryptography
(autobahn's WAMP authentication), drf-spectacular's generator (the OpenAPI document, terminals/openapi.py) and pyte
(a terminal's screen mirror, terminals/runtime/pty.py)."""

from __future__ import annotations

import base64
import hashlib
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
from daphne.server import Server  # what serve imports beside it
from django.urls import get_resolver
get_resolver().url_patterns  # every view, as on the first request
loaded = [name for name in (*UNUSED, *ON_FIRST_USE) if sys.modules.get(name) is not None]
print(",".join(loaded) or "none")
"""
UNUSED = ("OpenSSL", "requests", "click", "cbor2")
ON_FIRST_USE = ("cryptography", "drf_spectacular.openapi", "pyte")
PROBE = f"UNUSED, ON_FIRST_USE = {UNUSED!r}, {ON_FIRST_USE!r}\n{PROBE}"

# autobahn's WAMP authentication, left to load on first use, still works when used.
FIRST_USE = """
import sys
from config.lean import leave_out_unused
leave_out_unused(["manage.py", "serve"])
from daphne.server import Server
from autobahn.wamp import auth
assert "cryptography" not in sys.modules
print(auth.derive_key("secret", "salt").decode())
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
    assert set(loaded_by("migrate").split(",")) >= {"OpenSSL", "requests", "click", "cbor2", "cryptography"}


def test_what_loads_on_first_use_works_when_used():
    done = subprocess.run([sys.executable, "-c", FIRST_USE], cwd=ROOT, env=service_env(), capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    expected = hashlib.pbkdf2_hmac("sha256", b"secret", b"salt", 1000, 32)  # autobahn's defaults
    assert done.stdout.strip() == base64.b64encode(expected).decode()
