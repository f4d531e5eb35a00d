"""Another process's word applied to a breaker (``_breaker.py``'s second table), with explicit times."""

from __future__ import annotations

import math

import pytest

from pytest_failover._breaker import Breaker, BreakerState, Standing


def make(threshold: int = 3, cooldown: float = 30.0) -> Breaker:
    return Breaker(threshold=threshold, cooldown=cooldown)


def state(b: Breaker) -> BreakerState:
    """Read afresh (an ``assert b.state is ...`` would narrow the type for good)."""
    return b.state


def test_a_remote_opening_opens_a_closed_breaker_until_its_deadline() -> None:
    """Opened elsewhere: OPEN here until that deadline, then DUE, as if it had failed here."""
    b = make()
    t = b.apply_remote_open(20.0, 5.0)
    assert t is not None and (t.before, t.after) == (BreakerState.CLOSED, BreakerState.OPEN)
    assert b.standing(5.0, sticky=True) is Standing.RESTING
    assert b.standing(19.9, sticky=True) is Standing.OPEN
    assert b.standing(20.0, sticky=True) is Standing.DUE


def test_a_remote_opening_of_an_open_breaker_keeps_the_later_deadline() -> None:
    """A second opening moves the deadline only forward, and is no transition."""
    b = make()
    b.apply_remote_open(20.0, 5.0)
    assert b.apply_remote_open(10.0, 6.0) is None and b.open_until == 20.0
    assert b.apply_remote_open(40.0, 7.0) is None and b.open_until == 40.0


def test_a_local_probe_in_flight_is_never_overruled() -> None:
    """While this process's probe is out, only its outcome counts: remote words change nothing."""
    b = make(threshold=1)
    b.failure(1.0, started=1.0, probe=False)
    b.acquire(31.0)
    assert b.state is BreakerState.HALF_OPEN
    assert b.apply_remote_close(31.1) is None
    assert b.apply_remote_open(90.0, 31.2) is None
    b.apply_remote_suspect(31.3, again=True)
    assert b.state is BreakerState.HALF_OPEN and b.leased and b.open_until == 31.0
    t = b.success(31.5, started=31.0, probe=True)
    assert t is not None and t.after is BreakerState.CLOSED


def test_a_remote_close_closes_and_clears_the_suspicion() -> None:
    """Its probe succeeded elsewhere: CLOSED, no failures, not suspect."""
    b = make()
    b.apply_remote_open(20.0, 5.0)
    t = b.apply_remote_close(8.0)
    assert t is not None and (t.before, t.after) == (BreakerState.OPEN, BreakerState.CLOSED)
    assert b.failed_at is None and b.failures == 0
    assert b.standing(8.0, sticky=True) is Standing.HEALTHY


def test_late_local_outcomes_keep_their_rules_after_remote_words() -> None:
    """An attempt started before a remote opening cannot count; one started before a
    remote close cannot count against the domain."""
    b = make(threshold=1)
    b.apply_remote_open(20.0, 5.0)
    assert b.success(6.0, started=4.0, probe=False) is None  # OPEN: not the probe's outcome
    assert b.state is BreakerState.OPEN
    b.apply_remote_close(8.0)
    assert b.failure(9.0, started=7.0, probe=False) is None  # started before the recovery
    assert state(b) is BreakerState.CLOSED and b.failed_at is None
    t = b.failure(10.0, started=9.5, probe=False)
    assert t is not None and t.after is BreakerState.OPEN


def test_a_remote_lease_makes_the_domain_probing_until_it_expires() -> None:
    """Another process probes it: PROBING here (never chosen, no second probe) until it expires."""
    b = make()
    b.apply_remote_open(20.0, 5.0)
    b.hold_remote(25.0)
    assert b.standing(21.0, sticky=True) is Standing.PROBING
    with pytest.raises(RuntimeError, match="in another process"):
        b.acquire(21.0)
    assert b.release_remote(24.9) is False and b.leased
    assert b.release_remote(25.0) is True and not b.leased
    assert b.standing(25.0, sticky=True) is Standing.DUE


def test_a_remote_lease_ends_with_the_holders_word() -> None:
    """The holder's report (its probe failed: opened again) ends its lease here too."""
    b = make()
    b.apply_remote_open(20.0, 5.0)
    b.hold_remote(80.0)
    b.apply_remote_open(50.0, 21.0)
    assert not b.leased and b.open_until == 50.0
    assert b.standing(30.0, sticky=True) is Standing.OPEN


def test_a_remote_lease_does_not_displace_a_local_one() -> None:
    """A local probe in flight keeps its lease; releasing 'remote' leases leaves it alone."""
    b = make(threshold=1)
    b.failure(1.0, started=1.0, probe=False)
    b.acquire(31.0)
    b.hold_remote(99.0)
    assert b.remote_until is None
    assert b.release_remote(math.inf) is False and b.leased


def test_moving_off_a_domain_elsewhere_makes_it_suspect_once() -> None:
    """Moved off elsewhere: suspect from then (not later, if already suspect);
    a failed failback probe elsewhere makes it due one cooldown later."""
    b = make()
    b.apply_remote_suspect(5.0, again=False)
    assert b.standing(6.0, sticky=True) is Standing.SUSPECT
    b.apply_remote_suspect(9.0, again=False)
    assert b.failed_at == 5.0
    assert b.standing(35.0, sticky=True) is Standing.DUE
    b.apply_remote_suspect(35.0, again=True)
    assert b.standing(36.0, sticky=True) is Standing.SUSPECT
    assert b.standing(65.0, sticky=True) is Standing.DUE
    assert b.standing(36.0, sticky=False) is Standing.HEALTHY  # suspicion is a sticky pool's rule
