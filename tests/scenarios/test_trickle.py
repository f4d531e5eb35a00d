"""A slow-drip primary: headers at once, then the body a byte every 0.4 s; the deadline must hold."""

from __future__ import annotations

import pytest

from benchmarks.scenarios._clients import Client
from benchmarks.scenarios._run import Env
from benchmarks.scenarios._scenarios import SMALL, trickle

from ._support import explain, invariants

# Timed against the targets: run by themselves, after the rest (see tests/conftest.py)
pytestmark = pytest.mark.alone


@pytest.mark.parametrize("side", ["async", "thread"])
def test_a_trickling_body_overruns_the_deadline_by_at_most_100_ms(
    env: Env, client_with_deadline: Client, side: str
) -> None:
    """With ``Policy(deadline=...)`` no logical request outlives its deadline by more than 100 ms."""
    outcome = trickle(env, client_with_deadline, sizes=SMALL, side=side).outcome
    problems = invariants(outcome)
    over = outcome.extra["max over the deadline (ms)"]
    if over is None or over > 100:
        problems.append(f"a request ended {over} ms after its {SMALL.trickle_deadline} s deadline (target: <= 100 ms)")
    assert not problems, explain(outcome, problems)
