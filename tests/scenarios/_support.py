"""What every scenario test checks besides its own target, and how a miss is reported."""

from __future__ import annotations

import json

from benchmarks.scenarios._metrics import Outcome


def invariants(outcome: Outcome) -> list[str]:
    """Problems that no scenario may show: foreign exceptions, uncounted attempts, hung requests."""
    problems = []
    if outcome.foreign:
        problems.append(
            f"{outcome.foreign} exception(s) that are not the client library's own errors escaped: "
            f"{outcome.foreign_examples}"
        )
    if not outcome.counts_match:
        problems.append(
            "attempts reported by the client, counted at the network layer and seen by the "
            f"servers differ: {json.dumps(outcome.per_host)}"
        )
    if outcome.hung:
        problems.append(f"{outcome.hung} worker(s) still running after the load's bound")
    if not outcome.requests:
        problems.append("no request completed")
    return problems


def explain(outcome: Outcome, problems: list[str]) -> str:
    """A failure message with the problems first, then the figures that locate them."""
    figures = {
        "requests": outcome.requests,
        "failed": outcome.failed,
        "gap": outcome.gap,
        "attempts/request (reported, network, server)": (
            outcome.attempts_reported, round(outcome.attempts_network, 3), round(outcome.attempts_server, 3)
        ),
        "p50 ms": round(1000 * outcome.p50, 1),
        "p99 ms": round(1000 * outcome.p99, 1),
        "statuses": outcome.statuses,
        "errors": outcome.errors,
        **outcome.extra,
    }
    return "\n".join(["", *problems, "figures: " + json.dumps(figures, default=str)])
