"""Benchmark: resolvers (issue 29), side by side, public API only.

1. **A poisoned local DNS: time to the first success.** The primary's system lookup answers
   a wrong address that refuses (the simulator's ``dns_poisoned()``); the backup is healthy.
   Each request is a *fresh* ``FailoverTransport`` (breakers closed, nothing cached: a
   process's first request), with the default ``Policy`` otherwise:

   - no resolver: the attempt on the primary fails, the request fails over to the backup;
   - ``CachingResolver(DoHResolver(...))`` made for the request (its DoH lookup and its
     TLS connection to the DoH server are in the time): it stays on the primary;
   - the same resolver kept warm for the run (the steady state of a process).

   Which domain answered is read off each response (``FailoverResult.domain``).
2. **Warm-cache cost per request against the system resolver**, paired (interleaved rounds,
   ``_harness.interleave``): a long-lived ``FailoverTransport`` to a healthy domain
   (``localhost``, the fast loopback server in another process), ``Policy()`` against
   ``Policy(resolver=<a warm CachingResolver(DoHResolver)>)``:

   - keep-alive (the happy path: a pooled connection resolves nothing; target: at most 2 %);
   - a new connection per request (``Connection: close``): every request resolves, the
     cache's lookup and the dial against ``getaddrinfo``.

Run: ``python -m benchmarks resolve`` (``python -m benchmarks.resolve --quick`` for a short run).
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

import httpx

from benchmarks import _harness as h
from benchmarks._options import Options
from benchmarks.tail import cli, quiet_logs

NAME = "resolve"
PRIMARY, BACKUP, DOH = "api.bench", "api2.bench", "doh.bench"
NO_RESOLVER = "no resolver (system DNS)"
DOH_FRESH = "DoH resolver, made for the request"
DOH_WARM = "DoH resolver, warm"
SYSTEM_KEEPALIVE = "Policy(), keep-alive"
CACHE_KEEPALIVE = "Policy(resolver=warm cache), keep-alive"
SYSTEM_CLOSE = "Policy(), new connection each"
CACHE_CLOSE = "Policy(resolver=warm cache), new connection each"


@dataclass(frozen=True)
class Sizes:
    first_requests: int  # per variant, part 1
    rounds: int  # part 2
    per_round: int
    max_seconds: float


FULL = Sizes(first_requests=60, rounds=2000, per_round=20, max_seconds=60.0)
QUICK = Sizes(first_requests=3, rounds=6, per_round=5, max_seconds=5.0)


@contextmanager
def _domains() -> Iterator[tuple[Any, Callable[[], Any]]]:
    """The simulator's fake domains (the primary poisoned) and ``make()``: a new
    ``CachingResolver(DoHResolver)`` of its DoH server, which answers the real addresses."""
    from pytest_failover import faults
    from pytest_failover.resolve import CachingResolver, DoHResolver
    from pytest_failover.simulator import DoHServer, FakeDomains

    with FakeDomains() as fd:
        doh = DoHServer()
        server = fd.add(DOH, doh)
        for host in (PRIMARY, BACKUP):
            doh.answer(host, [fd.add(host).address], ttl=3600)
        doh.answer("localhost", ["127.0.0.1"], ttl=3600)
        fd.fail(PRIMARY, faults.dns_poisoned())
        context = fd.ssl_context()

        def make() -> Any:
            return CachingResolver(DoHResolver(f"https://{DOH}/dns-query", bootstrap=server.address, verify=context))

        yield fd, make


def _first_success(sizes: Sizes, make: Callable[[], Any]) -> tuple[dict[str, list[float]], dict[str, dict[str, int]]]:
    """Part 1: each variant's times to the first success, and the domains that answered."""
    from pytest_failover import FailoverTransport, Policy, Pool

    pool = Pool("api", [f"https://{PRIMARY}", f"https://{BACKUP}"])
    warm = make()
    warm.resolve(PRIMARY)
    made: dict[str, Callable[[], tuple[FailoverTransport, Any]]] = {
        NO_RESOLVER: lambda: (FailoverTransport(pool), None),
        DOH_FRESH: lambda: _with(pool, make()),
        DOH_WARM: lambda: (FailoverTransport(pool, Policy(resolver=warm)), None),
    }
    times: dict[str, list[float]] = {name: [] for name in made}
    served: dict[str, dict[str, int]] = {name: {} for name in made}
    for i in range(sizes.first_requests):
        names = list(made)
        for name in names[i % len(names):] + names[: i % len(names)]:  # rotated
            transport, resolver = made[name]()
            try:
                with httpx.Client(transport=transport) as client:
                    started = time.perf_counter()
                    response = client.get(f"https://{PRIMARY}/v1/ping")
                    times[name].append(time.perf_counter() - started)
                domain = str(response.extensions["failover"].domain)
                served[name][domain] = served[name].get(domain, 0) + 1
            finally:
                if resolver is not None:
                    resolver.close()
    warm.close()
    return times, served


def _with(pool: Any, resolver: Any) -> tuple[Any, Any]:
    from pytest_failover import FailoverTransport, Policy

    return FailoverTransport(pool, Policy(resolver=resolver)), resolver


def _warm_cost(sizes: Sizes, make: Callable[[], Any]) -> h.Timings:
    """Part 2: per-request wall and CPU seconds, paired rounds."""
    from pytest_failover import FailoverTransport, Policy, Pool

    with h.server(max_seconds=sizes.max_seconds + 120) as srv:
        origin = f"http://localhost:{srv.ports[0]}"
        pool = Pool("bench", [origin])
        cache = make()
        cache.resolve("localhost")  # warm: every timed lookup is a cache hit (TTL 3600 s)
        clients = {
            SYSTEM_KEEPALIVE: httpx.Client(transport=FailoverTransport(pool)),
            CACHE_KEEPALIVE: httpx.Client(transport=FailoverTransport(pool, Policy(resolver=cache))),
            SYSTEM_CLOSE: httpx.Client(transport=FailoverTransport(pool), headers={"Connection": "close"}),
            CACHE_CLOSE: httpx.Client(
                transport=FailoverTransport(pool, Policy(resolver=cache)), headers={"Connection": "close"}
            ),
        }
        url = origin + "/v1/ping"

        def runner(client: httpx.Client) -> h.Runner:
            def run(n: int) -> None:
                for _ in range(n):
                    client.get(url).read()

            return run

        try:
            return h.interleave(
                {name: runner(client) for name, client in clients.items()},
                rounds=sizes.rounds,
                per_round=sizes.per_round,
                max_seconds=sizes.max_seconds,
            )
        finally:
            for client in clients.values():
                client.close()
            cache.close()


def measure(sizes: Sizes) -> h.Report:
    quiet_logs()
    report = h.Report(NAME)
    started = time.monotonic()
    with _domains() as (_, make):
        print("... resolve: time to the first success, poisoned DNS", file=sys.stderr, flush=True)
        times, served = _first_success(sizes, make)
        print("... resolve: warm-cache cost per request", file=sys.stderr, flush=True)
        timings = _warm_cost(sizes, make)
    first = h.Table(
        f"A poisoned local DNS: time to the first success of a fresh FailoverTransport "
        f"({sizes.first_requests} requests per variant, rotated)",
        ["variant", "median", "p25 - p75", "answered by"],
    )
    for name, samples in times.items():
        stats = h.Stats.of(samples)
        by = ", ".join(f"{domain.removeprefix('https://')}: {n}" for domain, n in sorted(served[name].items()))
        first.rows.append([name, h.ms(stats.median), f"{h.ms(stats.p25)} - {h.ms(stats.p75)}", by])
    first.notes.append(
        "Without a resolver the primary's attempt fails (the poisoned address refuses) and the "
        "request fails over to the backup, after the default schedule's first delay; with DoH it "
        "stays on the primary."
    )
    report.tables.append(first)
    report.data["first_success"] = {name: {"samples_s": t, "served": served[name]} for name, t in times.items()}
    cost = h.Table(
        f"Warm-cache cost per request against the system resolver ({len(timings.wall[SYSTEM_KEEPALIVE])} "
        "paired rounds)",
        ["variant", "median per request", "CPU per request", "paired ratio (wall)"],
    )
    for name, base in ((SYSTEM_KEEPALIVE, SYSTEM_KEEPALIVE), (CACHE_KEEPALIVE, SYSTEM_KEEPALIVE),
                       (SYSTEM_CLOSE, SYSTEM_CLOSE), (CACHE_CLOSE, SYSTEM_CLOSE)):
        ratio = h.paired_ratios(timings.wall[name], timings.wall[base])
        cost.rows.append([
            name,
            h.us(statistics.median(timings.wall[name])),
            h.us(statistics.median(timings.cpu[name])),
            "1 (baseline)" if name == base else f"{ratio.median:.3f} ({ratio.p25:.3f} - {ratio.p75:.3f})",
        ])
    cost.notes.append("Target: keep-alive with a warm cache at most 1.02 (2 %) of Policy().")
    report.tables.append(cost)
    report.data["warm_cost"] = {"wall_s": timings.wall, "cpu_s": timings.cpu}
    report.data["sizes"] = {k: getattr(sizes, k) for k in sizes.__dataclass_fields__}
    report.seconds = time.monotonic() - started
    return report


def run(opts: Options) -> h.Report:
    sizes = replace(
        FULL,
        rounds=opts.rounds_or(FULL.rounds, 20000),
        max_seconds=opts.seconds_or(FULL.max_seconds, 300.0),
        first_requests=opts.pick(FULL.first_requests, 300),
    )
    return measure(sizes)


def main(argv: list[str] | None = None) -> int:
    return cli(NAME, __doc__ or NAME, argv, lambda args: measure(QUICK if args.quick else FULL))


if __name__ == "__main__":
    raise SystemExit(main())
