"""Our MCP profiles side by side with other MCP terminal servers on the same cases (`bench/agents/run`).

For each server and case: passed or why not, tool calls, characters handed to the agent, time, hangs. Writes
bench/agents/RESULTS.md. The peers come from the npm registry, installed by bench/agents/run into
bench/agents/.peers; they run over stdio with an empty HOME, ours over Streamable HTTP on the embedded server.
"""

from __future__ import annotations

import asyncio
import os
import platform
import shutil
import subprocess
import tempfile
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path

from ..common import BENCH_DIR, log
from ..service import running
from .cases import CASES, play
from .clients import DesktopCommander, Ours, OursTerminally, ShellServer, Tally

PEERS = BENCH_DIR / "agents" / ".peers" / "node_modules" / ".bin"
RESULTS = BENCH_DIR / "agents" / "RESULTS.md"


@asynccontextmanager
async def ours(path: str):
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    async with running("embedded") as service:
        http = create_mcp_http_client(headers={"Authorization": f"Bearer {service.key}"})
        async with streamable_http_client(f"{service.url}{path}", http_client=http) as (read, write), \
                ClientSession(read, write) as session:
            await session.initialize()
            yield session


@asynccontextmanager
async def peer(program: str, home: str, **env):
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    parameters = StdioServerParameters(command=str(PEERS / program), cwd=home,
                                       env={"HOME": home, "PATH": os.environ["PATH"], **env})
    with open(Path(home) / f"{program}.stderr", "w") as errors:
        async with stdio_client(parameters, errlog=errors) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            yield session


def servers(home: str):
    """(adapter class, how to connect) for every server compared."""
    return [
        (Ours, lambda: ours("/mcp")),
        (OursTerminally, lambda: ours("/mcp/terminally")),
        (DesktopCommander, lambda: peer("desktop-commander", home)),
        # Its safety evaluator asks the client's model (MCP sampling) unless turned off; no client here has one.
        (ShellServer, lambda: peer("mcp-shell-server", home, MCP_SHELL_ENHANCED_MODE="false",
                                   MCP_SHELL_LLM_EVALUATION="false")),
    ]


async def measure() -> dict:
    results: dict[str, dict[str, dict]] = {}
    home = tempfile.mkdtemp(prefix="bench-agents-home-")
    os.chmod(home, 0o755)  # our terminals run as an unprivileged account, which must enter the case folders
    try:
        for adapter_class, connect in servers(home):
            log(f"agents: {adapter_class.name}")
            rows = results[adapter_class.name] = {}
            async with AsyncExitStack() as stack:
                session = await stack.enter_async_context(connect())
                for title, case in CASES:
                    folder = Path(tempfile.mkdtemp(prefix="case-", dir=home))
                    folder.chmod(0o777)  # and write in them (git init)
                    agent = adapter_class()
                    agent.session, agent.tally, agent.workdir = session, Tally(), str(folder)
                    started = asyncio.get_running_loop().time()
                    try:
                        failure = await play(case, agent, folder)
                    finally:
                        try:
                            await asyncio.wait_for(agent.close(), 30)
                        except Exception as error:  # noqa: BLE001 - cleaning up is not part of the case
                            log(f"  closing: {type(error).__name__}: {error}")
                    seconds = asyncio.get_running_loop().time() - started
                    rows[title] = {"failure": failure, "calls": agent.tally.calls, "chars": agent.tally.chars,
                                   "seconds": seconds, "hangs": agent.tally.hangs,
                                   "slowest": max(agent.tally.seconds, default=0.0)}
                    log(f"  {title}: {'passed' if failure is None else failure} ({agent.tally.calls} calls, "
                        f"{agent.tally.chars} chars, {seconds:.1f} s)")
    finally:
        shutil.rmtree(home, ignore_errors=True)
    return results


def report(results: dict, started: datetime) -> str:
    names = list(results)
    lines = [
        "# MCP terminal servers side by side",
        "",
        f"Written by `bench/agents/run` on {started:%Y-%m-%d %H:%M} UTC, commit {_commit()}, "
        f"{platform.platform()}, {os.cpu_count()} cores. Each cell: passed (✓) or not (✗, why), then tool calls, "
        "characters handed to the agent (text content) and seconds for the whole case. A hang is a call that "
        "outlived the bound it was asked for by more than 5 s. How each server is driven: "
        "`bench/agents/clients.py`; the cases: `bench/agents/cases.py`.",
        "",
        "| case | " + " | ".join(names) + " |",
        "|---|" + "---|" * len(names),
    ]
    for title, _ in CASES:
        cells = []
        for name in names:
            row = results[name][title]
            mark = "✓" if row["failure"] is None else f"✗ {row['failure']}"
            hang = f", **{row['hangs']} hang**" if row["hangs"] else ""
            cells.append(f"{mark}<br>{row['calls']} calls, {row['chars']:,} chars, {row['seconds']:.1f} s{hang}")
        lines.append(f"| {title} | " + " | ".join(cells) + " |")
    totals = []
    for name in names:
        rows = results[name].values()
        passed = sum(row["failure"] is None for row in rows)
        totals.append(f"**{passed}/{len(CASES)} passed**<br>{sum(row['calls'] for row in rows)} calls, "
                      f"{sum(row['chars'] for row in rows):,} chars, {sum(row['hangs'] for row in rows)} hangs")
    lines.append("| **all** | " + " | ".join(totals) + " |")
    lines.append("")
    return "\n".join(lines)


def _commit() -> str:
    found = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return found.stdout.strip() or "unknown"


def main() -> None:
    started = datetime.now(UTC)
    results = asyncio.run(measure())
    text = report(results, started)
    RESULTS.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
