"""Benchmark: a primary that answers every request in 2 s, with and without slow-call ejection (issue #11).

Set-up: per variant, a primary whose every answer is held 2 s (``faults.latency(2.0)``) and
a healthy backup, fake domains of the outage simulator on loopback, served from a process
of their own (``benchmarks._simulated``); the default ``Policy()`` attempt timeout (10 s)
never fires, so without ``SlowCalls`` nothing ever counts as a failure.

Variants:

- ``Policy()``, no ``SlowCalls``: ``baseline`` requests over ``concurrency`` tasks (kept
  short on purpose: every one of them takes 2 s);
- ``Policy(slow_calls=SlowCalls(threshold=0.5))``, sync ``httpx.Client``, sequential;
- the same, async, over ``concurrency`` tasks.

Reported per variant: the requests the primary received (server-counted), the requests
sent before the first answer from the backup (in the order they were started), the mean
latency of every request started after that one, and how many of those still went to the
primary. Each variant stops ``after`` requests after the move (or at ``limit`` requests if
traffic never moves).

Run: ``python -m benchmarks slow_primary`` (about a minute) or
``python -m benchmarks.slow_primary --quick`` (every time divided by 10, for a smoke test).
"""

from __future__ import annotations

import asyncio
import math
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import httpx

from benchmarks import _drive
from benchmarks import _harness as h
from benchmarks._options import Options
from benchmarks._simulated import Simulated, simulated
from benchmarks.tail import PATH, answered_by, async_client, cli, quiet_logs, sync_client

NAME = "slow_primary"


@dataclass(frozen=True, slots=True, kw_only=True)
class Sizes:
    primary_seconds: float = 2.0
    threshold: float = 0.5
    baseline: int = 20
    limit: int = 40
    after: int = 200
    concurrency: int = 10
    max_seconds: float = 300.0

    @property
    def label(self) -> str:
        return f"SlowCalls(threshold={self.threshold:g})"


FULL = Sizes()
QUICK = Sizes(primary_seconds=0.2, threshold=0.05, baseline=10, limit=30, after=20, concurrency=5,
              max_seconds=60.0)


@dataclass
class Sent:
    """One request: when it started (s, from the variant's start), how long it took, who answered."""

    start: float
    latency: float
    on_backup: bool
    ok: bool


@dataclass
class Run:
    sent: list[Sent] = field(default_factory=list)
    primary_requests: int = 0

    def figures(self) -> dict[str, Any]:
        ordered = sorted(self.sent, key=lambda s: s.start)
        moved = next((i for i, s in enumerate(ordered) if s.on_backup), None)
        after = ordered[moved:] if moved is not None else []
        before = ordered[:moved] if moved is not None else ordered
        return {
            "requests": len(ordered),
            "errors": sum(not s.ok for s in ordered),
            "primary_requests": self.primary_requests,
            "before_move": moved,
            "mean_before_s": statistics.fmean(s.latency for s in before) if before else math.nan,
            "moved_after_s": ordered[moved].start if moved is not None else None,
            "after": len(after),
            "mean_after_s": statistics.fmean(s.latency for s in after) if after else math.nan,
            "after_on_primary": sum(not s.on_backup for s in after),
            "mean_all_s": statistics.fmean(s.latency for s in ordered) if ordered else math.nan,
        }


def _record(run: Run, t0: float, start: float, response: httpx.Response | None, backup: str) -> None:
    result = response.extensions.get("failover") if response is not None else None
    run.sent.append(Sent(start - t0, time.perf_counter() - start,
                         result is not None and answered_by(result) == backup,
                         response is not None and response.status_code == 200))


def _enough(run: Run, sizes: Sizes, deadline: float, baseline: bool) -> bool:
    """Whether a variant has sent all it should (bounded in count and in time)."""
    if time.monotonic() > deadline:
        return True
    if baseline:
        return len(run.sent) >= sizes.baseline
    moved = sum(s.on_backup for s in run.sent)
    return moved >= sizes.after or len(run.sent) - moved >= sizes.limit


def sequential_sync(sim: Simulated, primary: str, backup: str, policy: Any, sizes: Sizes,
                    deadline: float) -> Run:
    run = Run()
    with sync_client(sim, primary, backup, policy) as client:
        t0 = time.perf_counter()
        while not _enough(run, sizes, deadline, baseline=False):
            start = time.perf_counter()
            try:
                response: httpx.Response | None = client.get(sim.url(primary) + PATH)
            except httpx.HTTPError:
                response = None
            _record(run, t0, start, response, sim.url(backup))
    return run


async def concurrent_async(sim: Simulated, primary: str, backup: str, policy: Any, sizes: Sizes,
                           deadline: float, *, baseline: bool) -> Run:
    run = Run()
    async with async_client(sim, primary, backup, policy) as client:
        t0 = time.perf_counter()

        async def op(_: int) -> bool:
            if _enough(run, sizes, deadline, baseline):
                return False
            start = time.perf_counter()
            try:
                response: httpx.Response | None = await client.get(sim.url(primary) + PATH)
            except httpx.HTTPError:
                response = None
            _record(run, t0, start, response, sim.url(backup))
            return True

        count = sizes.baseline if baseline else sizes.limit + sizes.after
        await _drive.burst(op, count=count, concurrency=sizes.concurrency,
                           max_seconds=max(1.0, deadline - time.monotonic()))
    return run


def _s(seconds: float | None) -> str:
    if seconds is None or math.isnan(seconds):
        return "-"
    return f"{seconds * 1e3:,.1f} ms" if seconds < 1 else f"{seconds:,.2f} s"


def measure(sizes: Sizes) -> h.Report:
    from pytest_failover import Policy, SlowCalls

    quiet_logs()
    report = h.Report(NAME)
    started = time.monotonic()
    deadline = started + sizes.max_seconds
    slow = Policy(slow_calls=SlowCalls(threshold=sizes.threshold))
    labels = {
        "none": f"Policy(), no SlowCalls: async, {sizes.baseline} requests over {sizes.concurrency} tasks",
        "sync": f"Policy(slow_calls={sizes.label}): sync httpx.Client, sequential",
        "async": f"Policy(slow_calls={sizes.label}): async, {sizes.concurrency} tasks",
    }
    runners: dict[str, Callable[[Simulated, str, str], Run]] = {
        "none": lambda sim, p, b: asyncio.run(
            concurrent_async(sim, p, b, Policy(), sizes, deadline, baseline=True)),
        "sync": lambda sim, p, b: sequential_sync(sim, p, b, slow, sizes, deadline),
        "async": lambda sim, p, b: asyncio.run(
            concurrent_async(sim, p, b, slow, sizes, deadline, baseline=False)),
    }
    hosts = [f"{role}-{key}.bench" for key in labels for role in ("primary", "backup")]
    table = h.Table(
        f"Slow primary: every answer held {sizes.primary_seconds:g} s, default attempt timeout "
        f"(10 s), healthy backup",
        ["variant", "requests", "primary received (server-counted)",
         "requests before the first backup answer", "traffic moved after", "mean latency before",
         "mean latency after the move", "after the move, still on the primary"],
    )
    with simulated(hosts, base_latency=0.0, max_seconds=sizes.max_seconds + 60) as sim:
        for key, label in labels.items():
            primary, backup = f"primary-{key}.bench", f"backup-{key}.bench"
            sim.slow(primary, share=1.0, seconds=sizes.primary_seconds, seed=0)
            print(f"... slow_primary: {label}", file=sys.stderr, flush=True)
            run = runners[key](sim, primary, backup)
            run.primary_requests = sim.counts()[primary].requests
            f = run.figures()
            report.data[label] = f
            never = f["before_move"] is None
            table.rows.append([
                label + (f" ({f['errors']} errors)" if f["errors"] else ""),
                str(f["requests"]), str(f["primary_requests"]),
                f"never (all {f['requests']})" if never else f"**{f['before_move']}**",
                "never" if never else _s(f["moved_after_s"]),
                _s(f["mean_before_s"]),
                "- (mean of all: " + _s(f["mean_all_s"]) + ")" if never else f"**{_s(f['mean_after_s'])}** ({f['after']} requests)",
                "-" if never else str(f["after_on_primary"]),
            ])
    table.notes.append(
        f"Target: with {sizes.label} (rate 0.5, minimum_calls 10, window 30 s) traffic moves to the "
        "backup within minimum_calls requests; without it, it never moves (every request takes the "
        "primary's full delay)."
    )
    table.notes.append(
        "Requests before the first backup answer are counted in the order they were started; with "
        "concurrent tasks, requests already in flight on the primary when its breaker opened count too."
    )
    report.tables.append(table)
    report.data["sizes"] = {k: getattr(sizes, k) for k in sizes.__dataclass_fields__}
    report.seconds = time.monotonic() - started
    return report


def run(opts: Options) -> h.Report:
    return measure(replace(FULL, max_seconds=opts.seconds_or(FULL.max_seconds, 600.0)))


def main(argv: list[str] | None = None) -> int:
    return cli(NAME, __doc__ or NAME, argv, lambda args: measure(QUICK if args.quick else FULL))


if __name__ == "__main__":
    raise SystemExit(main())
