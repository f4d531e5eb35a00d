"""Benchmark 3: attempts per logical request during a total outage of every domain.

Four domains (primary, backup, region 1, region 2) all down, either refusing
connections (closed loopback ports) or answering 503 (the fast server). Each variant
gets its own transport and sends the same number of sequential GETs; every attempt
is counted by a wrapper around the inner ``httpx.HTTPTransport`` (and, for 503, by the
server too), independently of what the failover transport reports.

The seed schedule's offsets (0, 1, 3, 6, 10 s) are scaled down 1,000x (0 to 10 ms)
so the run stays short; the number of attempts does not depend on the scale.
"""

from __future__ import annotations

import contextlib
import logging
import statistics
import time
from collections import Counter
from typing import Any

import httpx

from benchmarks import _harness as h
from benchmarks._options import Options

NAME = "outage"


class CountingTransport(httpx.BaseTransport):
    """Counts every attempt that reaches the network layer."""

    def __init__(self, inner: httpx.BaseTransport) -> None:
        self.inner = inner
        self.count = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.count += 1
        return self.inner.handle_request(request)

    def close(self) -> None:
        self.inner.close()


def run(opts: Options) -> h.Report:
    import pytest_failover as pf
    from pytest_failover import Policy, RetryBudget, ScheduleTable, Step

    log = logging.getLogger("pytest_failover")  # keep the logging cost, drop the output
    log.addHandler(logging.NullHandler())
    log.propagate = False
    report = h.Report(NAME)
    started = time.monotonic()
    requests = opts.pick(200, 2000)
    max_seconds = opts.seconds_or(20, 300)
    scaled = ScheduleTable([Step(0, 0), Step(0.001, 0), Step(0.003, 1), Step(0.006, 2), Step(0.010, 3)])
    never = 10**9  # a breaker threshold that is never reached: breakers effectively off
    policies: dict[str, Any] = {
        "seed schedule: Policy.agora(), no budget, breakers off": Policy.agora(
            schedule=scaled, retry_budget=None, breaker_threshold=never),
        "Policy.agora() + retry budget (defaults), breakers off": Policy.agora(
            schedule=scaled, retry_budget=RetryBudget(), breaker_threshold=never),
        "Policy.agora() + budget + breakers (all defaults)": Policy.agora(schedule=scaled),
        "Policy() defaults (jittered backoff, 3 attempts, budget, breakers)": Policy(),
    }
    table = h.Table(
        f"Total outage of all 4 domains: attempts per logical request ({requests} sequential GETs per row)",
        ["outage", "policy", "first request", "requests 1-10", "all requests",
         "**once drained** (requests 21+)", "outcomes"],
    )
    data: dict[str, Any] = {}
    with h.server(ports=4, status_503=4) as srv:
        kinds = {
            "refused": [f"http://127.0.0.1:{h.closed_port()}" for _ in range(4)],
            "503": [srv.url(i) for i in range(4)],
        }
        for kind, domains in kinds.items():
            for label, policy in policies.items():
                with contextlib.ExitStack() as stack:
                    inner = stack.enter_context(httpx.HTTPTransport())
                    counting = CountingTransport(inner)
                    transport = pf.FailoverTransport([pf.Pool("bench", domains)], policy, transport=counting)
                    client = stack.enter_context(httpx.Client(transport=transport))
                    per_request: list[int] = []
                    outcomes: Counter[str] = Counter()
                    served_before = srv.count() if kind == "503" else 0
                    t0 = time.monotonic()
                    for _ in range(requests):
                        before = counting.count
                        try:
                            response = client.get(domains[0] + "/v1/ping")
                            outcomes[f"HTTP {response.status_code}"] += 1
                        except httpx.TransportError as exc:
                            outcomes[type(exc).__name__] += 1
                        per_request.append(counting.count - before)
                        if time.monotonic() - t0 > max_seconds:
                            break
                    served = srv.count() - served_before if kind == "503" else None
                if served is not None and served != sum(per_request):
                    raise RuntimeError(f"{label}: server saw {served}, wrapper counted {sum(per_request)}")
                drained = per_request[20:]
                row = [kind, label, str(per_request[0]), f"{statistics.mean(per_request[:10]):.2f}",
                       f"{statistics.mean(per_request):.2f}",
                       f"**{statistics.mean(drained):.2f}**" if drained else "-",
                       ", ".join(f"{k} x{v}" for k, v in outcomes.most_common())]
                table.rows.append(row)
                data[f"{kind} / {label}"] = {"per_request": per_request, "outcomes": dict(outcomes),
                                             "server_count": served}
    table.notes.append(
        "Target: <= 1.1 attempts per logical request once the budget has drained, vs 5 for the plain seed schedule."
    )
    table.notes.append(
        "Attempts are counted at the inner transport (every call that would touch the network); for the 503 "
        "outage the server's own request count was checked equal to it."
    )
    table.notes.append(
        "With breakers on, an open breaker answers CircuitOpenError without any attempt, so those rows fall "
        "to 0 until the 30 s cooldown lets one probe through."
    )
    report.tables.append(table)
    report.data = data
    report.seconds = time.monotonic() - started
    return report
