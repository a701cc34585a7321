"""Figure 12: terminals that outlive their server process (issue 33; docs/architecture.md, "Terminals that outlive
their worker"). Under the keeper (TERMINALS_KEEPER=true), with 10, 100 and 1,000 terminals: the time from SIGHUP
to the keeper (and from SIGKILL of the process it runs) until the new process answers a request for a terminal (a
SIGHUP first rehearses the new code, while the old process goes on answering), the longest time no request was
answered, and from the close of a client watching a counter until it has reattached from its byte and got its
first output; every line of that counter checked, none lost or repeated; and the PTY read path (ingest, echo) under the
keeper against the same deployment without it, in the same run."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import time

import websockets

from .. import live
from ..common import log, median, ms, percentile, scaled
from ..results import FigureResult, Target, attempt, column
from ..service import Rest, Service, running
from . import echo, ingest

TITLE = "12. Restart in place"
COUNTER = "i=0; while :; do i=$((i+1)); echo n=$i; sleep 0.02; done"
ROUNDS = 3  # SIGHUP restarts at each size (and one SIGKILL)
CREATORS = 4
KEEPER = {"TERMINALS_KEEPER": "true"}
WAIT_SECONDS = 60.0


def sizes() -> list[int]:
    return sorted({scaled(10, 10), scaled(100, 20), scaled(1000, 30)})


async def measure(modes: list[str]) -> FigureResult:
    result = FigureResult(TITLE)
    ours = {mode: await attempt(f"{mode} restarts", _restarts, mode) for mode in modes}
    for size in sizes():
        key = str(size)
        result.row(f"{size} terminals: SIGHUP → a request answered by the new process, max of {ROUNDS}, ms",
                   values=column(ours, key, "answer_max"), target=Target.note("reported (includes the rehearsal)"))
        result.row(f"{size} terminals: SIGHUP: the longest time no request was answered, max of {ROUNDS}, ms",
                   values=column(ours, key, "gap_max"), target=Target.at_most(2000, "≤ 2 s (1,000 terminals)"))
        result.row(f"{size} terminals: SIGHUP: the client's close → its first byte reattached, p99 of {ROUNDS}, ms",
                   values=column(ours, key, "reattach_p99"), target=Target.below(1000, "< 1 s"))
        result.row(f"{size} terminals: SIGKILL of the process the keeper runs → a request answered, ms",
                   values=column(ours, key, "kill_answer"), target=Target.note("reported"))
        result.row(f"{size} terminals: SIGKILL → the reattached client's first byte, ms",
                   values=column(ours, key, "kill_reattach"), target=Target.note("reported"))
    result.row("a counter's lines lost or repeated across every restart and kill above",
               values=column(ours, "broken_lines"), target=Target.below(1, "none"))
    result.row("terminals that did not come back with their pid", values=column(ours, "missing"),
               target=Target.below(1, "none"))
    command, size = ingest.workloads()[0]
    for mode in modes:
        pair = await attempt(f"{mode} read path under the keeper", _read_path, mode, command, size)
        result.row(f"`{command}` under the keeper, MB/s ({mode})", values={mode: column({mode: pair}, "kept")[mode]},
                   reference=column({mode: pair}, "plain")[mode], reference_name="without the keeper",
                   target=Target.ratio_at_least(0.9, "within 10% of without"))
        result.row(f"keystroke echo p50 under the keeper, ms ({mode})",
                   values={mode: column({mode: pair}, "echo_kept")[mode]},
                   reference=column({mode: pair}, "echo_plain")[mode], reference_name="without the keeper",
                   target=Target.ratio_at_most(1.1, "within 10% of without"))
    result.notes.append(
        f"One service per deployment under the keeper (TERMINALS_KEEPER=true): a counter (`echo n=$i` every 20 ms) "
        f"and bash terminals up to each size; at each size {ROUNDS} SIGHUPs to the keeper and one SIGKILL of the "
        "process it runs. A client watching the counter on a WebSocket is attached before each signal; requests "
        "(GET of the counter's record) are sent one after another from the signal until the new process answers "
        "one. 'Answered by the new process' runs from the signal (a SIGHUP first rehearses the new code while the "
        "old process answers); 'no request answered' is the longest time between two answers; the reattach runs "
        "from the watcher's close to its first output reattached from its byte. Every line of the counter is "
        "checked at the end. The read path: figure 1's first ingest and figure 2's echo, with and without the "
        "keeper, one after the other."
    )
    return result


async def _restarts(mode: str) -> dict:
    measured: dict = {}
    async with running(mode, KEEPER) as service, service.rest(connections=CREATORS * 2) as rest:
        counter = (await rest.call("POST", "/api/terminals", json={"command": "sh", "args": ["-c", COUNTER]}))["terminalId"]
        pids = {counter: (await rest.call("GET", f"/api/terminals/{counter}"))["pid"]}
        for size in sizes():
            pids.update(await _create(rest, size - len(pids)))
            answers, gaps, reattaches = [], [], []
            for _ in range(ROUNDS):
                answer, gap, reattach = await _restart_once(service, rest, counter, "hup")
                answers.append(answer)
                gaps.append(gap)
                reattaches.append(reattach)
            kill_answer, _, kill_reattach = await _restart_once(service, rest, counter, "kill")
            measured[str(size)] = {"answer_max": max(ms(answers)), "gap_max": max(ms(gaps)),
                                   "reattach_p99": percentile(ms(reattaches), 0.99),
                                   "kill_answer": kill_answer * 1000, "kill_reattach": kill_reattach * 1000}
            log(f"{mode}: {size} terminals: SIGHUP answered by the new process after "
                f"{', '.join(f'{v:.0f}' for v in ms(answers))} ms, unanswered for at most "
                f"{', '.join(f'{v:.0f}' for v in ms(gaps))} ms, reattached "
                f"{', '.join(f'{v:.0f}' for v in ms(reattaches))} ms after the close; SIGKILL "
                f"{kill_answer * 1000:.0f} / {kill_reattach * 1000:.0f} ms")
        now = [await rest.call("GET", f"/api/terminals/{terminal}") for terminal in pids]
        measured["missing"] = sum(1 for record in now if (record["status"], record["pid"]) != ("active", pids[record["id"]]))
        numbers = [int(n) for n in re.findall(r"n=(\d+)\r\n", await _everything(rest, counter))]
        measured["broken_lines"] = sum(1 for before, after in zip(numbers, numbers[1:]) if after != before + 1)
        log(f"{mode}: counter {len(numbers)} lines, {measured['broken_lines']} breaks; "
            f"{measured['missing']} terminals missing")
    return measured


async def _create(rest: Rest, count: int) -> dict[str, int]:
    created: dict[str, int] = {}

    async def creator(share: int) -> None:
        for _ in range(share):
            data = await rest.call("POST", "/api/terminals", json={"shell": "/bin/bash"})
            created[data["terminalId"]] = data["pid"]

    await asyncio.gather(*(creator(count // CREATORS + (1 if n < count % CREATORS else 0)) for n in range(CREATORS)))
    return created


def _keeper(service: Service) -> int:
    server = service.server
    return (server.processes[0] if server.mode == "embedded" else server.process("worker0")).pid


def _child(pid: int) -> int:
    """The process the keeper runs: among its children, the one running manage.py (after a restart, the
    terminals' processes are its children too: it is their subreaper)."""
    with open(f"/proc/{pid}/task/{pid}/children") as children:
        for child in children.read().split():
            with open(f"/proc/{child}/cmdline", "rb") as cmdline:
                if b"manage.py" in cmdline.read():
                    return int(child)
    raise RuntimeError(f"the keeper {pid} runs no manage.py process")


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


async def _restart_once(service: Service, rest: Rest, counter: str, how: str) -> tuple[float, float, float]:
    """(seconds from the signal until the new process answered, the longest time between two answers (or the
    signal and the first), from the watcher's close until it had its first byte reattached)."""
    socket = await live.OurSocket.open(service, counter, fromByte=(await rest.stats(counter))["totalBytes"])
    await socket.receive()
    keeper = _keeper(service)
    old = _child(keeper)
    started = time.perf_counter()
    os.kill(keeper if how == "hup" else old, signal.SIGHUP if how == "hup" else signal.SIGKILL)
    watcher = asyncio.ensure_future(_reattached(service, socket, counter, started))
    previous, gap = started, 0.0
    while True:
        by_new = _gone(old)  # the old process was gone before the request: the new one answers it
        try:
            await rest.call("GET", f"/api/terminals/{counter}")
            now = time.perf_counter()
            gap, previous = max(gap, now - previous), now
            if by_new:
                break
        except Exception:  # noqa: BLE001 - refused or 503 while the new process starts
            if time.perf_counter() - started > WAIT_SECONDS:
                raise
        await asyncio.sleep(0.01)
    return now - started, gap, await watcher


async def _reattached(service: Service, socket: live.OurSocket, counter: str, started: float) -> float:
    """Reads until the server closes the watcher, reattaches from its byte, and times its first output from the
    close."""
    try:
        while True:
            frame = json.loads(await asyncio.wait_for(socket.ws.recv(), WAIT_SECONDS))
            if frame.get("type") == "output":
                socket.next = frame["next"]
    except websockets.ConnectionClosed:
        pass
    started = time.perf_counter()
    while True:
        try:
            again = await live.OurSocket.open(service, counter, fromByte=socket.next)
            break
        except Exception:  # noqa: BLE001 - refused (4503) or cut while the new process starts
            if time.perf_counter() - started > WAIT_SECONDS:
                raise
            await asyncio.sleep(0.01)
    try:
        await asyncio.wait_for(again.receive(), WAIT_SECONDS)
        return time.perf_counter() - started
    finally:
        await again.close()


async def _everything(rest: Rest, terminal: str) -> str:
    text, position = "", 0
    while True:
        data = await rest.output(terminal, fromByte=str(position), maxBytes=str(1 << 20))
        text += data["chunk"]
        if data["nextByte"] == position:
            return text
        position = data["nextByte"]


async def _read_path(mode: str, command: str, size: int) -> dict:
    """The same ingest and echo, under the keeper (the ring written on every read) and without."""
    measured = {}
    for name, settings in (("plain", {}), ("kept", KEEPER)):
        async with running(mode, settings) as service, service.rest() as rest:
            terminal = await rest.create()
            await rest.wait_for_prompt(terminal)
            rates = [size / await ingest._ingest_once(rest, terminal, command, size, 0.0) / 1e6
                     for _ in range(ingest.repeats())]
            measured[name] = median(rates)
            socket = await live.OurSocket.open(service, await rest.create())
            try:
                measured[f"echo_{name}"] = (await echo._echo(socket, echo.keystrokes()))["p50"]
            finally:
                await socket.close()
        log(f"{mode} {name}: {command}: {measured[name]:.1f} MB/s; echo p50 {measured[f'echo_{name}']:.3f} ms")
    return measured
