"""Two flapping domains, one of them healthy at every instant, many tasks and threads."""

from __future__ import annotations

from benchmarks.scenarios._clients import Client
from benchmarks.scenarios._run import Env
from benchmarks.scenarios._scenarios import SMALL, flapping

from ._support import explain, invariants

# Issue #9's target is a gap of at most 0.5 %, and it is NOT met yet: side-by-side runs
# of this small scenario give 5 to 10 % with the default Policy (4 to 5 % without a retry
# budget), down from 20 to 65 % before the core's rework. This bound only keeps that
# progress from sliding back; docs/benchmarks.md has the figures and issue #9 the
# analysis of what is left (requests that straddle a switch use up their three attempts).
CURRENT_BOUND = 0.15


def test_flapping_domains_keep_the_availability_gap_within_the_current_bound(env: Env, ours: Client) -> None:
    """At most 15 % of requests fail while the other domain could have served them
    (the target of 0.5 % is open work), and every invariant holds."""
    outcome = flapping(env, ours, sizes=SMALL).outcome
    problems = invariants(outcome)
    if outcome.gap_share > CURRENT_BOUND:
        problems.append(
            f"availability gap {100 * outcome.gap_share:.2f} % "
            f"({outcome.gap} of {outcome.requests} requests; bound: <= {100 * CURRENT_BOUND:.0f} %)"
        )
    assert not problems, explain(outcome, problems)
