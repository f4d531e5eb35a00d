"""A total outage: every domain dead (refused, 503, NXDOMAIN) under sustained load."""

from __future__ import annotations

import pytest

from benchmarks.scenarios._clients import Client
from benchmarks.scenarios._run import Env
from benchmarks.scenarios._scenarios import SMALL, total_outage

from ._support import explain, invariants

# Timed against the targets: run by themselves, after the rest (see tests/conftest.py)
pytestmark = pytest.mark.alone


def test_a_drained_budget_keeps_attempts_per_request_at_most_1_1(env: Env, client: Client) -> None:
    """Once the retry budget has drained, a logical request costs at most 1.1 attempts on average."""
    outcome = total_outage(env, client, sizes=SMALL).outcome
    problems = invariants(outcome)
    drained = outcome.extra["attempts per request once drained"]
    if not outcome.extra["requests once drained"]:
        problems.append("no request started once the budget had drained")
    elif drained > 1.1:
        problems.append(f"{drained} attempts per request once drained (target: <= 1.1)")
    if outcome.gap:
        problems.append(f"{outcome.gap} failures counted in the gap, yet no domain was ever healthy")
    assert not problems, explain(outcome, problems)
