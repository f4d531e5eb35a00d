"""The breaker's transitions and standings, driven directly with explicit times."""

from __future__ import annotations

import pytest

from pytest_failover._breaker import Breaker, BreakerState, Standing


def make(threshold: int = 3, cooldown: float = 30.0) -> Breaker:
    return Breaker(threshold=threshold, cooldown=cooldown)


def fail(b: Breaker, at: float, *, probe: bool = False) -> None:
    b.failure(at, started=at, probe=probe)


def test_opens_after_threshold_consecutive_failures() -> None:
    """Three consecutive failures open a closed breaker; fewer do not."""
    b = make()
    assert b.failure(1.0, started=1.0, probe=False) is None
    assert b.failure(2.0, started=2.0, probe=False) is None
    t = b.failure(3.0, started=3.0, probe=False)
    assert t is not None and (t.before, t.after) == (BreakerState.CLOSED, BreakerState.OPEN)
    assert b.standing(3.0, sticky=True) is Standing.RESTING
    assert b.standing(6.0, sticky=True) is Standing.OPEN
    assert b.standing(32.9, sticky=True) is Standing.OPEN
    assert b.standing(33.0, sticky=True) is Standing.DUE


def test_success_resets_the_count() -> None:
    """A success in between means the failures are not consecutive."""
    b = make()
    fail(b, 1.0)
    fail(b, 2.0)
    b.success(3.0, started=3.0, probe=False)
    fail(b, 4.0)
    fail(b, 5.0)
    assert b.state is BreakerState.CLOSED and b.failures == 2


def test_a_failed_closed_domain_is_suspect_then_due_with_stickiness_only() -> None:
    """One failure makes a closed domain suspect for a cooldown, then due for one probe."""
    b = make(cooldown=10)
    fail(b, 0.0)
    assert b.standing(5.0, sticky=True) is Standing.SUSPECT
    assert b.standing(10.0, sticky=True) is Standing.DUE
    assert b.standing(5.0, sticky=False) is Standing.HEALTHY


def test_a_failback_probe_is_single_and_its_success_clears_the_suspicion() -> None:
    """The lease of a due suspect domain makes it PROBING for everyone until it reports."""
    b = make(cooldown=10)
    fail(b, 0.0)
    assert b.acquire(10.0) is None  # the breaker stays closed
    assert b.standing(10.0, sticky=True) is Standing.PROBING
    with pytest.raises(RuntimeError, match="already in flight"):
        b.acquire(10.0)
    b.success(10.1, started=10.0, probe=True)
    assert b.standing(10.1, sticky=True) is Standing.HEALTHY


def test_a_failed_failback_probe_counts_and_restarts_the_cooldown() -> None:
    """A failed failback probe is a counted failure: suspect again, and open at the threshold."""
    b = make(threshold=2, cooldown=10)
    fail(b, 0.0)
    b.acquire(10.0)
    t = b.failure(10.5, started=10.0, probe=True)
    assert t is not None and t.after is BreakerState.OPEN and b.open_until == 20.5


def test_lazy_half_open_admits_exactly_one_probe() -> None:
    """After the cooldown the first caller becomes the probe; others are refused."""
    b = make(threshold=1, cooldown=10)
    fail(b, 0.0)
    t = b.acquire(10.0)
    assert t is not None and t.after is BreakerState.HALF_OPEN
    assert b.standing(10.0, sticky=True) is Standing.PROBING
    assert not b.admits(1000.0, sticky=True)
    with pytest.raises(RuntimeError, match="already in flight"):
        b.acquire(10.0)


def test_an_open_breaker_refuses_an_ordinary_lease_but_takes_an_early_probe() -> None:
    """Within the cooldown only an early probe fits, after a tenth of it, and it
    half-opens the breaker."""
    b = make(threshold=1, cooldown=10)
    fail(b, 0.0)
    assert b.standing(0.5, sticky=True) is Standing.RESTING  # a tenth of the cooldown first
    with pytest.raises(RuntimeError, match="resting"):
        b.acquire(0.5, early=True)
    with pytest.raises(RuntimeError, match="open within its cooldown"):
        b.acquire(5.0)
    t = b.acquire(5.0, early=True)
    assert t is not None and t.after is BreakerState.HALF_OPEN


def test_probe_success_closes_and_failure_reopens_with_timer_restarted() -> None:
    """The probe decides: success closes, failure re-opens for a whole new cooldown."""
    b = make(threshold=1, cooldown=10)
    fail(b, 0.0)
    b.acquire(10.0)
    t = b.failure(11.0, started=10.0, probe=True)
    assert t is not None and (t.before, t.after) == (BreakerState.HALF_OPEN, BreakerState.OPEN)
    assert b.standing(20.9, sticky=True) is Standing.OPEN and b.standing(21.0, sticky=True) is Standing.DUE
    b.acquire(21.0)
    t = b.success(21.5, started=21.0, probe=True)
    assert t is not None and t.after is BreakerState.CLOSED and b.failures == 0


def test_late_results_do_not_move_an_open_or_half_open_breaker() -> None:
    """Outcomes of attempts admitted before the breaker opened are ignored."""
    b = make(threshold=1, cooldown=10)
    fail(b, 0.0)
    assert b.success(1.0, started=-1.0, probe=False) is None
    assert b.failure(1.0, started=-1.0, probe=False) is None
    b.acquire(10.0)
    assert b.success(10.5, started=9.0, probe=False) is None
    assert b.state is BreakerState.HALF_OPEN


def test_a_success_that_started_before_the_latest_failure_does_not_clear_it() -> None:
    """A slow success from before the domain failed says nothing about it now."""
    b = make(cooldown=10)
    fail(b, 5.0)
    b.success(6.0, started=4.0, probe=False)
    assert b.standing(6.0, sticky=True) is Standing.SUSPECT
    b.success(7.0, started=6.5, probe=False)
    assert b.standing(7.0, sticky=True) is Standing.HEALTHY


def test_a_failure_that_started_before_the_recovery_does_not_count() -> None:
    """A slow failure from before the domain recovered leaves it healthy."""
    b = make(cooldown=10)
    fail(b, 0.0)
    b.acquire(10.0)
    b.success(10.1, started=10.0, probe=True)
    b.failure(10.2, started=9.0, probe=False)
    assert b.standing(10.2, sticky=True) is Standing.HEALTHY and b.failures == 0


def test_abandoned_probe_makes_the_next_request_probe() -> None:
    """A probe that ended without an outcome leaves the breaker due at once."""
    b = make(threshold=1, cooldown=10)
    fail(b, 0.0)
    b.acquire(10.0)
    t = b.abandon(12.0, probe=True)
    assert t is not None and t.after is BreakerState.OPEN
    assert b.standing(12.0, sticky=True) is Standing.DUE


def test_gauge_values() -> None:
    """The gauge encodes closed, half-open and open as 0, 1 and 2."""
    assert [s.gauge for s in (BreakerState.CLOSED, BreakerState.HALF_OPEN, BreakerState.OPEN)] == [0, 1, 2]
