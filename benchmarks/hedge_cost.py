"""Benchmark: what async hedging costs the median under concurrency, on healthy domains (issue 27).

Issue 27 asks that async hedging with 20 concurrent tasks keep p50 within 10 % of the same
run without hedging, with the servers in another process. Set-up: per variant, an
``httpx.AsyncClient`` over ``AsyncFailoverTransport`` on a pool of two loopback domains,
the two ports of a fast server process of its own (``benchmarks._server``: every answer
at once, keep-alive, a request counter), so each variant's requests are counted apart.
Nothing is slow: every hedge sent here is a cost, never a rescue.

Variants (the first is the baseline of every ratio):

- ``Policy()``: no hedging;
- ``Hedging()``: the default, adaptive: a request hedges once it has waited the primary's
  observed p95 latency (over its last 256 answers), at most 5 % of the pool's requests
  (the throttle); under load the latency it learns is the client's own queueing;
- ``Hedging(delay=...)``: a fixed delay (10 ms by default), about a loaded client's p50 here,
  so the throttle is what bounds its hedges (a request it refuses asks again every delay
  while it waits);
- ``Hedging(delay=1.0)``: configured, never due: the cost of the race's machinery alone (a
  loop timer armed and cancelled per request);
- a bare ``httpx.AsyncClient`` (reference, not paired against the target).

Each round runs every variant once, in a rotated order (every other round reversed): ``tasks``
tasks send ``per_round`` GETs back to back (a closed loop: a task sends its next request when
its last one answered). The server answers at once, so the client's one core is the
bottleneck: a request's latency is mostly its wait for the event loop, the p50 ratio follows
the ratio of CPU per request, and a hedge delay that elapses measures the client's own wait.
That is hedging's worst case. A request's latency is timed around ``client.get``. A round's figure
is the p50 of its requests; the headline is the **paired ratio**, the median over rounds of
(variant's p50 / no hedging's p50 in the same round), with its p25 - p75 across rounds; p50,
p90 and p99 are over every timed request of the variant. CPU per request is this process's
CPU time over the round, divided by its requests. *Extra requests* is what the variant's server
received beyond one per logical request (a lower bound: a cut attempt's request may be lost
with its connection); the client's own view (``extensions["failover"]``)
is beside it: hedges sent, and requests a hedge answered. *Connections* are those that carried
a request, as the server counts them: a client kept alive needs one per task; each cut attempt
(a hedge's loser) closes one, and a later request opens another.

Run: ``python -m benchmarks hedge_cost`` (about a minute) or ``python -m benchmarks.hedge_cost
--quick`` (a few seconds, for a smoke test).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import httpx

from benchmarks import _drive
from benchmarks import _harness as h
from benchmarks._options import Options
from benchmarks.tail import cli, percentile, quiet_logs

NAME = "hedge_cost"
PATH = "/v1/ping"
LIMITS = httpx.Limits(max_connections=100, max_keepalive_connections=100, keepalive_expiry=600.0)
"""The same for every variant: a connection per task and its hedge, kept alive while the other
variants take their turns (so a new connection is one a cut attempt's closing made necessary)."""

BASELINE = "no hedging: Policy()"
ADAPTIVE = "adaptive: Hedging()"
NEVER_DUE = "never due: Hedging(delay=1.0)"
REFERENCE = "reference: bare httpx.AsyncClient"


@dataclass(frozen=True, slots=True, kw_only=True)
class Sizes:
    tasks: int = 20
    per_round: int = 200  # requests of one variant in one round, over the tasks
    rounds: int = 40
    warmup: int = 1  # untimed rounds first (they also fill the adaptive delay's window)
    fixed_delay: float = 0.010
    max_seconds: float = 120.0

    def __post_init__(self) -> None:
        if self.tasks < 1 or self.per_round < self.tasks or self.rounds < 1 or self.warmup < 0:
            raise ValueError(f"Sizes: need 1 <= tasks <= per_round and rounds >= 1, warmup >= 0; got {self}")
        if not self.fixed_delay > 0 or not self.max_seconds > 0:
            raise ValueError(f"Sizes: fixed_delay and max_seconds must be positive; got {self}")


FULL = Sizes()
QUICK = Sizes(per_round=100, rounds=4, max_seconds=20.0)


def fixed_label(sizes: Sizes) -> str:
    return f"fixed: Hedging(delay={sizes.fixed_delay:g})"


def policies(sizes: Sizes) -> dict[str, Any]:
    """Each variant's ``Policy`` (None: the bare client), the baseline first."""
    from pytest_failover import Hedging, Policy

    return {
        BASELINE: Policy(),
        ADAPTIVE: Policy(hedging=Hedging()),
        fixed_label(sizes): Policy(hedging=Hedging(delay=sizes.fixed_delay)),
        NEVER_DUE: Policy(hedging=Hedging(delay=1.0)),
        REFERENCE: None,
    }


@dataclass
class Variant:
    """One variant's client, its server, and what its timed requests did."""

    label: str
    client: httpx.AsyncClient
    server: h.Server
    url: str
    latencies: list[float] = field(default_factory=list)
    round_p50: list[float] = field(default_factory=list)
    round_cpu: list[float] = field(default_factory=list)  # CPU seconds per request, per round
    requests: int = 0  # logical requests sent, timed or not
    errors: int = 0
    hedges: int = 0  # hedge attempts (extensions["failover"])
    sent: int = 0  # attempts handed to the network (an upper bound of what the server can count)
    by_hedge: int = 0  # requests a hedge answered

    async def get(self, latencies: list[float]) -> bool:
        """One GET, its latency appended to ``latencies``; whether it was answered 200."""
        self.requests += 1
        t0 = time.perf_counter()
        try:
            response = await self.client.get(self.url)
        except httpx.HTTPError:
            self.errors += 1
            return False
        latencies.append(time.perf_counter() - t0)
        result = response.extensions.get("failover")
        if result is None:  # the bare client: one attempt
            self.sent += 1
        else:
            for attempt in result.attempts:
                self.sent += attempt.sent
                self.hedges += attempt.hedge
                self.by_hedge += attempt.hedge and attempt.race == "won"
        if response.status_code != 200:
            self.errors += 1
            return False
        return True

    async def round(self, sizes: Sizes, deadline: float) -> list[float]:
        """``per_round`` GETs over ``tasks`` tasks; their latencies."""
        latencies: list[float] = []

        async def op(_: int) -> bool:
            return await self.get(latencies)

        await _drive.burst(op, count=sizes.per_round, concurrency=sizes.tasks,
                           max_seconds=max(1.0, deadline - time.monotonic()))
        return latencies


def client(server: h.Server, policy: Any) -> httpx.AsyncClient:
    import pytest_failover as pf

    inner = httpx.AsyncHTTPTransport(limits=LIMITS)
    if policy is None:
        return httpx.AsyncClient(transport=inner)
    pool = pf.Pool("bench", [server.url(0), server.url(1)])
    return httpx.AsyncClient(transport=pf.AsyncFailoverTransport([pool], policy, transport=inner))


async def rounds(variants: Sequence[Variant], sizes: Sizes) -> int:
    """Warm-up rounds, then the timed ones, until ``rounds`` or the time bound (never fewer
    than one timed round); how many timed rounds ran."""
    start = time.monotonic()
    deadline = start + sizes.max_seconds
    for _ in range(sizes.warmup):
        for variant in variants:
            await variant.round(sizes, deadline)
    done = 0
    for order in h.rotations(variants, sizes.rounds):
        for variant in order:
            c0 = time.process_time()
            latencies = await variant.round(sizes, deadline)
            variant.round_cpu.append((time.process_time() - c0) / max(1, len(latencies)))
            variant.round_p50.append(statistics.median(latencies) if latencies else math.nan)
            variant.latencies += latencies
        done += 1
        if time.monotonic() > deadline:
            break
    for variant in variants:
        await variant.client.aclose()
    return done


def measure(sizes: Sizes) -> h.Report:
    """Run every variant in interleaved rounds; the report's table is the figures."""
    quiet_logs()
    report = h.Report(NAME)
    started = time.monotonic()
    chosen = policies(sizes)
    with contextlib.ExitStack() as stack:
        servers = {label: stack.enter_context(h.server(2, max_seconds=sizes.max_seconds + 120)) for label in chosen}

        async def main() -> tuple[list[Variant], int]:
            variants = [Variant(label, client(servers[label], policy), servers[label], servers[label].url(0) + PATH) for label, policy in chosen.items()]
            return variants, await rounds(variants, sizes)

        variants, timed = asyncio.run(main())
        received = {v.label: v.server.counts() for v in variants}
    report.data = figures(variants, received, timed)
    report.data["sizes"] = {k: getattr(sizes, k) for k in sizes.__dataclass_fields__}
    report.tables.append(table(report.data, sizes, timed))
    report.seconds = time.monotonic() - started
    return report


def figures(variants: Sequence[Variant], received: dict[str, dict[str, int]], timed: int) -> dict[str, Any]:
    """Each variant's figures (the raw per-round samples included)."""
    base = variants[0]
    data: dict[str, Any] = {"rounds": timed}
    for v in variants:
        ordered = sorted(v.latencies)
        ratio = h.paired_ratios(v.round_p50, base.round_p50)
        cpu = h.paired_ratios(v.round_cpu, base.round_cpu)
        data[v.label] = {
            "timed": len(ordered), "requests": v.requests, "errors": v.errors,
            "p50": percentile(ordered, 0.50), "p90": percentile(ordered, 0.90), "p99": percentile(ordered, 0.99),
            # "wall_paired_ratio": the key `python -m benchmarks --processes N` gathers across runs
            "wall_paired_ratio": ratio.median, "wall_paired_p25": ratio.p25, "wall_paired_p75": ratio.p75,
            "cpu_per_request": statistics.median(v.round_cpu) if v.round_cpu else math.nan,
            "cpu_paired_ratio": cpu.median, "cpu_paired_p25": cpu.p25, "cpu_paired_p75": cpu.p75,
            "received": received[v.label]["count"], "extra": received[v.label]["count"] - v.requests,
            "connections": received[v.label]["connections"],
            "hedges": v.hedges, "sent": v.sent, "by_hedge": v.by_hedge,
            "round_p50_s": v.round_p50, "round_cpu_s": v.round_cpu,
        }
    return data


def table(data: dict[str, Any], sizes: Sizes, timed: int) -> h.Table:
    labels = [k for k, v in data.items() if isinstance(v, dict) and "p50" in v]
    t = h.Table(
        f"Async hedging under load: {sizes.tasks} concurrent tasks, healthy loopback domains "
        f"(server in another process), {timed} rounds of {sizes.per_round} GETs per variant",
        ["variant", "p50", "p90", "p99", "**p50 vs no hedging** (paired: median, p25 - p75)",
         "CPU per request (paired ratio, p25 - p75)", "hedges sent (client)", "extra requests (server-counted)",
         "answered by a hedge", "connections (server-counted)"],
    )
    for label in labels:
        f = data[label]
        t.rows.append([
            label + (f" ({f['errors']} errors)" if f["errors"] else ""),
            h.ms(f["p50"]), h.ms(f["p90"]), h.ms(f["p99"]),
            "1x" if label == labels[0] else f"**{f['wall_paired_ratio']:.3f}x** ({f['wall_paired_p25']:.2f} - {f['wall_paired_p75']:.2f})",
            f"{h.us(f['cpu_per_request'])} ({f['cpu_paired_ratio']:.3f}x, {f['cpu_paired_p25']:.2f} - {f['cpu_paired_p75']:.2f})",
            f"{f['hedges']:,} ({f['hedges'] / max(1, f['requests']):.2%})",
            f"{f['extra']:,} ({f['extra'] / max(1, f['requests']):.2%})",
            f"{f['by_hedge']:,}",
            f"{f['connections']:,}",
        ])
    for label in labels[1:]:
        if label == REFERENCE:
            continue
        f = data[label]
        met = f["wall_paired_ratio"] <= 1.10
        t.notes.append(
            f"{label}: p50 {f['wall_paired_ratio']:.3f}x no hedging's (target <= 1.10x, issue 27): "
            f"**{'met' if met else 'not met'}**; {f['extra'] / max(1, f['requests']):.2%} extra requests "
            "on a healthy pool (every one a cost)."
        )
    t.notes.append(
        "Hedges sent and answered by a hedge: the client's `extensions[\"failover\"]` attempts; extra requests: "
        "the variant's own server's count beyond one per logical request (a hedge cut before its bytes left "
        "is not counted there). Warm-up requests are in both counts, not in the latencies."
    )
    return t


def run(opts: Options) -> h.Report:
    sizes = replace(FULL, rounds=opts.rounds_or(FULL.rounds, 200), max_seconds=opts.seconds_or(120.0, 600.0))
    return measure(sizes)


def main(argv: list[str] | None = None) -> int:
    return cli(NAME, __doc__ or NAME, argv, lambda args: measure(QUICK if args.quick else FULL))


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
