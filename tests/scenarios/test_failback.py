"""Failback: the primary refuses, then recovers slowly (503), then is healthy again."""

from __future__ import annotations

import pytest

from benchmarks.scenarios._clients import Client
from benchmarks.scenarios._run import Env
from benchmarks.scenarios._scenarios import SMALL, failback

from ._support import explain, invariants

# Timed against the targets: run by themselves, after the rest (see tests/conftest.py)
pytestmark = pytest.mark.alone


def test_at_most_one_request_per_cooldown_reaches_the_recovering_primary(env: Env, client: Client) -> None:
    """Per transport, any window of one breaker cooldown holds at most one request to the
    recovering primary, and traffic returns to the primary once it is healthy."""
    outcome = failback(env, client, sizes=SMALL).outcome
    problems = invariants(outcome)
    for side in ("async", "thread"):
        most = outcome.extra[f"{side}: max requests reaching the recovering primary per cooldown"]
        if most > 1:
            problems.append(f"{side} transport: {most} requests reached the recovering primary within one cooldown (target: <= 1)")
        share = outcome.extra[f"{side}: share on the primary 2 cooldowns after recovery"]
        if share is None or share < 0.9:
            problems.append(f"{side} transport: share of requests on the primary after it recovered is {share} (expected >= 0.9)")
    assert not problems, explain(outcome, problems)
