"""The breaker's transition table, driven directly with explicit times."""

from __future__ import annotations

import pytest

from pytest_failover._breaker import Breaker, BreakerState


def make(threshold: int = 3, cooldown: float = 30.0) -> Breaker:
    return Breaker(threshold=threshold, cooldown=cooldown)


def test_opens_after_threshold_consecutive_failures() -> None:
    """Three consecutive failures open a closed breaker; fewer do not."""
    b = make()
    assert b.failure(1.0, probe=False) is None
    assert b.failure(2.0, probe=False) is None
    t = b.failure(3.0, probe=False)
    assert t is not None and (t.before, t.after) == (BreakerState.CLOSED, BreakerState.OPEN)
    assert not b.admits(3.0) and not b.admits(32.9) and b.admits(33.0)


def test_success_resets_the_count() -> None:
    """A success in between means the failures are not consecutive."""
    b = make()
    b.failure(1.0, probe=False)
    b.failure(2.0, probe=False)
    b.success(3.0, probe=False)
    b.failure(4.0, probe=False)
    b.failure(5.0, probe=False)
    assert b.state is BreakerState.CLOSED


def test_lazy_half_open_admits_exactly_one_probe() -> None:
    """After the cooldown the first caller becomes the probe; others are refused."""
    b = make(threshold=1, cooldown=10)
    b.failure(0.0, probe=False)
    probe, t = b.acquire(10.0)
    assert probe and t is not None and t.after is BreakerState.HALF_OPEN
    assert not b.admits(10.0) and not b.admits(1000.0)
    with pytest.raises(RuntimeError, match="half_open"):
        b.acquire(10.0)


def test_probe_success_closes_and_failure_reopens_with_timer_restarted() -> None:
    b = make(threshold=1, cooldown=10)
    b.failure(0.0, probe=False)
    b.acquire(10.0)
    t = b.failure(11.0, probe=True)
    assert t is not None and t.after is BreakerState.OPEN
    assert not b.admits(20.9) and b.admits(21.0)
    b.acquire(21.0)
    t = b.success(21.5, probe=True)
    assert t is not None and t.after is BreakerState.CLOSED and b.failures == 0


def test_late_results_do_not_move_an_open_or_half_open_breaker() -> None:
    """Outcomes of attempts admitted before the breaker opened are ignored."""
    b = make(threshold=1, cooldown=10)
    b.failure(0.0, probe=False)
    assert b.success(1.0, probe=False) is None
    assert b.state is BreakerState.OPEN
    b.acquire(10.0)
    assert b.success(10.1, probe=False) is None
    assert b.failure(10.2, probe=False) is None
    assert b.state is BreakerState.HALF_OPEN


def test_abandoned_probe_makes_the_next_request_probe() -> None:
    b = make(threshold=1, cooldown=10)
    b.failure(0.0, probe=False)
    b.acquire(10.0)
    t = b.abandon(10.5, probe=True)
    assert t is not None and t.after is BreakerState.OPEN
    assert b.admits(10.5)


def test_gauge_values() -> None:
    assert [s.gauge for s in BreakerState] == [0, 1, 2]
