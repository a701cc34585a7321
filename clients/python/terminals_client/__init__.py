"""Python client for the persistent terminal service: `Client` (and its async twin `AsyncClient`) creates and
finds terminals; a `Terminal` runs commands for their exit code and output, types, waits, streams, ends.

    from terminals_client import Client
    t = Client().create()                      # TERMINALS_URL and TERMINALS_API_KEY from the environment
    print(t.run("make test").check().output)
"""

from .aio import AsyncClient, AsyncStream, AsyncTerminal
from .client import Client, Stream, Terminal
from .errors import (AuthError, Busy, CommandFailed, InvalidInput, LimitReached, NotFound, RateLimited, ServerError,
                     ServiceUnavailable, TerminalInactive, TerminalsError, Timeout)
from .results import Chunk, CommandResult, ExitStatus, OutputMatch

__version__ = "1.0.0"

__all__ = [
    "AsyncClient", "AsyncStream", "AsyncTerminal", "AuthError", "Busy", "Chunk", "Client", "CommandFailed",
    "CommandResult", "ExitStatus", "InvalidInput", "LimitReached", "NotFound", "OutputMatch", "RateLimited",
    "ServerError", "ServiceUnavailable", "Stream", "Terminal", "TerminalInactive", "TerminalsError", "Timeout",
]
