"""A profile's tools, declared at module level and registered on an MCPServer in one place.

Each tool is a plain module-level function (a test imports and calls it with a context); `@TOOLS.tool(...)` only
notes its name, description and annotations. `ToolSet.server()` builds the profile's MCPServer, adds every tool in
the order declared (the order tools/list answers) and makes each refuse arguments it does not take.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mcp.types import ToolAnnotations


@dataclass(frozen=True)
class Declared:
    fn: Callable[..., Any]
    name: str | None
    description: str
    annotations: ToolAnnotations | None


@dataclass
class ToolSet:
    """One MCP profile: the server's name, its instructions for the model, and its tools."""

    name: str
    instructions: str
    tools: list[Declared] = field(default_factory=list)

    def tool(self, *, description: str, annotations: ToolAnnotations | None = None, name: str | None = None):
        """Declares the decorated function a tool of this set (named after the function unless name is given);
        the function itself is left as it is."""
        def declare(fn):
            self.tools.append(Declared(fn, name, description, annotations))
            return fn
        return declare

    def server(self):
        from mcp.server.mcpserver import MCPServer

        from .arguments import refuse_unknown_arguments

        server = MCPServer(self.name, instructions=self.instructions)
        for tool in self.tools:
            server.add_tool(tool.fn, name=tool.name, description=tool.description, annotations=tool.annotations)
        refuse_unknown_arguments(server)
        return server
