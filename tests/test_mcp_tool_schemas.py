"""Every MCP profile's tools/list, as the official SDK client reads it from a real server, is exactly the committed
snapshot (tests/mcp-tools.json): tool names, descriptions, input and output schemas and annotations are contracts
(three profiles are seeds' tool sets), so any change to them, even one a refactor makes by accident, fails here.

A deliberate change regenerates the snapshot, and the diff is reviewed with the change:

    TERMINALS_TEST_WRITE_MCP_SNAPSHOT=1 .venv/bin/python -m pytest -p no:cacheprovider -q tests/test_mcp_tool_schemas.py
"""

from __future__ import annotations

import json
import os
from pathlib import Path

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
