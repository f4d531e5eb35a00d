"""A cold burst against a dead primary: a fresh transport, every request at once, a healthy backup."""

from __future__ import annotations

import pytest

from benchmarks.scenarios._clients import Client
from benchmarks.scenarios._run import Env
from benchmarks.scenarios._scenarios import COLD_STATES, SMALL, cold_burst

from ._support import explain, invariants

# Timed against the targets: run by themselves, after the rest (see tests/conftest.py)
pytestmark = pytest.mark.alone


@pytest.mark.parametrize("side", ["async", "thread"])
@pytest.mark.parametrize("primary", sorted(COLD_STATES))
def test_a_cold_burst_has_no_user_visible_failure(env: Env, client: Client, primary: str, side: str) -> None:
    """Every request of a burst on a fresh transport is served by the backup while the primary
    refuses, fails to resolve or answers 503."""
    outcome = cold_burst(env, client, COLD_STATES[primary], sizes=SMALL, side=side).outcome
    problems = invariants(outcome)
    if outcome.failed:
        problems.append(f"{outcome.failed} of {outcome.requests} requests failed (target: 0)")
    assert not problems, explain(outcome, problems)
