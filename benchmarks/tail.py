"""Benchmark: the latency tail with and without hedged requests (issue #11, "The Tail at Scale").

Set-up: per variant, a primary and a healthy backup, fake domains of the project's outage
simulator on real loopback sockets, served from a process of their own
(``benchmarks._simulated``). A healthy answer takes what the simulator and the client
take on loopback (about 1 ms); the primary holds a seeded 1 % of its answers 1 s more
(``faults.rate(0.01, faults.latency(1.0), seed=...)``: every request draws, so the share
is 1 % in expectation; the seed is one whose first 5,000 draws hold exactly 50, and the
table reports how many were really held). Every variant has its own pair of domains with
the same seed, so each sees the same sequence of held answers at its primary (a burst
restarts the sequence).

Variants: ``Policy()`` (no hedging), ``Policy(hedging=Hedging(delay=0.010))`` (fixed delay)
and ``Policy(hedging=Hedging(percentile=0.98))`` (adaptive: the primary's observed p98).
Modes:

- async, sequential: one task sends the requests one after another; the variants take
  turns in rounds of ``chunk`` requests (rotated order), each keeping its transport, so
  noise from this shared machine hits all of them alike;
- async, ``concurrency`` concurrent tasks: each variant's requests start at ``rate`` a
  second (open loop, at most ``concurrency`` in flight: a held answer holds a task, the
  others go on), ``repeats`` times with a fresh transport; a run is sent in ``blocks``
  parts, the variants taking turns part by part (rotated order), and the figures are
  medians over repeats. (Run whole, one variant after another, the variants' p50 moved
  by up to 24 % from one 25 s run to the next with the machine.) The rate keeps the client's one core under half busy: as one
  burst of 5,000 over 50 tasks, the client itself was the tail (a bare httpx client on a
  healthy domain: p50 105 ms, p99.9 2 s, all of it queueing for the CPU), which no hedge
  can cut. At 300 a second an async httpx request took 1.7 to 2.5 ms of this machine's
  CPU, so the client was 50 to 74 % busy, and a run now and then *collapsed* for every
  variant, a bare client included (p50 115 ms: all 50 tasks busy, the open loop skipping);
  at 200 a second (40 to 56 % busy) none of 12 runs did;
- sync (``FailoverTransport`` under ``httpx.Client``), sequential, in rounds as above.

Latency is timed around ``client.get`` in the client. Requests are counted by the servers
on arrival (a cancelled hedge loser counts): *extra* is what the servers received beyond
one request per logical request.

Run: ``python -m benchmarks tail`` (about 6 minutes) or ``python -m benchmarks.tail --quick``
(500 requests and held answers of 0.1 s, for a smoke test).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import math
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx

from benchmarks import _drive
from benchmarks import _harness as h
from benchmarks._options import Options
from benchmarks._simulated import Counts, Simulated, simulated

NAME = "tail"
PATH = "/v1/tail"
LIMITS = httpx.Limits(max_connections=400, max_keepalive_connections=400)
"""The same for every variant: enough keep-alive connections for every task and its hedge."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Sizes:
    requests: int = 5000
    concurrency: int = 50
    rate: float = 200.0  # requests per second started over the concurrent tasks (see the docstring)
    chunk: int = 250
    repeats: int = 2
    blocks: int = 5  # the concurrent mode's parts per run, the variants taking turns
    slow_share: float = 0.01
    slow_seconds: float = 1.0
    fixed_delay: float = 0.010
    percentile: float = 0.98
    sync: bool = True
    seed: int = 97  # exactly 50 of its first 5,000 draws (and 5 of the first 500) are below 0.01
    max_seconds: float = 900.0


FULL = Sizes()
QUICK = Sizes(requests=500, concurrency=10, rate=250.0, chunk=100, repeats=1, blocks=2, slow_seconds=0.1, max_seconds=120.0)


# ---------------------------------------------------------------- figures


def percentile(ordered: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of sorted values (p99.9 of 5,000 is the 6th largest)."""
    if not ordered:
        return math.nan
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


@dataclass
class Run:
    """One variant's requests in one mode: client-side latencies, server-side counts."""

    latencies: list[float] = field(default_factory=list)
    on_backup: int = 0  # answered by the backup (a hedge won, or the pool moved)
    hedges: int = 0  # hedge attempts, as the client reports them (the servers' count is the figure)
    errors: int = 0
    primary: Counts = field(default_factory=lambda: Counts(0, 0))
    backup: Counts = field(default_factory=lambda: Counts(0, 0))

    def figures(self) -> dict[str, float]:
        ordered = sorted(self.latencies)
        n = len(ordered)
        sent = self.primary.requests + self.backup.requests
        return {
            "n": n,
            "p50": percentile(ordered, 0.50),
            "p99": percentile(ordered, 0.99),
            "p99.9": percentile(ordered, 0.999),
            "max": ordered[-1] if ordered else math.nan,
            "mean": statistics.fmean(ordered) if ordered else math.nan,
            "extra": sent - n,
            "extra_share": (sent - n) / n if n else math.nan,
            "held": self.primary.held,
            "on_backup": self.on_backup,
            "hedges": self.hedges,
            "errors": self.errors,
            "primary_requests": self.primary.requests,
            "backup_requests": self.backup.requests,
        }


def _delta(after: Counts, before: Counts) -> Counts:
    return Counts(after.requests - before.requests, after.held - before.held)


def _median_figures(runs: Sequence[dict[str, float]]) -> dict[str, float]:
    """Median of each figure over repeats; ``max`` is the largest of all."""
    merged = {key: statistics.median(r[key] for r in runs) for key in runs[0]}
    merged["max"] = max(r["max"] for r in runs)
    merged["repeats"] = len(runs)
    return merged


# ---------------------------------------------------------------- clients


def quiet_logs() -> None:
    """Retries and hedges log at WARNING: keep the logging cost, drop the output."""
    log = logging.getLogger("pytest_failover")
    log.addHandler(logging.NullHandler())
    log.propagate = False


@dataclass(frozen=True, slots=True)
class Variant:
    label: str
    policy: Any  # a pytest_failover.Policy; None: a bare httpx client to a healthy domain

    @property
    def reference(self) -> bool:
        return self.policy is None


REFERENCE = "reference: bare httpx client, healthy domain (no held answers)"


def variants(sizes: Sizes) -> list[Variant]:
    from pytest_failover import Hedging, Policy

    return [
        Variant("no hedging: Policy()", Policy()),
        Variant(f"fixed: Hedging(delay={sizes.fixed_delay:g})",
                Policy(hedging=Hedging(delay=sizes.fixed_delay))),
        Variant(f"adaptive: Hedging(percentile={sizes.percentile:g})",
                Policy(hedging=Hedging(percentile=sizes.percentile))),
        Variant(REFERENCE, None),
    ]


def async_client(sim: Simulated, primary: str, backup: str, policy: Any) -> httpx.AsyncClient:
    import pytest_failover as pf

    inner = httpx.AsyncHTTPTransport(limits=LIMITS)
    if policy is None:
        return httpx.AsyncClient(transport=inner)
    pool = pf.Pool("bench", [sim.url(primary), sim.url(backup)])
    return httpx.AsyncClient(transport=pf.AsyncFailoverTransport([pool], policy, transport=inner))


def sync_client(sim: Simulated, primary: str, backup: str, policy: Any) -> httpx.Client:
    import pytest_failover as pf

    inner = httpx.HTTPTransport(limits=LIMITS)
    if policy is None:
        return httpx.Client(transport=inner)
    pool = pf.Pool("bench", [sim.url(primary), sim.url(backup)])
    return httpx.Client(transport=pf.FailoverTransport([pool], policy, transport=inner))


def note(run: Run, response: httpx.Response | None, elapsed: float, backup_url: str) -> None:
    """Record one request's outcome."""
    if response is None or response.status_code != 200:
        run.errors += 1
        return
    run.latencies.append(elapsed)
    result = response.extensions.get("failover")
    if result is not None:
        run.on_backup += answered_by(result) == backup_url
        run.hedges += sum(a.hedge for a in result.attempts)


def answered_by(result: Any) -> str | None:
    """The domain whose answer the client returned: a race's winner, else the result's domain.

    (``FailoverResult.domain`` names the first attempt's domain when a hedge won, at d3f7736.)
    """
    won = [a.domain for a in result.attempts if a.race == "won"]
    return str(won[0]) if won else result.domain


async def async_get(client: httpx.AsyncClient, url: str) -> tuple[httpx.Response | None, float]:
    t0 = time.perf_counter()
    try:
        response = await client.get(url)
    except httpx.HTTPError:
        return None, time.perf_counter() - t0
    return response, time.perf_counter() - t0


def sync_get(client: httpx.Client, url: str) -> tuple[httpx.Response | None, float]:
    t0 = time.perf_counter()
    try:
        response = client.get(url)
    except httpx.HTTPError:
        return None, time.perf_counter() - t0
    return response, time.perf_counter() - t0


# ---------------------------------------------------------------- modes


@dataclass(frozen=True, slots=True)
class Pair:
    variant: Variant
    primary: str
    backup: str


def slow(sim: Simulated, host: str, sizes: Sizes) -> None:
    """Give ``host`` the seeded held answers, from the start of their sequence."""
    sim.slow(host, share=sizes.slow_share, seconds=sizes.slow_seconds, seed=sizes.seed)


def _counts_of(sim: Simulated, pair: Pair) -> tuple[Counts, Counts]:
    counts = sim.counts()
    return counts[pair.primary], counts[pair.backup]


def _finish(sim: Simulated, pairs: Sequence[Pair], runs: dict[str, Run]) -> None:
    counts = sim.counts()
    for pair in pairs:
        runs[pair.variant.label].primary = counts[pair.primary]
        runs[pair.variant.label].backup = counts[pair.backup]


def turns(pairs: Sequence[Pair], runs: dict[str, Run], sizes: Sizes, deadline: float) -> Iterator[tuple[Pair, int]]:
    """The sequential modes' schedule: (pair, requests to send now), round after round."""
    for order in h.rotations(pairs, math.ceil(sizes.requests / sizes.chunk)):
        for pair in order:
            run = runs[pair.variant.label]
            yield pair, min(sizes.chunk, sizes.requests - len(run.latencies) - run.errors)
        if time.monotonic() > deadline:
            return


def sequential_sync(sim: Simulated, pairs: Sequence[Pair], sizes: Sizes, deadline: float) -> dict[str, Run]:
    runs = {p.variant.label: Run() for p in pairs}
    clients = {p.variant.label: sync_client(sim, p.primary, p.backup, p.variant.policy) for p in pairs}
    try:
        for pair, n in turns(pairs, runs, sizes, deadline):
            url, backup = sim.url(pair.primary) + PATH, sim.url(pair.backup)
            for _ in range(n):
                note(runs[pair.variant.label], *sync_get(clients[pair.variant.label], url), backup)
    finally:
        for client in clients.values():
            client.close()
    _finish(sim, pairs, runs)
    return runs


async def sequential_async(sim: Simulated, pairs: Sequence[Pair], sizes: Sizes, deadline: float) -> dict[str, Run]:
    runs = {p.variant.label: Run() for p in pairs}
    clients = {p.variant.label: async_client(sim, p.primary, p.backup, p.variant.policy) for p in pairs}
    try:
        for pair, n in turns(pairs, runs, sizes, deadline):
            url, backup = sim.url(pair.primary) + PATH, sim.url(pair.backup)
            for _ in range(n):
                note(runs[pair.variant.label], *await async_get(clients[pair.variant.label], url), backup)
    finally:
        for client in clients.values():
            await client.aclose()
    _finish(sim, pairs, runs)
    return runs


async def concurrent_async(
    sim: Simulated, pairs: Sequence[Pair], sizes: Sizes, deadline: float
) -> dict[str, list[Run]]:
    """Each variant: ``repeats`` runs of ``requests`` started at ``rate`` a second, at most
    ``concurrency`` in flight, a fresh transport each. A run is sent in ``blocks`` parts,
    the variants taking turns part by part (rotated order), so that the machine's drift
    reaches all of them alike, as the sequential modes' rounds do."""
    runs: dict[str, list[Run]] = {p.variant.label: [] for p in pairs}
    part = math.ceil(sizes.requests / sizes.blocks)
    for _ in range(sizes.repeats):
        current = {p.variant.label: Run() for p in pairs}
        before: dict[str, tuple[Counts, Counts]] = {}
        clients: dict[str, httpx.AsyncClient] = {}
        for pair in pairs:
            if not pair.variant.reference:  # every run sees the same sequence of held answers
                slow(sim, pair.primary, sizes)
            before[pair.variant.label] = _counts_of(sim, pair)
            clients[pair.variant.label] = async_client(sim, pair.primary, pair.backup, pair.variant.policy)
        try:
            for order in h.rotations(pairs, sizes.blocks):
                for pair in order:
                    run, client = current[pair.variant.label], clients[pair.variant.label]
                    url, backup = sim.url(pair.primary) + PATH, sim.url(pair.backup)

                    async def op(_: int, client: httpx.AsyncClient = client, run: Run = run,
                                 url: str = url, backup: str = backup) -> bool:
                        note(run, *await async_get(client, url), backup)
                        return True

                    left = sizes.requests - len(run.latencies) - run.errors
                    seconds = min(min(part, left) / sizes.rate, max(1.0, deadline - time.monotonic()))
                    await _drive.steady(op, rate=sizes.rate, seconds=seconds, max_in_flight=sizes.concurrency)
        finally:
            for client in clients.values():
                await client.aclose()
        for pair in pairs:
            run, (was_primary, was_backup) = current[pair.variant.label], before[pair.variant.label]
            after = _counts_of(sim, pair)
            run.primary, run.backup = _delta(after[0], was_primary), _delta(after[1], was_backup)
            runs[pair.variant.label].append(run)
        if time.monotonic() > deadline:
            break
    return runs


# ---------------------------------------------------------------- report


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:,.1f} ms" if seconds < 10 else f"{seconds:,.1f} s"


def table(mode: str, figures: dict[str, dict[str, float]], sizes: Sizes) -> h.Table:
    labels = list(figures)
    base = figures[labels[0]]  # no hedging
    t = h.Table(
        f"Tail, {mode}: {sizes.requests:,} GETs, {sizes.slow_share:.0%} of the primary's answers "
        f"held {sizes.slow_seconds:g} s",
        ["variant", "p50", "p99", "p99.9", "max", "p99.9 vs no hedging", "p50 vs no hedging",
         "extra requests (server-counted)", "hedges (client-reported)", "answered by the backup",
         "held answers / primary requests"],
    )
    for label in labels:
        f = figures[label]
        ratio = base["p99.9"] / f["p99.9"] if f["p99.9"] > 0 else math.nan
        t.rows.append([
            label + (f" (median of {int(f['repeats'])} runs)" if f.get("repeats", 1) > 1 else ""),
            _ms(f["p50"]), _ms(f["p99"]), _ms(f["p99.9"]), _ms(f["max"]),
            "1x" if label == labels[0] else f"{ratio:,.1f}x lower" if label == REFERENCE else f"**{ratio:,.1f}x lower**",
            "-" if label == labels[0] else f"{(f['p50'] / base['p50'] - 1) * 100:+.1f} %",
            f"{int(f['extra']):,} ({f['extra_share']:.2%})",
            f"{int(f['hedges']):,}",
            f"{int(f['on_backup']):,}",
            f"{int(f['held']):,} / {int(f['primary_requests']):,}",
        ])
        if f["errors"]:
            t.rows[-1][0] += f" ({int(f['errors'])} errors)"
        if f["n"] < sizes.requests:
            t.rows[-1][0] += f" (stopped at the time bound after {int(f['n'])})"
    for label in labels[1:]:
        if label == REFERENCE:
            continue
        f = figures[label]
        ratio = base["p99.9"] / f["p99.9"] if f["p99.9"] > 0 else math.nan
        p50 = abs(f["p50"] / base["p50"] - 1)
        verdict = ratio >= 10 and f["extra_share"] <= 0.03 and p50 <= 0.05
        t.notes.append(
            f"{label}: p99.9 {ratio:,.1f}x lower (target >= 10x, aim 24x), {f['extra_share']:.2%} extra "
            f"(target <= 3 %), p50 {p50:.1%} off (target <= 5 %): **{'met' if verdict else 'not met'}**."
        )
    return t


def measure(sizes: Sizes) -> h.Report:
    """Run every mode for every variant; the report's tables are the figures."""
    quiet_logs()
    report = h.Report(NAME)
    started = time.monotonic()
    deadline = started + sizes.max_seconds
    chosen = variants(sizes)
    modes = ["async, sequential", f"async, {sizes.concurrency} concurrent tasks, {sizes.rate:g} requests/s"]
    if sizes.sync:
        modes.append("sync httpx.Client, sequential")
    pairs = {mode: [Pair(v, f"primary-{m}-{i}.bench", f"backup-{m}-{i}.bench")
                    for i, v in enumerate(chosen)] for m, mode in enumerate(modes)}
    hosts = [host for ps in pairs.values() for p in ps for host in (p.primary, p.backup)]
    with simulated(hosts, base_latency=0.0, max_seconds=sizes.max_seconds + 120) as sim:
        for ps in pairs.values():
            for p in ps:
                if not p.variant.reference:
                    slow(sim, p.primary, sizes)
        for mode, ps in pairs.items():
            print(f"... tail: {mode}", file=sys.stderr, flush=True)
            if mode.startswith("sync"):
                figures = {k: r.figures() for k, r in sequential_sync(sim, ps, sizes, deadline).items()}
            elif "concurrent" in mode:
                repeated = asyncio.run(concurrent_async(sim, ps, sizes, deadline))
                figures = {k: _median_figures([r.figures() for r in rs]) for k, rs in repeated.items()}
            else:
                figures = {k: r.figures() for k, r in asyncio.run(sequential_async(sim, ps, sizes, deadline)).items()}
            report.tables.append(table(mode, figures, sizes))
            report.data[mode] = figures
    report.data["sizes"] = {k: getattr(sizes, k) for k in sizes.__dataclass_fields__}
    report.tables[-1].notes.append(
        "Latency is client-side (around `client.get`); extra requests are the servers' own count of "
        "requests received beyond one per logical request (a cancelled loser counts). Held answers: "
        "how many of the primary's answers the seeded fault held (the same sequence for every variant)."
    )
    report.seconds = time.monotonic() - started
    return report


def run(opts: Options) -> h.Report:
    sizes = replace(FULL, repeats=opts.pick(FULL.repeats, 5), max_seconds=opts.seconds_or(900.0, 1800.0))
    return measure(sizes)


def cli(name: str, doc: str, argv: list[str] | None,
        measure: Callable[[argparse.Namespace], h.Report],
        options: Callable[[argparse.ArgumentParser], object] = lambda _: None) -> int:
    """A benchmark's own command line: ``--quick``, ``--output``; prints and saves the report."""
    parser = argparse.ArgumentParser(prog=f"python -m benchmarks.{name}", description=doc.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a short run, for a smoke test")
    parser.add_argument("--output", type=Path, help="also write the Markdown to this file")
    options(parser)
    args = parser.parse_args(argv)
    report = measure(args)
    if args.quick:
        report.name = f"{name}-quick"
    text = report.markdown()
    print(text, flush=True)
    meta = h.machine()
    meta["command"] = f"python -m benchmarks.{name} " + " ".join(argv if argv is not None else sys.argv[1:])
    print(f"... results in {h.save(report, meta)}", file=sys.stderr, flush=True)
    if args.output:
        args.output.write_text(text)
    return 0


def main(argv: list[str] | None = None) -> int:
    return cli(
        NAME, __doc__ or NAME, argv,
        lambda args: measure(replace(QUICK if args.quick else FULL, sync=not args.no_sync)),
        lambda parser: parser.add_argument("--no-sync", action="store_true", help="skip the sync client's run"),
    )


if __name__ == "__main__":
    raise SystemExit(main())
