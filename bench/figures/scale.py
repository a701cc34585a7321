"""Figure 11: the split deployment on several worker hosts (PostgreSQL, Redis, three hosts, two web processes),
ramped in steps until a target breaks; every lost byte accounted for; one host killed; the same load on the
embedded server and, for its WebSocket part, on terminado."""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass

from .. import hosts, live, terminado_server
from ..common import log, ms, percentile, scale, scaled
from ..results import Failure, FigureResult, Target, attempt
from ..scale_load import (
    PRINT,
    TerminadoWatcher,
    Typist,
    Watcher,
    create_open_loop,
    poll_open_loop,
    stalled_client,
)
from ..service import Rest

TITLE = "11. Several worker hosts"
PANEL = "11. Keystroke echo at the last step of the ramp"
HOSTS, WEBS = 3, 2
TYPISTS = 3  # WebSocket clients typing into `cat`, one per host where the creations allow
TYPING_PAUSE = 0.05  # a key every 50 ms per typist
POLL_PERIOD = 0.5  # each REST poller: a tail read twice a second
CATCH_UP_SECONDS = 20.0  # after a step, how long a watcher may take to reach the bytes printed within it
CREATE_CONCURRENCY = 8
UNIT_CREATIONS = 20  # creations (then deletions) timed alone for their unit cost
LATE_LIMIT = 65536  # the output the first printing terminal keeps (outputByteLimit): a late joiner gets a gap
# Each ramp starts no step after this long (the figure must end within bench/__main__.py's 8 minutes).
RAMP_SECONDS = {"split": 170, "embedded": 120, "terminado": 80}
# A step breaks a target when any of these fails; the ramp stops after it.
ECHO_P99_MS, POLL_P99_MS, DELIVERED_SHARE = 100.0, 250.0, 0.99
SETTINGS = {
    "TERMINALS_MAX_TOTAL": "5000",
    "TERMINALS_MAX_PER_USER": "100000",
    "TERMINALS_MAX_LIVE_CONNECTIONS_PER_USER": "100000",
}
# (terminals, of them printing 40 KB/s with one watcher each, REST pollers at 2/s, creations/s) at BENCH_SCALE=1.
FULL_STEPS = ((50, 5, 10, 1.0), (150, 15, 30, 2.0), (400, 40, 80, 4.0), (1000, 100, 200, 8.0))


@dataclass(frozen=True)
class Step:
    terminals: int
    printers: int
    pollers: int
    creations: float

    def label(self) -> str:
        return (f"{self.terminals} terminals, {self.printers} printing 40 KB/s, {self.pollers} pollers, "
                f"{self.creations:g} creations/s")


def steps() -> list[Step]:
    return [Step(scaled(terminals, 8), scaled(printers, 2), scaled(pollers, 2), max(0.5, creations * scale()))
            for terminals, printers, pollers, creations in FULL_STEPS]


def window() -> float:
    return float(scaled(15, 4))


async def measure(modes: list[str]) -> FigureResult:
    result = FigureResult(TITLE)
    ramp = steps()
    ours = {}
    for mode in [mode for mode in ("split", "embedded") if mode in modes]:
        ours[mode] = await attempt(f"{mode} ramp", _ours, mode, ramp)
    reached = max((len(m["steps"]) for m in ours.values() if isinstance(m, dict)), default=len(ramp))
    peer = await attempt("terminado ramp", _terminado, ramp, reached)  # as far as ours went
    _rows(result, ramp, ours, peer)
    return result


# --- our service --------------------------------------------------------------------------------------------------


async def _ours(mode: str, ramp: list[Step]) -> dict:
    deployment = await asyncio.to_thread(
        hosts.start_split if mode == "split" else hosts.start_embedded,
        *((HOSTS, WEBS, SETTINGS) if mode == "split" else (SETTINGS,)),
    )
    try:
        fleet = Fleet(deployment)
        async with fleet:
            measured = {"steps": [], "samples": []}
            if mode == "split":
                measured["units"] = await attempt("unit costs", fleet.unit_costs, ramp[0].printers)
            deadline = time.monotonic() + RAMP_SECONDS[mode] * max(1.0, scale())
            for number, step in enumerate(ramp, 1):
                if time.monotonic() > deadline:
                    log(f"{mode}: the ramp stops before step {number}: its time budget is spent")
                    break
                outcome = await fleet.step(step)
                measured["steps"].append(outcome)
                log(f"{mode} step {number} ({step.label()}): {_summary(outcome)}")
                if outcome["broken"]:
                    log(f"{mode}: the ramp stops at step {number}: {'; '.join(outcome['broken'])}")
                    break
                if mode == "split" and number == 1:
                    # At the first step's load, while the deployment is healthy (a broken step may have taken every
                    # host down); the host comes back and the ramp goes on with three.
                    measured["failover"] = await _failover(fleet)
            measured["samples"] = outcome["echo_samples"]
            return measured
    finally:
        await asyncio.to_thread(deployment.stop)


async def _failover(fleet: Fleet) -> object:
    failover = await attempt("failover", fleet.failover)
    if isinstance(failover, dict):
        log(f"failover: {failover['terminals']} terminals of {failover['host']} lost after {failover['lost_s']:.1f} s, "
            f"its {failover['clients']} clients closed after {failover['told_s']:.1f} s (codes {failover['codes']}, "
            f"{failover['untold']} never told); the other hosts' echo p50/p99 {failover['others_echo_p50']:.1f}/"
            f"{failover['others_echo_p99']:.1f} ms")
    restarted = await attempt("restarting the killed host", fleet.replace_lost_host)
    if isinstance(restarted, Failure):
        raise RuntimeError(f"the killed host did not come back: {restarted.reason}")
    return failover


class Fleet:
    """What runs on the deployment: terminals (idle, printing, typed into), their clients, and where each runs."""

    def __init__(self, deployment: hosts.Deployment) -> None:
        self.deployment = deployment
        self.rests = [Rest(endpoint.url, deployment.key, 256) for endpoint in deployment.endpoints]
        self.idle: list[str] = []
        self.watchers: list[Watcher] = []
        self.typists: list[Typist] = []
        self.tasks: list[asyncio.Future] = []
        self.host_of: dict[str, str] = {}
        self.workers: dict[str, str] = {}
        self.stalled = None  # a client that attached and never reads again: it must slow nobody else
        self.lost_host = ""
        self.late_terminal = ""  # the printing terminal that keeps LATE_LIMIT bytes

    async def __aenter__(self) -> Fleet:
        if self.deployment.mode == "split":
            self.workers = await asyncio.to_thread(hosts.wait_for_workers, self.deployment.endpoints[0], HOSTS)
        await self._add_typists()
        return self

    async def __aexit__(self, *exc) -> None:
        for client in [*self.watchers, *(typist.socket for typist in self.typists), *filter(None, [self.stalled])]:
            try:
                await asyncio.wait_for(client.close(), 5)
            except Exception:  # noqa: BLE001, S110 - closing at the end; the server may have closed it first
                pass
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        for rest in self.rests:
            await rest.__aexit__()

    @property
    def terminals(self) -> list[str]:
        return [*self.idle, *(watcher.terminal for watcher in self.watchers), *(t.terminal for t in self.typists)]

    def rest(self, number: int) -> Rest:
        return self.rests[number % len(self.rests)]

    def endpoint(self, number: int) -> hosts.Endpoint:
        return self.deployment.endpoints[number % len(self.deployment.endpoints)]

    async def _create(self, count: int, **body) -> list[str]:
        gate = asyncio.Semaphore(CREATE_CONCURRENCY)

        async def one(number: int) -> str:
            async with gate:
                return await self.rest(number).create(**body)

        return list(await asyncio.gather(*(one(number) for number in range(count))))

    async def _add_typists(self) -> None:
        """TYPISTS terminals running `cat`, each typed into by its own client. In the split deployment the shared
        creation queue decides the host, so a few more are created (and kept as idle terminals) until each host
        has one, for the failover to have typists on the surviving hosts."""
        chosen: list[str] = []
        for _ in range(4 if self.workers else 1):
            created = await self._create(TYPISTS)
            await self._locate()
            for terminal in created:
                hosts_taken = {self.host_of.get(t) for t in chosen}
                wanted = not self.workers or self.host_of.get(terminal) not in hosts_taken
                (chosen if wanted and len(chosen) < TYPISTS else self.idle).append(terminal)
            if len(chosen) >= TYPISTS:
                break
        for number, terminal in enumerate(chosen):
            socket = await live.OurSocket.open(self.endpoint(number), terminal)
            await live.start_cat(socket)
            self.typists.append(Typist(socket, terminal))

    async def _locate(self) -> None:
        """Which host each terminal runs on: its worker (GET /api/terminals) and that worker's hostname."""
        if not self.workers:
            return
        listed = await self.rests[0].call("GET", "/api/terminals")
        for terminal in listed["terminals"]:
            self.host_of[terminal["terminalId"]] = self.workers.get(terminal["worker"], "?")

    async def _add_printers(self, count: int) -> None:
        if count and self.late_terminal not in {watcher.terminal for watcher in self.watchers}:
            # One keeps only LATE_LIMIT bytes, so a client attaching from byte 0 must be told of a gap.
            created = [*await self._create(1, outputByteLimit=LATE_LIMIT), *await self._create(count - 1)]
            self.late_terminal = created[0]
        else:
            created = await self._create(count)
        for number, terminal in enumerate(created):
            rest = self.rest(number)
            await rest.wait_for_prompt(terminal, timeout=60)
            await rest.type(terminal, PRINT + "\r")
            watcher = await Watcher.open(self.endpoint(number + 1), terminal, mode="view")
            self.watchers.append(watcher)
            self.tasks.append(asyncio.ensure_future(watcher.run()))
        if self.watchers and self.stalled is None:
            self.stalled = await stalled_client(self.endpoint(0), self.watchers[0].terminal)

    async def _late_joiner(self) -> dict:
        """A client attaching from byte 0 to the first printing terminal, which keeps only LATE_LIMIT bytes: until
        it reaches the terminal's total, what it got as output, what gap frames announced, and what neither."""
        terminal = self.late_terminal
        watcher = await Watcher.open(self.endpoint(0), terminal, mode="view", fromByte=0)
        task = asyncio.ensure_future(watcher.run())
        try:
            watcher.mark((await self.rests[0].stats(terminal))["totalBytes"])
            await asyncio.wait_for(watcher.reached.wait(), CATCH_UP_SECONDS)
            counts = watcher.at_cut or watcher.counts
            return {"late_total": watcher.cut, "late_received": counts.received, "late_gap_bytes": counts.gap_bytes,
                    "late_silent": counts.silent + (watcher.cut - watcher.next if watcher.at_cut is None else 0)}
        finally:
            await watcher.close()
            task.cancel()

    async def step(self, step: Step) -> dict:
        """Grows the fleet to the step's size, then runs its load for the window; what it measured."""
        setup = time.monotonic()
        try:
            await self._add_printers(max(0, step.printers - len(self.watchers)))
            self.idle += await self._create(max(0, step.terminals - len(self.terminals)))
        except Exception as error:  # noqa: BLE001 - the machine (or a limit) broke: that is this step's outcome
            return {"step": step, "broken": [f"growing to the step failed: {error!r}"[:200]], "echo_samples": [],
                    "setup_s": time.monotonic() - setup}
        await self._locate()
        setup = time.monotonic() - setup
        await asyncio.sleep(1.0)  # the new shells print their prompts
        try:
            outcome = await self._window(step)
        except Exception as error:  # noqa: BLE001 - the deployment broke under this step: that is its outcome
            cause = hosts.known_cause(self.deployment)
            return {"step": step, "broken": [f"{cause}the step failed: {error!r}"[:300]], "echo_samples": [],
                    "setup_s": setup}
        outcome["setup_s"] = setup
        outcome["hosts"] = _count_by_host(self.host_of, self.terminals)
        outcome["broken"] = _broken(outcome)
        return outcome

    async def _window(self, step: Step) -> dict:
        starts = {watcher.terminal: (watcher.next, _copy(watcher.counts)) for watcher in self.watchers}
        before = await asyncio.to_thread(hosts.stats_snapshot, self.deployment)
        started = time.monotonic()
        until = started + window()
        poll_errors, create_errors, deletes = [], [], []
        typing = [typist.type_until(until, TYPING_PAUSE) for typist in self.typists]
        polling = [poll_open_loop(self.rests, self.terminals, until, POLL_PERIOD, poll_errors)
                   for _ in range(step.pollers)]
        creating = create_open_loop(self.rests, step.creations, until, create_errors, deletes)
        results = await asyncio.gather(*typing, *polling, creating)
        watching = await self._mark()  # the terminals' totals as the window ends
        seconds = time.monotonic() - started  # a slow answer may have kept the window open a little longer
        after = await asyncio.to_thread(hosts.stats_snapshot, self.deployment)
        await asyncio.gather(*deletes)
        echoes = [seconds for samples in results[: len(typing)] for _, seconds in samples]
        polls = [latency for latencies in results[len(typing) : -1] for latency in latencies]
        creations = results[-1]
        delivery = await self._delivery(starts, watching)
        watched = {watcher.terminal for watcher in self.watchers}
        late = await attempt("late joiner", self._late_joiner) if self.late_terminal in watched else None
        if isinstance(late, dict):
            delivery.update(late)
            delivery["silent"] += late["late_silent"]
        return {
            "step": step,
            "seconds": seconds,
            "echo_p50": percentile(ms(echoes), 0.5),
            "echo_p99": percentile(ms(echoes), 0.99),
            "echo_samples": ms(echoes),
            "poll_p50": percentile(ms(polls), 0.5),
            "poll_p99": percentile(ms(polls), 0.99),
            "polls_per_s": len(polls) / seconds,
            "poll_errors": len(poll_errors),
            "creations_per_s": len(creations) / seconds,
            "create_p99": percentile(ms(creations), 0.99),
            "create_errors": len(create_errors),
            "errors": (poll_errors + create_errors)[:3],
            **delivery,
            **hosts.stats_between(before, after),
        }

    async def unit_costs(self, printers: int) -> dict:
        """What one unit of each kind of load costs, each measured alone on the quiet deployment and less the idle
        cost of as long: CPU milliseconds by process kind, Redis commands, PostgreSQL transactions and rows."""
        seconds = float(scaled(5, 2))
        idle = await self._amounts(asyncio.sleep, seconds)
        units = {"idle second": _per_unit(idle, None, idle["seconds"])}

        async def polls() -> int:
            until, errors = time.monotonic() + seconds, []
            done = await asyncio.gather(*(poll_open_loop(self.rests, self.terminals, until, 0.0, errors)
                                          for _ in range(4)))
            return sum(map(len, done))

        async def keys() -> int:
            until = time.monotonic() + seconds
            done = await asyncio.gather(*(typist.type_until(until, 0.005) for typist in self.typists))
            return sum(map(len, done))

        made: list[str] = []

        async def creations() -> int:
            made.extend(await self._create(UNIT_CREATIONS))
            return len(made)

        async def deletions() -> int:
            gate = asyncio.Semaphore(CREATE_CONCURRENCY)

            async def one(number: int, terminal: str) -> None:
                async with gate:
                    await self.rest(number).delete(terminal)

            await asyncio.gather(*(one(n, t) for n, t in enumerate(made)))
            return len(made)

        async def output() -> int:
            start = sum(watcher.counts.received for watcher in self.watchers)
            await asyncio.sleep(seconds)
            return sum(watcher.counts.received for watcher in self.watchers) - start

        async def printing() -> None:  # not measured: the printers and their watchers start
            await self._add_printers(printers)
            await asyncio.sleep(1.0)

        for name, work in (("tail poll", polls), ("typed key (WebSocket, echoed)", keys),
                           ("creation", creations), ("deletion", deletions), ("MB delivered to a watcher", output)):
            if work is output:
                await printing()
            amounts = await self._amounts(work)
            count = amounts.pop("count") / (1e6 if name.startswith("MB") else 1)
            units[name] = _per_unit(amounts, idle, count)
            log(f"unit cost of a {name}: {_unit_text(units[name])}")
        return units

    async def _amounts(self, work, *args) -> dict:
        before = await asyncio.to_thread(hosts.stats_snapshot, self.deployment)
        count = await work(*args)
        await asyncio.sleep(1.5)  # PostgreSQL's statistics reach pg_stat_database within about a second
        after = await asyncio.to_thread(hosts.stats_snapshot, self.deployment)
        return {**hosts.totals_between(before, after), "count": count or 0}

    async def _mark(self) -> list[Watcher]:
        """Closes each open watcher's book at its terminal's total output now (GET .../stats)."""
        live_watchers = [watcher for watcher in self.watchers if watcher.closed is None]
        totals = await asyncio.gather(*(self.rest(n).stats(w.terminal) for n, w in enumerate(live_watchers)),
                                      return_exceptions=True)
        failed = [total for total in totals if isinstance(total, Exception)]
        if failed:  # without a terminal's total its watcher's book cannot be closed: the step failed
            raise RuntimeError(f"{len(failed)} of {len(totals)} stats reads failed, the first: {failed[0]}")
        for watcher, stats in zip(live_watchers, totals, strict=True):
            watcher.mark(stats["totalBytes"])
        return live_watchers

    async def _delivery(self, starts: dict, live_watchers: list[Watcher]) -> dict:
        """Each watcher's book between the window's start and the terminal's total at its end: bytes produced,
        delivered, announced by gap frames, skipped silently, and still undelivered after CATCH_UP_SECONDS."""
        started = time.monotonic()
        await asyncio.gather(*(asyncio.wait_for(w.reached.wait(), CATCH_UP_SECONDS) for w in live_watchers),
                             return_exceptions=True)
        book = {"produced": 0, "delivered": 0, "gap_bytes": 0, "gap_frames": 0, "silent": 0, "behind": 0,
                "catch_up_s": time.monotonic() - started}
        for watcher in live_watchers:
            start, counts_then = starts.get(watcher.terminal, (0, None))
            now = watcher.at_cut or watcher.counts
            then = counts_then or type(now)()
            book["produced"] += watcher.cut - start
            book["delivered"] += now.received - then.received
            book["gap_bytes"] += now.gap_bytes - then.gap_bytes
            book["gap_frames"] += now.gap_frames - then.gap_frames
            book["silent"] += now.silent - then.silent
            if watcher.at_cut is None:
                book["behind"] += watcher.cut - watcher.next
        # The instrument's own check: each byte up to the cut is delivered, announced or skipped, so this is 0.
        book["unaccounted"] = (book["produced"] - book["delivered"] - book["gap_bytes"] - book["silent"]
                               - book["behind"])
        return book

    async def failover(self) -> dict:
        """SIGKILL one host (its worker and every shell of it): how long until its terminals are `lost` and its
        clients closed (with which codes), and the other hosts' echo meanwhile."""
        victim = self.host_of.get(self.typists[0].terminal) if self.typists else None
        victim = victim or next(iter(self.deployment.hosts))
        doomed = {terminal for terminal, host in self.host_of.items() if host == victim and terminal in self.terminals}
        clients = [c for c in [*self.watchers, *self.typists] if c.terminal in doomed]
        others = [typist for typist in self.typists if typist.terminal not in doomed]
        until = time.monotonic() + 90
        typing = [asyncio.ensure_future(typist.type_until(until, TYPING_PAUSE)) for typist in self.typists]
        await asyncio.sleep(1.0)
        killed = time.monotonic()
        await asyncio.to_thread(self.deployment.hosts[victim].stop)
        self.lost_host = victim
        log(f"failover: SIGKILLed {victim} ({len(doomed)} terminals, {len(clients)} clients)")
        lost_after = await self._until_lost(doomed, killed, timeout=60)
        told_deadline = time.monotonic() + 15
        while any(client.closed is None for client in clients) and time.monotonic() < told_deadline:
            await asyncio.sleep(0.1)
        await asyncio.sleep(1.0)
        until_stop = time.monotonic()
        for typist in self.typists:
            typist.stop_at = until_stop
        results = await asyncio.gather(*typing)
        during = [seconds for typist, samples in zip(self.typists, results, strict=True) if typist in others
                  for when, seconds in samples if killed <= when <= until_stop]
        told = [client.closed[1] - killed for client in clients if client.closed is not None]
        return {
            "host": victim,
            "terminals": len(doomed),
            "clients": len(clients),
            "lost_s": lost_after,
            "told_s": max(told) if len(told) == len(clients) and told else math.nan,
            "untold": len(clients) - len(told),
            "codes": sorted({client.closed[0] for client in clients if client.closed is not None}, key=str),
            "others_echo_p50": percentile(ms(during), 0.5),
            "others_echo_p99": percentile(ms(during), 0.99),
            "others_echo_count": len(during),
        }

    async def replace_lost_host(self) -> None:
        """After the failover: the killed host's terminals leave the fleet, and the host starts again, empty."""
        victim = self.lost_host
        gone = {terminal for terminal, host in self.host_of.items() if host == victim}
        self.idle = [terminal for terminal in self.idle if terminal not in gone]
        self.watchers = [watcher for watcher in self.watchers if watcher.terminal not in gone]
        self.typists = [typist for typist in self.typists if typist.terminal not in gone]
        await asyncio.to_thread(self.deployment.restart_host, victim)
        self.workers = await asyncio.to_thread(hosts.wait_for_workers, self.deployment.endpoints[0], HOSTS)
        await self._locate()

    async def _until_lost(self, doomed: set[str], killed: float, timeout: float) -> float:
        deadline = killed + timeout
        while time.monotonic() < deadline:
            try:
                listed = await self.rests[-1].call("GET", "/api/terminals", params={"status": "all"})
                status = {t["terminalId"]: t["status"] for t in listed["terminals"]}
                if all(status.get(terminal) == "lost" for terminal in doomed):
                    return time.monotonic() - killed
            except Exception as error:  # noqa: BLE001 - a web process may answer 503 meanwhile; ask again
                log(f"failover: listing failed: {error!r}")
            await asyncio.sleep(0.25)
        return math.nan


def _per_unit(amounts: dict, idle: dict | None, count: float) -> dict:
    """amounts less the idle cost of as long, divided by count: CPU in ms, the rest as counted."""
    per = {}
    for key, value in amounts.items():
        if key in ("seconds", "count"):
            continue
        if idle is not None and key in idle:
            value -= idle[key] * amounts["seconds"] / idle["seconds"]
        per[key] = (value * (1000 if key.startswith("cpu:") else 1)) / count if count else math.nan
    return per


def _unit_text(per: dict) -> str:
    cpu = ", ".join(f"{key[4:]} {value:.2f}" for key, value in per.items()
                    if key.startswith("cpu:") and key != "cpu:bench client")
    parts = [f"CPU ms: {cpu}"]
    if "redis" in per:
        parts.append(f"Redis commands {per['redis']:.1f}")
    if "pg_xacts" in per:
        parts.append(f"PostgreSQL transactions {per['pg_xacts']:.2f}, rows written {per['pg_rows']:.2f} "
                     f"(audit rows {per['audit_rows']:.2f})")
    return "; ".join(parts)


def _copy(counts):
    return type(counts)(**vars(counts))


def _count_by_host(host_of: dict[str, str], terminals: list[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for terminal in terminals:
        host = host_of.get(terminal, "embedded")
        counts[host] = counts.get(host, 0) + 1
    return counts


def _broken(outcome: dict) -> list[str]:
    broken = []
    if outcome["silent"]:
        broken.append(f"{outcome['silent']} bytes lost without a gap frame")
    if outcome["unaccounted"]:
        broken.append(f"the watchers' books are off by {outcome['unaccounted']} bytes (a fault of the benchmark)")
    if not outcome["echo_p99"] <= ECHO_P99_MS:
        broken.append(f"echo p99 {outcome['echo_p99']:.0f} ms > {ECHO_P99_MS:g}")
    if not outcome["poll_p99"] <= POLL_P99_MS:
        broken.append(f"poll p99 {outcome['poll_p99']:.0f} ms > {POLL_P99_MS:g}")
    if outcome["produced"] and outcome["delivered"] < DELIVERED_SHARE * outcome["produced"]:
        broken.append(f"delivered {100 * outcome['delivered'] / outcome['produced']:.1f}% of the output")
    if outcome["poll_errors"] or outcome["create_errors"]:
        broken.append(f"{outcome['poll_errors']} polls and {outcome['create_errors']} creations failed "
                      f"({'; '.join(outcome['errors'])[:160]})")
    if outcome["behind"]:
        broken.append(f"watchers {outcome['behind']} bytes behind after {CATCH_UP_SECONDS:g} s")
    return broken


def _summary(outcome: dict) -> str:
    if "echo_p99" not in outcome:
        return "; ".join(outcome["broken"])
    return (f"echo p50/p99 {outcome['echo_p50']:.1f}/{outcome['echo_p99']:.1f} ms, poll p50/p99 "
            f"{outcome['poll_p50']:.1f}/{outcome['poll_p99']:.1f} ms, {outcome['creations_per_s']:.1f} creations/s, "
            f"{outcome['delivered'] / outcome['seconds'] / 1e3:.0f} of {outcome['produced'] / outcome['seconds'] / 1e3:.0f}"
            f" KB/s delivered, gaps {outcome['gap_frames']} ({outcome['gap_bytes']} B), silent {outcome['silent']} B, "
            f"unaccounted {outcome['unaccounted']} B; {_costs(outcome)}")


def _costs(outcome: dict) -> str:
    parts = [f"{kind} {cost['cpu']:.0f}% {cost['rss_mb']:.0f} MB" for kind, cost in outcome["processes"].items()]
    parts.append(f"other processes {outcome['others_cpu']:.0f}%")
    if "redis_ops" in outcome:
        parts.append(f"Redis {outcome['redis_ops']:.0f} ops/s {outcome['redis_mb']:.1f} MB")
    if "pg_tps" in outcome:
        parts.append(f"PostgreSQL {outcome['pg_tps']:.0f} xact/s {outcome['pg_writes']:.0f} rows written/s")
    return ", ".join(parts)


# --- terminado: the WebSocket part of the same load ---------------------------------------------------------------


async def _terminado(ramp: list[Step], reached: int) -> dict:
    """Printing terminals with a watcher each and TYPISTS typists, step by step (terminado has no REST, no
    creation endpoint apart from a socket, and announces no loss)."""
    async with terminado_server.running() as peer:
        watchers, tasks, sockets, measured = [], [], [], {"steps": []}
        try:
            for _ in range(TYPISTS):
                socket = await live.TerminadoSocket.open(peer.unique_url())
                await live.start_cat(socket)
                sockets.append(socket)
            deadline = time.monotonic() + RAMP_SECONDS["terminado"] * max(1.0, scale())
            for number, step in enumerate(ramp, 1):
                if time.monotonic() > deadline or number > reached:
                    break
                for index in range(len(watchers), step.printers):
                    socket = await live.TerminadoSocket.open(peer.named_url(f"print{index}"))
                    await live.wait_for_prompt(socket)
                    await socket.send(PRINT + "\r")
                    watchers.append(TerminadoWatcher(socket))
                    tasks.append(asyncio.ensure_future(watchers[-1].run()))
                await asyncio.sleep(1.0)
                received = sum(watcher.received for watcher in watchers)
                until = time.monotonic() + window()
                typists = [Typist(socket, "") for socket in sockets]
                results = await asyncio.gather(*(typist.type_until(until, TYPING_PAUSE) for typist in typists))
                echoes = ms([seconds for samples in results for _, seconds in samples])
                outcome = {"echo_p50": percentile(echoes, 0.5), "echo_p99": percentile(echoes, 0.99),
                           "delivered_per_s": (sum(w.received for w in watchers) - received) / window(),
                           "echo_samples": echoes}
                measured["steps"].append(outcome)
                log(f"terminado step {number} ({step.printers} printing): echo p50/p99 {outcome['echo_p50']:.1f}/"
                    f"{outcome['echo_p99']:.1f} ms, {outcome['delivered_per_s'] / 1e3:.0f} KB/s delivered")
            measured["samples"] = measured["steps"][-1]["echo_samples"]
            return measured
        finally:
            for socket in [*sockets, *(watcher.socket for watcher in watchers)]:
                await asyncio.gather(socket.close(), return_exceptions=True)
            for task in tasks:
                task.cancel()


# --- the table ----------------------------------------------------------------------------------------------------


STEP_ROWS = (
    # key, label, target, terminado's key
    ("echo_p50", "echo p50, ms", Target.note("reported"), "echo_p50"),
    ("echo_p99", "echo p99, ms", Target.at_most(ECHO_P99_MS, f"≤ {ECHO_P99_MS:g} ms"), "echo_p99"),
    ("poll_p50", "tail poll p50 (open loop), ms", Target.note("reported"), None),
    ("poll_p99", "tail poll p99 (open loop), ms", Target.at_most(POLL_P99_MS, f"≤ {POLL_P99_MS:g} ms"), None),
    ("creations_per_s", "creations/s done", Target.note("reported"), None),
    ("create_p99", "creation p99, ms", Target.note("reported"), None),
    ("produced_kbs", "output produced by the printing terminals, KB/s", Target.note("reported"), None),
    ("delivered_kbs", "output delivered to their watchers, KB/s", Target.note("reported"), "delivered_kbs"),
    ("gap_bytes", "bytes announced by gap frames (frames)", Target.note("reported"), None),
    ("late", f"a client attaching from byte 0 to a terminal keeping {LATE_LIMIT // 1024} KiB: bytes received + "
     "announced by gap frames, of the total", Target.note("all of it"), None),
    ("silent", "bytes lost without a gap frame (watchers and that client)", Target.at_most(0, "none"), None),
    ("behind", f"bytes neither delivered nor announced {CATCH_UP_SECONDS:g} s after the window", Target.note(
        "reported (lag, not loss)"), None),
    ("cpu_total", "CPU of the service's processes (web, workers, Redis, PostgreSQL), % of a core",
     Target.note("reported"), None),
    ("cpu_kinds", "CPU by process kind, % of a core", Target.note("reported"), None),
    ("others_cpu", "CPU of other processes on the machine (not the service, its shells or the benchmark), % of a "
     "core", Target.note("context: a busy machine shows here"), None),
    ("rss_kinds", "memory (PSS) by process kind, MB", Target.note("reported"), None),
    ("stores", "Redis commands/s, memory; PostgreSQL transactions/s, rows written/s (audit rows), connections",
     Target.note("reported"),
     None),
)


def _rows(result: FigureResult, ramp: list[Step], ours: dict, peer: object) -> None:
    for number, step in enumerate(ramp, 1):
        cells = {mode: _step_cells(measured, number) for mode, measured in ours.items()}
        reference = _step_cells(peer, number, terminado=True)
        for key, label, target, peer_key in STEP_ROWS:
            values = {mode: (c if isinstance(c, Failure) else c.get(key)) for mode, c in cells.items()}
            if all(value is None for value in values.values()):
                continue
            ref = reference.get(peer_key) if peer_key and isinstance(reference, dict) else None
            result.row(f"step {number}: {label}", values=values, reference=ref,
                       reference_name="terminado" if ref is not None else "", target=target)
    split = ours.get("split") if isinstance(ours.get("split"), dict) else {}
    _failover_rows(result, split.get("failover"))
    units = split.get("units")
    for name, per in (units.items() if isinstance(units, dict) else ()):
        cpu = " / ".join(f"{per.get(f'cpu:{kind}', math.nan):.2f}" for kind in ("web", "worker", "redis", "postgres"))
        stores = " / ".join(f"{per.get(key, math.nan):.2f}" for key in ("redis", "pg_xacts", "pg_rows", "audit_rows"))
        result.row(f"unit cost of one {name} (split, alone): CPU ms of web / worker / Redis / PostgreSQL",
                   values={"split": cpu}, target=Target.note("for docs/capacity.md"))
        result.row(f"unit cost of one {name} (split, alone): Redis commands / PostgreSQL transactions / rows written / "
                   "audit rows",
                   values={"split": stores}, target=Target.note("for docs/capacity.md"))
    for mode, measured in ours.items():
        if isinstance(measured, dict) and measured.get("samples"):
            result.add_samples(PANEL, f"ours ({mode})", measured["samples"])
    if isinstance(peer, dict) and peer.get("samples"):
        result.add_samples(PANEL, "terminado", peer["samples"])
    result.notes.append(_notes(ramp, ours, peer))


def _step_cells(measured: object, number: int, terminado: bool = False) -> dict | Failure | None:
    if isinstance(measured, Failure):
        return measured
    if not isinstance(measured, dict) or len(measured["steps"]) < number:
        return {} if terminado else Failure("not reached: the ramp stopped before") if measured else None
    outcome = measured["steps"][number - 1]
    if terminado:
        return {**outcome, "delivered_kbs": outcome["delivered_per_s"] / 1e3}
    if "echo_p99" not in outcome:
        return Failure("; ".join(outcome["broken"])[:160])
    seconds = outcome["seconds"]
    service_kinds = ("web", "worker", "redis", "postgres", "web+worker")
    return {
        **outcome,
        "produced_kbs": outcome["produced"] / seconds / 1e3,
        "delivered_kbs": outcome["delivered"] / seconds / 1e3,
        "gap_bytes": f"{outcome['gap_bytes']:,} ({outcome['gap_frames']})",
        "behind": outcome["behind"],
        "late": (f"{outcome['late_received']:,} + {outcome['late_gap_bytes']:,} of {outcome['late_total']:,}"
                 if "late_total" in outcome else None),
        "cpu_total": sum(cost["cpu"] for kind, cost in outcome["processes"].items() if kind in service_kinds),
        "cpu_kinds": ", ".join(f"{kind} {cost['cpu']:.0f}" for kind, cost in outcome["processes"].items()),
        "rss_kinds": ", ".join(f"{kind} {cost['rss_mb']:.0f}" for kind, cost in outcome["processes"].items()),
        "stores": _stores(outcome),
    }


def _stores(outcome: dict) -> str | None:
    parts = []
    if "redis_ops" in outcome:
        parts.append(f"Redis {outcome['redis_ops']:,.0f}/s, {outcome['redis_mb']:.1f} MB")
    if "pg_tps" in outcome:
        parts.append(f"PostgreSQL {outcome['pg_tps']:,.0f}/s, {outcome['pg_writes']:,.0f} rows/s "
                     f"({outcome['audit_rows']:,.0f} audit), {outcome['pg_connections']} connections")
    return "; ".join(parts) or None


def _failover_rows(result: FigureResult, failover: object) -> None:
    if failover is None:
        return
    cells = lambda key: {"split": failover if isinstance(failover, Failure) else failover.get(key)}  # noqa: E731
    result.row("failover: SIGKILL of one host: until its terminals are `lost`, s", values=cells("lost_s"),
               target=Target.note("3 heartbeats (15 s by default) and the next check"))
    result.row("failover: until every client of that host is closed, s", values=cells("told_s"),
               target=Target.note("reported"))
    if isinstance(failover, dict):
        result.row("failover: clients of that host never told (of "
                   f"{failover['clients']}; close codes {', '.join(map(str, failover['codes'])) or 'none'})",
                   values=cells("untold"), target=Target.at_most(0, "none"))
    result.row("failover: the other hosts' echo p99 meanwhile, ms", values=cells("others_echo_p99"),
               target=Target.at_most(ECHO_P99_MS, f"≤ {ECHO_P99_MS:g} ms"))


def _notes(ramp: list[Step], ours: dict, peer: object) -> str:
    lines = [
        f"Split: PostgreSQL, Redis, {HOSTS} worker hosts (each `terminal_worker` in its own UTS and PID namespace), "
        f"{WEBS} daphne processes, all on 127.0.0.1; embedded: `manage.py serve` with SQLite. Ramp steps: "
        + "; ".join(f"({n}) {step.label()}" for n, step in enumerate(ramp, 1))
        + f". Each step grows the fleet, then runs {window():g} s of load: {TYPISTS} WebSocket clients typing into "
        f"`cat` (a key every {TYPING_PAUSE * 1000:g} ms, on different hosts where the shared creation queue put "
        "them), each printing terminal watched by one `mode=view` WebSocket client, the pollers reading "
        f"`output?mode=tail&tailLines=50` of random terminals every {POLL_PERIOD:g} s (open loop, latency from the "
        "due time) through both web processes, and creations at the step's rate (each deleted right after, "
        "untimed). Every watcher accounts for each byte between its terminal's total at the window's start and at "
        "its end: delivered as output, announced by a gap frame, or lost silently (an offset jump with no gap; "
        "and after a catch-up of up to "
        f"{CATCH_UP_SECONDS:g} s, any byte neither delivered nor announced). A step breaks when echo p99 > "
        f"{ECHO_P99_MS:g} ms, poll p99 > {POLL_P99_MS:g} ms, less than {DELIVERED_SHARE:.0%} of the output is "
        "delivered, a request fails or a byte is lost silently; the ramp stops there. Terminado: the WebSocket part "
        "only (the printing terminals, each with a watcher, and the typists)."
    ]
    for mode, measured in ours.items():
        if isinstance(measured, dict):
            for number, outcome in enumerate(measured["steps"], 1):
                if "processes" in outcome:
                    hosts_text = ", ".join(f"{h} {c}" for h, c in sorted(outcome["hosts"].items()))
                    lines.append(f"{mode} step {number} costs: {_costs(outcome)}; terminals by host: {hosts_text}; "
                                 f"grown in {outcome['setup_s']:.1f} s.")
                if outcome.get("broken"):
                    lines.append(f"{mode} step {number} broke: {'; '.join(outcome['broken'])}.")
    return " ".join(lines)
