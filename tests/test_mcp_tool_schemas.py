"""The MCP tool sets' shape. Every MCP profile's tools/list, as the official SDK client reads it from a real server, is exactly the committed
snapshot (tests/mcp-tools.json): tool names, descriptions, input and output schemas and annotations are contracts
(three profiles are seeds' tool sets), so any change to them, even one a refactor makes by accident, fails here.

A deliberate change regenerates the snapshot, and the diff is reviewed with the change:

    TERMINALS_TEST_WRITE_MCP_SNAPSHOT=1 .venv/bin/python -m pytest -p no:cacheprovider -q tests/test_mcp_tool_schemas.py

Each tool is a module-level function a test imports and calls, and every wait is bounded once, in the core.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest
from mcp.server.mcpserver.exceptions import ToolError

from terminals.audit import Actor
from terminals.sessions import wait_bound_ms

from .helpers import run
from .test_mcp import connect

SNAPSHOT = Path(__file__).parent / "mcp-tools.json"
PROFILES = ("/mcp", "/mcp/terminally", "/mcp/komodo", "/mcp/persistent-terminal")


async def _listed(url: str, key: str) -> dict:
    listed = {}
    for path in PROFILES:
        async with connect(url, key, path) as client:
            tools = (await client.list_tools()).tools
            listed[path] = {
                "server": client.server_info.name,
                "instructions": client.instructions,
                "tools": [tool.model_dump(mode="json", by_alias=True, exclude_none=True) for tool in tools],
            }
    return listed


def test_every_profiles_tools_are_the_committed_snapshot(embedded_server, keys):
    # Embedded only: the list is built by the web code, the same in both deployments.
    listed = run(_listed(embedded_server.url, keys["alice"]))
    if os.environ.get("TERMINALS_TEST_WRITE_MCP_SNAPSHOT"):
        SNAPSHOT.write_text(json.dumps(listed, indent=1, ensure_ascii=False, sort_keys=True) + "\n")
    assert listed == json.loads(SNAPSHOT.read_text()), (
        "an MCP tool's name, description, schema or annotations changed; if on purpose, regenerate the snapshot "
        "(see this file's docstring) and review its diff")


def test_a_tool_is_a_module_level_function_a_test_imports_and_calls():
    from terminals.mcp.tools import send_input

    with pytest.raises(ToolError, match="unknown key 'ctrl-1'. Next: use one of"):
        asyncio.run(send_input(None, terminal_id="any", keys=["ctrl-1"]))


def test_every_wait_is_bounded_once_in_the_core_by_max_wait_ms_and_the_callers_own_bound(settings):
    settings.TERMINALS = {**settings.TERMINALS, "MAX_WAIT_MS": 600_000}
    assert wait_bound_ms(Actor(), 900_000) == 600_000  # REST, ACP: the core's bound only
    assert wait_bound_ms(Actor(max_wait_ms=60_000), 900_000) == 60_000  # an MCP caller's own bound
    assert wait_bound_ms(Actor(max_wait_ms=60_000), 2_500) == 2_500
    settings.TERMINALS = {**settings.TERMINALS, "MAX_WAIT_MS": 1_000}  # read when used
    assert wait_bound_ms(Actor(max_wait_ms=60_000), 900_000) == 1_000
