"""Per-domain circuit breakers: every state transition in one table.

Rules and theory of operation
-----------------------------
A breaker starts CLOSED. In CLOSED every request is admitted; ``threshold``
consecutive failures open it. An OPEN breaker admits nothing until ``cooldown``
seconds have passed; then the *next real request* takes the breaker to HALF_OPEN
and becomes its only probe (lazy half-open: there is no background timer, and
concurrent callers do not all probe: while the probe is in flight the domain is
skipped by everybody else). The probe's success closes the breaker; its failure
re-opens it with the cooldown restarted. A probe that is abandoned (cancelled,
or its outcome says nothing about the domain) makes the breaker OPEN and due
again, so the next request probes.

Outcomes of attempts that were admitted *before* a breaker opened may arrive
late (concurrency); they carry no information about the current episode and
are ignored in OPEN and HALF_OPEN, except the probe's own.

Time is always passed in (seconds on a monotonic clock); nothing here sleeps,
reads a clock or does I/O. Callers serialise access (the pool's lock).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["Breaker", "BreakerState", "BreakerTransition"]


class BreakerState(str, enum.Enum):
    CLOSED = "closed"
    HALF_OPEN = "half_open"
    OPEN = "open"

    @property
    def gauge(self) -> int:
        """The value of the ``failover.breaker.state`` gauge: 0 closed, 1 half-open, 2 open."""
        return _GAUGE[self]


_GAUGE = {BreakerState.CLOSED: 0, BreakerState.HALF_OPEN: 1, BreakerState.OPEN: 2}


@dataclass(frozen=True, slots=True, kw_only=True)
class BreakerTransition:
    """A breaker changed state at time ``at``."""

    before: BreakerState
    after: BreakerState
    at: float


class Breaker:
    """The breaker of one domain. Mutable; owned and locked by its pool."""

    __slots__ = ("cooldown", "failures", "last_failure_at", "open_until", "state", "threshold")

    def __init__(self, *, threshold: int, cooldown: float) -> None:
        self.threshold = threshold
        self.cooldown = cooldown
        self.state = BreakerState.CLOSED
        self.failures = 0
        self.open_until = 0.0
        self.last_failure_at: float | None = None

    # -- questions (no state change) -------------------------------------------------

    def admits(self, now: float) -> bool:
        """Would a request sent now be let through?"""
        if self.state is BreakerState.CLOSED:
            return True
        if self.state is BreakerState.OPEN:
            return now >= self.open_until
        return False  # HALF_OPEN: the probe is in flight

    def probe_due(self, now: float) -> bool:
        """Is the breaker open with its cooldown over (the next request probes)?"""
        return self.state is BreakerState.OPEN and now >= self.open_until

    def recently_failed(self, now: float) -> bool:
        """Did this domain fail within the last cooldown (used for stickiness)?"""
        return self.last_failure_at is not None and now - self.last_failure_at < self.cooldown

    # -- events ----------------------------------------------------------------------

    def acquire(self, now: float) -> tuple[bool, BreakerTransition | None]:
        """An attempt is about to be sent. Returns (is_probe, transition)."""
        if self.state is BreakerState.CLOSED:
            return False, None
        if not self.admits(now):
            raise RuntimeError(f"breaker is {self.state.value}: it does not admit a request now")
        return True, self._apply("probe", now, probe=True)

    def success(self, now: float, *, probe: bool) -> BreakerTransition | None:
        if self.state is BreakerState.CLOSED:  # the hot path, same as the table's entry
            self.failures = 0
            return None
        return self._apply("success", now, probe=probe)

    def failure(self, now: float, *, probe: bool) -> BreakerTransition | None:
        self.last_failure_at = now
        return self._apply("failure", now, probe=probe)

    def abandon(self, now: float, *, probe: bool) -> BreakerTransition | None:
        return self._apply("abandon", now, probe=probe)

    def force_open(self, now: float, *, until: float) -> BreakerTransition | None:
        """Open without evidence, e.g. when a persisted state says so."""
        self.open_until = until
        return self._move(BreakerState.OPEN, now)

    # -- the table -------------------------------------------------------------------

    def _apply(self, event: str, now: float, *, probe: bool) -> BreakerTransition | None:
        handler = _TABLE.get((self.state, event))
        if handler is None:
            raise RuntimeError(f"breaker: event {event!r} does not fit state {self.state.value!r}")
        return handler(self, now, probe)

    def _move(self, after: BreakerState, now: float) -> BreakerTransition | None:
        before, self.state = self.state, after
        return None if before is after else BreakerTransition(before=before, after=after, at=now)

    def _closed_success(self, now: float, probe: bool) -> BreakerTransition | None:
        self.failures = 0
        return None

    def _closed_failure(self, now: float, probe: bool) -> BreakerTransition | None:
        self.failures += 1
        if self.failures < self.threshold:
            return None
        self.open_until = now + self.cooldown
        return self._move(BreakerState.OPEN, now)

    def _open_probe(self, now: float, probe: bool) -> BreakerTransition | None:
        return self._move(BreakerState.HALF_OPEN, now)

    def _ignore(self, now: float, probe: bool) -> BreakerTransition | None:
        return None

    def _half_open_success(self, now: float, probe: bool) -> BreakerTransition | None:
        if not probe:
            return None
        self.failures = 0
        return self._move(BreakerState.CLOSED, now)

    def _half_open_failure(self, now: float, probe: bool) -> BreakerTransition | None:
        if not probe:
            return None
        self.open_until = now + self.cooldown
        return self._move(BreakerState.OPEN, now)

    def _half_open_abandon(self, now: float, probe: bool) -> BreakerTransition | None:
        if not probe:
            return None
        self.open_until = now
        return self._move(BreakerState.OPEN, now)


_Handler = Callable[[Breaker, float, bool], "BreakerTransition | None"]

# (state, event) -> what happens. An event missing here is a bug and raises.
_TABLE: dict[tuple[BreakerState, str], _Handler] = {
    (BreakerState.CLOSED, "success"): Breaker._closed_success,
    (BreakerState.CLOSED, "failure"): Breaker._closed_failure,
    (BreakerState.CLOSED, "abandon"): Breaker._ignore,
    (BreakerState.OPEN, "probe"): Breaker._open_probe,
    (BreakerState.OPEN, "success"): Breaker._ignore,  # late result from before it opened
    (BreakerState.OPEN, "failure"): Breaker._ignore,
    (BreakerState.OPEN, "abandon"): Breaker._ignore,
    (BreakerState.HALF_OPEN, "success"): Breaker._half_open_success,
    (BreakerState.HALF_OPEN, "failure"): Breaker._half_open_failure,
    (BreakerState.HALF_OPEN, "abandon"): Breaker._half_open_abandon,
}
