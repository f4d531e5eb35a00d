"""The values of the request path: a request's options, decisions, events and attempt records.

Everything here is immutable and validated when built (h11's ``_events.py``
style): a decision is a value the transports carry out, never a side effect.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from . import semconv
from ._suggest import did_you_mean

if TYPE_CHECKING:
    from ._breaker import Breaker, BreakerState
    from ._classify import Outcome
    from ._pool import Domain

__all__ = [
    "DEFAULT_OPTIONS",
    "Attempt",
    "AttemptRecord",
    "BreakerEvent",
    "BudgetRejected",
    "Ending",
    "Event",
    "HedgeThrottled",
    "RequestOptions",
    "SlowCall",
    "Stop",
    "Switch",
    "Wait",
    "WholeOnly",
    "new_attempt",
]


class WholeOnly(int):
    """A reading limit (``PoolCore.reading``) that reads a body only whole: one of declared
    length within it and not encoded, whose bytes are its content. That of a request the
    pool may not send again, whose body the transport reads so that the client's own read
    is a look-up (``Lane.read_whole``: the process time an OpenAI call through the transport
    adds went from 46 µs to 25 µs, interleaved in one process); a body it would have to
    count (chunked, encoded) it hands over unread, as nothing could fail over from its
    break. An ``int``: it compares with a
    length as one, and only the counting branches of ``Lane.reads`` look at its class."""

    __slots__ = ()


# Builds a named tuple from a tuple of all its fields, without the named tuple's
# Python-level ``__new__``: 150 ns against 370 ns on CPython 3.11 (timeit), for the
# values every request builds (AttemptRecord, FailoverResult).
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


class Attempt:
    """One attempt, from the core's decision to its end: the one record of it.

    The core decides it (send attempt ``number``, 1-based, to ``domain`` after
    ``delay`` seconds, with at most ``timeout`` seconds for it; ``probe``: it holds
    the domain's probe lease; ``events``: what deciding it caused; ``hedge``: sent
    while an earlier attempt is in flight). The exchange puts it on the wire
    (``request``, its ``span`` and the context it runs in, ``quiet``; a race marks
    ``sending`` once an attempt it may cut is handed to the network). The core records its end (``outcome``: what
    it was classified as, of which its record keeps the error type, the status and
    whether bytes may have reached the domain; ``duration``; ``race``:
    how it ended beside another, see :class:`AttemptRecord`), and
    :meth:`report` is what results and errors keep of it.

    ``sent_at`` is when it goes out (the decision's time plus its delay, the one
    clock read it costs); it is out of time at ``sent_at + timeout``, worked out where
    that is armed (the sync watchdog, the thread race) and not kept. Mutable, where the
    other decisions are frozen: it is built once per attempt and then filled in by
    the layer that learns each fact, so no fact is kept twice. The stateful tests
    check its invariants."""

    # What is learnt later, or only for some attempts, starts as a class attribute (as in
    # ``RequestPlan``): :func:`new_attempt` sets the decision's six fields and the three
    # every attempt reads (quiet, hedge, race); a probe, a hedge or one that caused events one more; the
    # layers that learn the rest set those they learn. (Hence no ``__slots__``: with them,
    # every field is set for every attempt.)
    probe = False
    events: tuple[Event, ...] = ()
    hedge = False
    request: Any  # the httpx.Request it sends, set by the exchange
    span: Any = None  # with telemetry: its CLIENT span, and the context to send it in
    quiet: Any = None
    sending = False  # handed to the inner transport (marked by a race: a cut one then counts as sent)
    raced = False  # it ran beside another (a hedge always does)
    outcome: Outcome  # set when it ends (a cut one's: _plan._CUT)
    duration = 0.0
    race: str | None = None
    head_came = False  # its answer's head came, and the body's read then failed (set by the loop)
    response: Any = None  # its answer, once its headers came (a sync one's: the watchdog cuts its socket)
    # Did it go out on a new connection (True) or a kept-alive one (False)? None: not known.
    # Asked only of the resend of a dropped request (``Exchange.prepare``), whose inner
    # transport tells it through httpx's ``trace`` extension (httpcore's events).
    new_connection: bool | None = None
    # How long the client itself held it up, per the kernel (``waited``, made at its end
    # for a call that looks slow: ``Exchange._client_held``): before its request's last
    # byte left, less what its connection's set-up may have taken the domain
    # (``before``), and after its answer's last bytes came (``came_at``) or the loop
    # closed the body it read (``closed_at``). What the kernel is asked about, in a pool
    # with ``SlowCalls`` (``Exchange.reads``): the socket, and the connection's count of
    # its requests as the answer's head came (``_sockets.connection``, ``carried``).
    sock: Any = None
    connection: Any = None
    carried = 0
    closed_at: float | None = None
    came_at: float | None = None
    before = 0.0
    waited = 0.0

    # The decision's six, set by :func:`new_attempt`, which makes every attempt.
    number: int
    domain: Domain
    breaker: Breaker  # the domain's
    delay: float
    timeout: float
    sent_at: float

    def report(self) -> AttemptRecord:
        """What the result or the error keeps of this attempt, once it ended. Its fields
        read one by one: an ``operator.attrgetter`` of them, dotted names and all, took
        twice as long (300 against 200 ns, timeit), and every request reports its attempts."""
        outcome = self.outcome
        return new_tuple(
            AttemptRecord,
            (self.number, self.domain.url, outcome.error_type, outcome.status, self.duration, outcome.sent,
             self.hedge, self.race),
        )  # fmt: skip

    def __repr__(self) -> str:
        return f"<Attempt {self.number} on {self.domain} in {self.delay:.3f} s{' (probe)' if self.probe else ''}>"


def new_attempt(number: int, domain: Domain, breaker: Breaker, delay: float, timeout: float, sent_at: float) -> Attempt:
    """A new :class:`Attempt`: the core's decision (see its fields). A function, where an
    ``Attempt.__init__`` would be the obvious home: a class's ``__init__`` runs in a frame
    the interpreter enters from C (``slot_tp_init``), and CPython 3.11 cannot run that one
    inline, as it runs this function's. The class has no ``__init__``, so ``Attempt()`` is
    made in C alone. Every request makes one (``PoolCore.first_attempt``)."""
    attempt = Attempt()
    attempt.number = number
    attempt.domain = domain
    attempt.breaker = breaker
    attempt.delay = delay
    attempt.timeout = timeout
    attempt.sent_at = sent_at
    # Read of every attempt, so set on each: a class's attribute read through an instance
    # is a full look-up at each read on CPython 3.11 (never specialised)
    attempt.quiet = None
    attempt.hedge = False
    attempt.race = None
    return attempt


def reports(attempts: Iterable[Attempt]) -> tuple[AttemptRecord, ...]:
    """``attempt.report()`` of each of ``attempts``."""
    return tuple(map(Attempt.report, attempts))


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


# -- a request's options ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestOptions:
    """The ``extensions={"failover": {...}}`` of one request, validated."""

    enabled: bool = True
    domain: str | None = None
    pool: str | None = None
    idempotent: bool | None = None
    affinity: str | None = None  # a key (user id) hashed onto the pool's affinity domains
    order: str | None = None  # a named order of the pool (its ``region_order``)
    hedge: bool = True  # False: never hedge this request (``Policy.hedging``)

    @classmethod
    def from_extensions(cls, extensions: Mapping[str, object]) -> RequestOptions:
        raw = extensions.get("failover")
        if raw is None:
            return DEFAULT_OPTIONS
        if not isinstance(raw, Mapping):
            raise TypeError('extensions["failover"] must be a dict such as {"enabled": False}')
        unknown = sorted(set(raw) - _OPTION_TYPES.keys())
        if unknown:
            close = did_you_mean(unknown[0], _OPTION_TYPES) if len(unknown) == 1 else None
            raise ValueError(
                f'extensions["failover"]: unknown option(s) {unknown}; '
                + (f"did you mean {close!r}? " if close else "")
                + "expected enabled, domain, pool, idempotent, affinity, order or hedge"
            )
        for key, kind in _OPTION_TYPES.items():
            if key in raw and not isinstance(raw[key], kind):
                raise TypeError(f'extensions["failover"]["{key}"] must be a {kind.__name__}')
        return cls(**raw)


_OPTION_TYPES: dict[str, type] = {
    "enabled": bool,
    "idempotent": bool,
    "domain": str,
    "pool": str,
    "affinity": str,
    "order": str,
    "hedge": bool,
}
DEFAULT_OPTIONS = RequestOptions()
