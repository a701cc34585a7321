"""Figure 9: `true` through MCP's run_command (the official SDK's client, Streamable HTTP) against the same command
through REST's commands endpoint, in the same run, on the same terminal."""

from __future__ import annotations

import time

from ..common import ms, percentile, scaled
from ..results import FigureResult, Target, attempt
from ..service import running

TITLE = "9. MCP round trip"
PANEL = "9. `true` through MCP and REST"
WARM_UP = 5


async def measure(modes: list[str]) -> FigureResult:
    result = FigureResult(TITLE)
    for mode in modes:
        measured = await attempt(f"{mode} MCP and REST", _both, mode)
        for key in ("p50", "p99"):
            mcp = measured["mcp"][key] if isinstance(measured, dict) else measured
            rest = measured["rest"][key] if isinstance(measured, dict) else None
            result.row(f"`true` via MCP {key}, ms ({mode})", values={mode: mcp}, reference=rest,
                       reference_name="REST", target=Target.ratio_at_most(1.5, "≤ 1.5× REST"))
        if isinstance(measured, dict):
            for series in ("mcp", "rest"):
                result.add_samples(PANEL, f"{series} ({mode})", measured[series]["samples"])
    count = scaled(200, 20)
    result.notes.append(
        f"{count} × `true` each way, alternating, in one bash terminal: MCP's run_command through the SDK's client "
        "(one POST each, answered on its event stream) against POST .../commands (`wait` true), each from sending "
        "to the answer with the exit code."
    )
    return result


async def _both(mode: str) -> dict:
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    count = scaled(200, 20)
    async with running(mode) as service, service.rest() as rest:
        terminal = await rest.create()
        await rest.wait_for_prompt(terminal)
        http = create_mcp_http_client(headers={"Authorization": f"Bearer {service.key}"})
        async with Client(streamable_http_client(f"{service.url}/mcp", http_client=http)) as client:
            async def through_mcp() -> float:
                started = time.perf_counter()
                answer = await client.call_tool("run_command", {"terminal_id": terminal, "command": "true"})
                seconds = time.perf_counter() - started
                if answer.is_error or answer.structured_content.get("exit_code") != 0:
                    raise RuntimeError(f"MCP run_command failed: {answer.content[0].text[:200]}")
                return seconds

            async def through_rest() -> float:
                started = time.perf_counter()
                data = await rest.command(terminal, "true", timeoutMs=30000)
                seconds = time.perf_counter() - started
                if data.get("exitCode") != 0:
                    raise RuntimeError(f"REST command ended with {data.get('exitCode')}")
                return seconds

            for _ in range(WARM_UP):
                await through_mcp()
                await through_rest()
            mcp, rest_times = [], []
            for _ in range(count):
                mcp.append(await through_mcp())
                rest_times.append(await through_rest())
    return {"mcp": _summary(mcp), "rest": _summary(rest_times)}


def _summary(seconds: list[float]) -> dict:
    samples = ms(seconds)
    return {"p50": percentile(samples, 0.5), "p99": percentile(samples, 0.99), "samples": samples}
