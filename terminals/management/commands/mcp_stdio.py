"""An MCP server on standard input and output that forwards to this service's MCP endpoint over HTTP, for clients
that start their servers as programs (Claude Desktop). Built on the official SDK: its stdio server in front, its
Streamable HTTP client behind.

The key is read from TERMINALS_API_KEY, never from the command line, where process listings and shell histories
would show it. Standard output carries the protocol alone; what goes wrong is said on standard error.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os

from django.core.management.base import BaseCommand, CommandError

DEFAULT_URL = "http://127.0.0.1:3001/mcp"
# The HTTP client logs every request at INFO; on the bridge's stderr (which Claude Desktop shows as the server's log)
# that is one line per tool call and no help. Their warnings and errors still show.
QUIET_LOGGERS = ("httpx2", "httpx", "httpcore", "httpcore2")
# What to check when the endpoint answers with an HTTP error, by status.
CHECK = {
    401: "check that TERMINALS_API_KEY holds the whole key as create_api_key printed it (tk_..., without "
         "\"Bearer \"), that the key is not revoked or expired (manage.py list_api_keys on the service), and that "
         "--url names the service the key was made on",
    403: "check --url: the service refuses this origin or host (see docs/mcp.md, Connecting)",
    404: "check --url: the endpoint is /mcp or a profile such as /mcp/terminally",
}


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
        for name in QUIET_LOGGERS:
            logging.getLogger(name).setLevel(logging.WARNING)
        refusals: list = []
        try:
            asyncio.run(bridge(url, key, refusals))
        except KeyboardInterrupt:
            pass
        except Exception as error:  # noqa: BLE001 - said on stderr; stdout belongs to the protocol
            raise CommandError(f"the MCP endpoint at {url} cannot be used: {_reason(error, refusals)}") from None


async def bridge(url: str, key: str, refusals: list) -> None:
    """Serves stdio until its client leaves; the endpoint's HTTP error answers are kept in refusals (status and
    message), since the SDK reports them only as "Server returned an error response"."""
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.server.lowlevel import Server
    from mcp.server.stdio import stdio_server
    from mcp.shared._httpx_utils import create_mcp_http_client

    http = create_mcp_http_client(headers={"Authorization": f"Bearer {key}"})

    async def note_refusal(response):
        if response.status_code >= 400:
            await response.aread()  # an error answer is a short JSON envelope, never a stream
            refusals.append((response.status_code, response.reason_phrase, _message(response.text)))

    http.event_hooks["response"].append(note_refusal)
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


def _reason(error: BaseException, refusals: list) -> str:
    """Why the endpoint cannot be used, and what to check: the HTTP error it answered, or the error raised."""
    if refusals:
        status, phrase, message = refusals[-1]
        said = f": {message}" if message else ""
        check = CHECK.get(status, "check --url and the service's log")
        return f"the service answered {status} {phrase}{said}. Next: {check}."
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    text = str(error) or type(error).__name__
    if type(error).__name__ in ("ConnectError", "ConnectTimeout"):
        return f"{text}. Next: check that the service is running there and that --url (or $TERMINALS_MCP_URL) is right."
    return text


def _message(body: str) -> str:
    """The message of the service's error envelope, or nothing when the answer is not one."""
    try:
        error = json.loads(body).get("error")
    except (ValueError, AttributeError):
        return ""
    return str(error.get("message", ""))[:200] if isinstance(error, dict) else ""
