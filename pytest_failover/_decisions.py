"""The values the decision core hands out: decisions, events and attempt records.

Everything here is immutable and validated when built (h11's ``_events.py``
style): a decision is a value the transports carry out, never a side effect.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

from . import semconv

if TYPE_CHECKING:
    from ._breaker import BreakerState
    from ._pool import Domain

__all__ = [
    "Attempt",
    "AttemptRecord",
    "BreakerEvent",
    "BudgetRejected",
    "Ending",
    "Event",
    "HedgeThrottled",
    "SlowCall",
    "Stop",
    "Switch",
    "Wait",
]


# Builds a named tuple from a tuple of all its fields, without the named tuple's
# Python-level ``__new__``: 150 ns against 370 ns on CPython 3.11 (timeit), for the
# values every request builds (Attempt, AttemptRecord, FailoverResult).
new_tuple = tuple.__new__


class AttemptRecord(NamedTuple):
    """What one attempt did: kept on results and errors, reported in telemetry.

    ``sent``: bytes of the request may have reached the domain (for a cancelled
    attempt: it had been handed to the network when it was cut).
    ``hedge``: it was a hedge (sent while an earlier attempt was in flight).
    ``race``: for an attempt that was in flight beside another, how it ended:
    ``won`` (its answer was returned), ``lost`` (it ended, failing, while the
    request went on) or ``cancelled`` (another won while it was in flight; its
    ``error_type`` is ``cancelled``); None for an attempt that ran alone."""

    number: int
    domain: str
    error_type: str | None
    status: int | None
    duration: float
    sent: bool
    hedge: bool = False
    race: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class BreakerEvent:
    """A breaker changed state; ``reason`` is ``slow_calls`` when slow calls opened it."""

    pool: str
    domain: Domain
    before: BreakerState
    after: BreakerState
    reason: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Switch:
    """The domain serving a pool changed (``reason``: the failure that moved it, or
    ``failback`` when a preferred domain took the traffic back)."""

    pool: str
    before: Domain
    after: Domain
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class BudgetRejected:
    pool: str


@dataclass(frozen=True, slots=True, kw_only=True)
class HedgeThrottled:
    """A hedge to ``domain`` was due, but the pool's hedge throttle held it back."""

    pool: str
    domain: Domain


@dataclass(frozen=True, slots=True, kw_only=True)
class SlowCall:
    """An attempt on ``domain`` took at least the ``SlowCalls`` threshold."""

    pool: str
    domain: Domain


Event = BreakerEvent | Switch | BudgetRejected | HedgeThrottled | SlowCall


class Attempt(NamedTuple):
    """Decision: send attempt ``number`` (1-based) to ``domain`` after ``delay``
    seconds, with at most ``timeout`` seconds for it. ``probe``: this attempt is
    the domain's one probe (half-open, failback, or an early probe when every
    other domain is out).

    A named tuple, where the other decisions are validated dataclasses: one is
    built for every request, only by the core, and a frozen dataclass with a
    validating ``__post_init__`` cost 6,300 more instructions per request
    (callgrind, in-process, side by side), about 0.5 % of a loopback request.
    The stateful tests check its invariants instead."""

    number: int
    domain: Domain
    delay: float
    timeout: float
    probe: bool = False
    events: tuple[Event, ...] = ()
    hedge: bool = False  # sent while an earlier attempt is in flight (``Policy.hedging``)


@dataclass(frozen=True, slots=True, kw_only=True)
class Wait:
    """Decision: nothing can be sent now, but a domain's probe is in flight: wait
    ``delay`` seconds, then ask again (the probe's answer may reopen the pool)."""

    delay: float
    events: tuple[Event, ...] = ()

    def __post_init__(self) -> None:
        if not (self.delay > 0 and math.isfinite(self.delay)):
            raise ValueError(f"Wait.delay must be finite and > 0, got {self.delay}")


STOP_REASONS = semconv.STOP_REASONS


@dataclass(frozen=True, slots=True, kw_only=True)
class Stop:
    """Decision: no further attempt. ``reason`` is ``done`` after a success or an
    answer, else why the plan gave up: ``exhausted``, ``deadline``,
    ``not_retryable``, ``retry_budget`` or ``circuit_open``."""

    reason: str
    events: tuple[Event, ...] = ()

    def __post_init__(self) -> None:
        if self.reason not in STOP_REASONS:
            raise ValueError(f"Stop.reason must be one of {sorted(STOP_REASONS)}, got {self.reason!r}")


class Ending(enum.Enum):
    """How a logical request ends, once the plan has stopped."""

    RESPONSE = "response"  # the last answer is returned (a success, an answer, or a final 5xx)
    STALE = "stale"  # every attempt failed (or ended in a server error): a stored response, marked stale
    FALLBACK = "fallback"  # every attempt failed: the user's fallback answers
    RAISE = "raise"  # every attempt failed: AllDomainsFailed or CircuitOpenError


# Read by every request, as a module global: see _breaker._CLOSED.
RESPONSE = Ending.RESPONSE

# The final answers a stored response may replace: RFC 5861 section 4 counts as an error
# "any situation that would result in a 500, 502, 503, or 504 HTTP response status code
# being returned", besides a request that got no answer at all.
STALE_IF_ERROR = frozenset({500, 502, 503, 504})


def stale_may_answer(status: int | None) -> bool:
    """May a stored response replace this end of the request (``status``: the final
    answer's, None when there is none)?"""
    return status is None or status in STALE_IF_ERROR


def ending(status: int | None, stale: bool, fallback: bool) -> Ending:
    """The end of a request: a stale copy (``stale``: one is servable) when there is no
    answer or the answer is a server error (:func:`stale_may_answer`); else the answer if
    there is one; else the fallback; else the error. The fallback rescues only a request
    that would raise: a final 5xx is an answer the caller may read."""
    if stale and stale_may_answer(status):
        return Ending.STALE
    if status is not None:
        return RESPONSE
    if fallback:
        return Ending.FALLBACK
    return Ending.RAISE
