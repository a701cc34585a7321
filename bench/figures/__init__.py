"""One module per figure of the issue, each with TITLE and `async def measure(modes) -> FigureResult`."""

from . import commands, create, echo, fanout, ingest, mcp, memory, polling, rest_load, restart, scale, throughput

FIGURES = [ingest, echo, throughput, commands, create, memory, rest_load, fanout, mcp, polling, scale, restart]
