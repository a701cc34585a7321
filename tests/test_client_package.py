"""The Python client as a package: it installs without the server's code, ships py.typed and passes mypy --strict,
and covers the served OpenAPI schema: every REST operation is used by the client or listed as left out on
purpose, so the two cannot drift apart."""

from __future__ import annotations

import json
import subprocess

import pytest
import requests

from .client_venv import PACKAGE, pinned

METHODS = {"get", "post", "put", "patch", "delete"}


@pytest.mark.embedded_only("the schema is the same code on both deployments")
def test_every_operation_of_the_served_schema_is_used_by_the_client_or_listed_as_not_covered(client_venv, server):
    schema = requests.get(f"{server.url}/api/schema/?format=json", timeout=30).json()
    served = {(method.upper(), path) for path, operations in schema["paths"].items() for method in operations
              if method in METHODS}
    listed = subprocess.run(
        [client_venv.python, "-c", "import json\nfrom terminals_client import _core\n"
         "print(json.dumps({'used': sorted(_core.ROUTES.values()), 'not': sorted(_core.NOT_COVERED)}))"],
        cwd=client_venv.folder, capture_output=True, text=True, check=True)
    client = json.loads(listed.stdout)
    used = {tuple(route) for route in client["used"]}
    left_out = {tuple(route) for route in client["not"]}
    assert served - used - left_out == set(), "operations the client neither uses nor lists in NOT_COVERED"
    assert (used | left_out) - served == set(), "the client names operations the service does not serve"
    assert used & left_out == set()


def test_the_package_installs_without_the_server_and_passes_mypy_strict(client_venv):
    isolated = subprocess.run(
        [client_venv.python, "-c", "import importlib.util, json, pathlib, terminals_client\n"
         "print(json.dumps({'server': [bool(importlib.util.find_spec(n)) for n in ('terminals', 'django')],\n"
         "  'typed': (pathlib.Path(terminals_client.__file__).parent / 'py.typed').exists()}))"],
        cwd=client_venv.folder, capture_output=True, text=True, check=True)
    assert json.loads(isolated.stdout) == {"server": [False, False], "typed": True}
    client_venv.install(pinned("mypy"))  # here, not for every run's virtualenv: mypy 2 needs Python 3.10
    checked = subprocess.run(
        [client_venv.python, "-m", "mypy", "--strict", "--cache-dir", str(client_venv.folder / "mypy-cache"),
         "terminals_client"], cwd=PACKAGE, capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
