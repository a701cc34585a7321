"""An MCP server on standard input and output that forwards to this service's MCP endpoint over HTTP, for clients
that start their servers as programs (Claude Desktop). Built on the official SDK: its stdio server in front, its
Streamable HTTP client behind.

The key is read from TERMINALS_API_KEY, never from the command line, where process listings and shell histories
would show it. Standard output carries the protocol alone; what goes wrong is said on standard error.
"""

from __future__ import annotations

import asyncio
import os

from django.core.management.base import BaseCommand, CommandError

DEFAULT_URL = "http://127.0.0.1:3001/mcp"


class Command(BaseCommand):
    help = ("Serve MCP on stdin/stdout for clients that only start servers as programs, forwarding every call to "
            "the service's /mcp endpoint (or a profile such as /mcp/terminally) with the key in TERMINALS_API_KEY.")

    def add_arguments(self, parser):
        parser.add_argument("--url", default=os.environ.get("TERMINALS_MCP_URL", DEFAULT_URL),
                            help=f"the MCP endpoint (default: $TERMINALS_MCP_URL, else {DEFAULT_URL})")

    def handle(self, *args, url: str, **options):
        key = os.environ.get("TERMINALS_API_KEY", "").strip()
        if not key:
            raise CommandError("TERMINALS_API_KEY is not set: put the API key in the environment of this command "
                               "(in Claude Desktop: the server's \"env\"); it is never taken from the command line")
        try:
            asyncio.run(bridge(url, key))
        except KeyboardInterrupt:
            pass
        except Exception as error:  # noqa: BLE001 - said on stderr; stdout belongs to the protocol
            raise CommandError(f"the MCP endpoint at {url} cannot be used: {_reason(error)}") from None


async def bridge(url: str, key: str) -> None:
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.server.lowlevel import Server
    from mcp.server.stdio import stdio_server
    from mcp.shared._httpx_utils import create_mcp_http_client

    http = create_mcp_http_client(headers={"Authorization": f"Bearer {key}"})
    async with Client(streamable_http_client(url, http_client=http)) as remote:
        tools = await remote.list_tools()  # fails here, before serving, when the URL or the key is wrong

        async def list_tools(ctx, params):
            return tools

        async def call_tool(ctx, params):
            async def forward_progress(progress, total, message):
                await ctx.session.report_progress(progress, total, message)  # nothing when the client asked for none

            return await remote.call_tool(params.name, params.arguments or {}, progress_callback=forward_progress)

        server = Server("terminals", instructions="Persistent terminals on a terminals service, through its MCP "
                                                  "endpoint.", on_list_tools=list_tools, on_call_tool=call_tool)
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())


def _reason(error: BaseException) -> str:
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    text = str(error) or type(error).__name__
    if "401" in text:
        return "the key was refused (401): check TERMINALS_API_KEY"
    return text

