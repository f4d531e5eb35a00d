"""Benchmark 2: time to first success with a dead primary, vs the backup's own latency.

Every request here uses one shared inner ``httpx.HTTPTransport`` whose keep-alive
connection to the backup (the fast loopback server in another process) is warm, so the
difference between a row and the baseline is what the dead primary costs:

- baseline: a plain ``httpx.Client`` over that inner transport, straight to the backup;
- DNS failure: the primary is ``http://primary.invalid:PORT`` and resolving it fails
  (``gaierror(EAI_NONAME)``, see ``benchmarks._dns``; the simulator's ``dns_nxdomain``
  fault when ``pytest_failover.simulator.FakeDomains`` is available);
- refused: the primary is a closed loopback port;

each with a *fresh* ``FailoverTransport`` per request (breakers closed, nothing
sticky: the real first failover), once with the default ``Policy()`` and once with an
immediate switch (``ScheduleTable([Step(0, 0), Step(0, 1)])``) that shows the
mechanism's own cost.
Then one long-lived transport (``sticky=False`` so the breaker alone decides) whose
primary breaker has been opened: the number of attempts it still makes to the dead
domain is counted on every request.
"""

from __future__ import annotations

import contextlib
import gc
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx

from benchmarks import _harness as h
from benchmarks._options import Options

NAME = "dead_primary"


@dataclass
class Variant:
    name: str
    make: Callable[[], httpx.Client]  # untimed: builds the client for one request
    fresh: bool  # a new client per request?
    samples: list[float] = field(default_factory=list)
    round_medians: dict[int, float] = field(default_factory=dict)
    open_dead: int = 0  # attempts on the dead domain while its breaker was open
    open_requests: int = 0
    probes: int = 0  # attempts on the dead domain once its cooldown had passed
    dead_attempts: list[int] = field(default_factory=list)
    total_attempts: list[int] = field(default_factory=list)
    client: httpx.Client | None = None


@contextmanager
def _dns_failure(host: str) -> Iterator[str]:
    """Make ``host`` fail to resolve; yields how."""
    try:
        from pytest_failover import faults
        from pytest_failover.simulator import FakeDomains
    except ImportError:  # the simulator extra is not installed
        simulator = False
    else:
        simulator = True
    if simulator:
        with FakeDomains() as fd:
            fd.add(host)
            fd.fail(host, faults.dns_nxdomain())
            yield "simulator dns_nxdomain"
            return
    from benchmarks._dns import nxdomain_for_invalid

    with nxdomain_for_invalid():
        yield "getaddrinfo -> EAI_NONAME (.invalid)"


def run(opts: Options) -> h.Report:
    import logging

    import pytest_failover as pf
    from pytest_failover import Policy, ScheduleTable, Step

    log = logging.getLogger("pytest_failover")  # retries log at WARNING: keep the cost, drop the output
    log.addHandler(logging.NullHandler())
    log.propagate = False
    report = h.Report(NAME)
    started = time.monotonic()
    rounds = opts.rounds_or(200, 1000)
    per_round = opts.pick(2, 4)
    jitter_every = 5  # the default-policy rows sleep U(0, 0.2 s): one request every 5th round
    max_seconds = opts.seconds_or(30, 240)
    immediate = ScheduleTable([Step(0, 0), Step(0, 1)])

    with h.server() as srv, contextlib.ExitStack() as stack:
        backup = srv.url()
        url_path = "/v1/ping"
        refused = f"http://127.0.0.1:{h.closed_port()}"
        dns_host = "primary.invalid"
        dns = f"http://{dns_host}:{srv.ports[0]}"
        how = stack.enter_context(_dns_failure(dns_host))
        inner = stack.enter_context(httpx.HTTPTransport())

        def plain() -> httpx.Client:
            return httpx.Client(transport=inner)

        def failover(primary: str, policy: Any) -> Callable[[], httpx.Client]:
            def make() -> httpx.Client:
                pool = pf.Pool("bench", [primary, backup])
                return httpx.Client(transport=pf.FailoverTransport([pool], policy, transport=inner))
            return make

        variants = [
            Variant("backup alone (baseline, plain httpx.Client)", plain, fresh=False),
            Variant(f"DNS failure ({how}), immediate switch", failover(dns, Policy(schedule=immediate)), True),
            Variant("refused (closed port), immediate switch", failover(refused, Policy(schedule=immediate)), True),
            Variant(f"DNS failure ({how}), default Policy()", failover(dns, Policy()), True),
            Variant("refused (closed port), default Policy()", failover(refused, Policy()), True),
        ]
        open_variant = Variant(
            "refused, breaker open (default Policy(sticky=False))",
            failover(refused, Policy(sticky=False)), fresh=False)
        variants.append(open_variant)
        # Open the primary's breaker: default threshold 3 consecutive failures.
        transport = pf.FailoverTransport([pf.Pool("bench", [refused, backup])], Policy(sticky=False),
                                         transport=inner)
        open_variant.client = httpx.Client(transport=transport)
        for _ in range(3):
            open_variant.client.get(refused + url_path)
        state = transport.state().pools["bench"].domains[0]
        breaker_state = state.breaker

        def request(v: Variant) -> None:
            client = v.make() if v.fresh else (v.client or v.make())
            if not v.fresh:
                v.client = client
            target = (dns if "DNS" in v.name else refused if "refused" in v.name else backup) + url_path
            before = None
            if v is open_variant:
                before = transport.state().pools["bench"].domains[0]
            t0 = time.perf_counter()
            response = client.get(target)
            elapsed = time.perf_counter() - t0
            if response.status_code != 200:
                raise RuntimeError(f"{v.name}: status {response.status_code}")
            v.samples.append(elapsed)
            result = response.extensions.get("failover")
            if result is not None:
                primary = target[: -len(url_path)]
                v.total_attempts.append(len(result.attempts))
                dead = sum(1 for a in result.attempts if a.domain == primary)
                v.dead_attempts.append(dead)
                if before is not None and not before.can_request:
                    v.open_requests += 1
                    v.open_dead += dead
                elif before is not None:
                    v.probes += dead
            if v.fresh:
                client.close()  # the inner transport is shared: closing the wrapper keeps it

        for v in variants:  # warm-up, untimed
            request(v)
            v.samples.clear()
            v.dead_attempts.clear()
            v.total_attempts.clear()
        t_start = time.monotonic()
        for r in range(rounds):
            order = variants[r % len(variants):] + variants[: r % len(variants)]
            if r % 10 == 0:
                gc.collect()
            for v in order:
                if "default Policy()" in v.name:
                    if r % jitter_every:
                        continue
                    n = 1
                else:
                    n = per_round
                first = len(v.samples)
                for _ in range(n):
                    request(v)
                v.round_medians[r] = statistics.median(v.samples[first:])
            if r >= 10 and time.monotonic() - t_start > max_seconds:
                break
        open_state = transport.state().pools["bench"].domains[0].breaker

    base = statistics.median(variants[0].samples)
    base_p10 = statistics.quantiles(variants[0].samples, n=10)[0]
    table = h.Table(
        "Dead primary: time to first success (warm keep-alive connection to the backup)",
        ["case", "requests", "median", "p25 - p75", "added vs backup alone (median of per-round differences)",
         "added at p10 (less noise)",
         "attempts on the dead domain per request", "attempts per request"],
    )
    data: dict[str, Any] = {"dns": how}
    for v in variants:
        st = h.Stats.of(v.samples)
        dead = f"{statistics.mean(v.dead_attempts):.2f}" if v.dead_attempts else "-"
        total = f"{statistics.mean(v.total_attempts):.2f}" if v.total_attempts else "1 (plain)"
        baseline_rounds = variants[0].round_medians
        added = statistics.median(
            m - baseline_rounds[r] for r, m in v.round_medians.items() if r in baseline_rounds)
        table.rows.append([v.name, str(st.n), h.ms(st.median), f"{h.ms(st.p25)} - {h.ms(st.p75)}",
                           f"**{added * 1e3:+.2f} ms** ({(st.median - base) * 1e3:+.2f} ms overall)",
                           f"{(statistics.quantiles(v.samples, n=10)[0] - base_p10) * 1e3:+.2f} ms", dead, total])
        data[v.name] = {"median_s": st.median, "p25_s": st.p25, "p75_s": st.p75, "n": st.n,
                        "dead_attempts": v.dead_attempts, "attempts": v.total_attempts}
    table.notes.append(
        f"Breaker of the dead primary after the 3 opening failures: `{breaker_state}`; at the end: `{open_state}`. "
        f"While it was open: **{open_variant.open_dead} attempts on the dead domain in {open_variant.open_requests} requests**; "
        f"after its 30 s cooldown: {open_variant.probes} half-open probe attempt(s) (each failed and re-opened it)."
    )
    table.notes.append(
        "Target: DNS failure and refused add at most 2 ms over the backup's own latency; "
        "an open breaker adds zero attempts to the dead domain."
    )
    table.notes.append(
        "The default Policy() rows include whatever wait the default schedule (full-jitter exponential "
        "backoff, base 0.2 s) puts before the switch; the immediate-switch rows use "
        "ScheduleTable([Step(0, 0), Step(0, 1)]) and show the mechanism alone. Default-policy rows run "
        "one request every 5th round."
    )
    report.tables.append(table)
    report.data = data
    report.seconds = time.monotonic() - started
    return report
