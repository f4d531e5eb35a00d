"""The sans-I/O decision core of the failover client.

Rules and theory of operation
-----------------------------
The transports never decide anything. For each logical request they open a
:class:`RequestPlan` and loop::

    decision = plan.next(now)            # Attempt(domain, delay, timeout) or Stop(reason)
    ... wait decision.delay, send the attempt, classify what happened ...
    events = plan.record(outcome, now)   # breaker transitions, switches

Which domain: the pool's order for the configured region, restricted to the
domains that are enabled (remote control) and whose breaker admits a request.
Among those, domains not yet tried by this request come first (a retry goes to
the *next* domain), then domains without a recent failure (``sticky``: a domain
that failed within the breaker cooldown yields to the last one that worked,
which is how the client stays on the backup), then pool order. A domain whose
breaker cooldown is over ranks as healthy again, so the next request probes it:
that is the failback to the primary. An explicit :class:`ScheduleTable` names
the domain of each step by its rank at the start of the request instead.

Whether to retry: never after a success or an answer (4xx, application error);
never once the schedule's attempts are used up; never when request bytes may
have left and the request is not idempotent (or its body cannot be replayed);
never while the pool's retry budget is at or below half; never when the next
attempt could not start before the deadline. The first attempt is never
delayed. With exponential backoff, a failure before any byte reached a server
(DNS, refused, TLS handshake) moves to an untried domain at once: that adds no
load anywhere, like gRPC's transparent retries. Every other retry waits a full
jitter backoff, so clients that saw the same failure do not retry in lockstep;
a ``Retry-After`` (capped) lengthens the wait.

Everything is a value: decisions and records are named tuples, outcomes and
events frozen dataclasses. Time and randomness are arguments. The pool's lock is
held only while deciding and recording, never during I/O, so one slow domain never
blocks requests to another; a first attempt to a domain whose breaker is closed
takes no lock at all (choosing it only reads, and sending changes nothing).
"""

from __future__ import annotations

import random as _random
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

import httpx

from ._breaker import Breaker, BreakerState, BreakerTransition
from ._budget import TokenBucket
from ._classify import Outcome, OutcomeKind
from ._policy import ExponentialBackoff, Policy
from ._pool import Domain, Pool
from ._state import DomainState, PoolState, TransportState

if TYPE_CHECKING:
    from .control import ControlDocument

__all__ = [
    "Attempt",
    "AttemptRecord",
    "BreakerEvent",
    "BudgetRejected",
    "Event",
    "FailoverCore",
    "PoolCore",
    "RequestOptions",
    "RequestPlan",
    "Stop",
    "Switch",
]

# An attempt with less time than this before the deadline is not started.
MIN_ATTEMPT_TIME = 0.001

# Read on every request: a module global is a dict look-up, an enum member read
# through its class costs ten times more.
_CLOSED = BreakerState.CLOSED
_FAILURE = OutcomeKind.FAILURE
_THROTTLED = OutcomeKind.THROTTLED


# -- values ------------------------------------------------------------------------------


class AttemptRecord(NamedTuple):
    """What one attempt did: kept on results and errors, reported in telemetry."""

    number: int
    domain: str
    error_type: str | None
    status: int | None
    duration: float
    sent: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class BreakerEvent:
    pool: str
    domain: Domain
    before: BreakerState
    after: BreakerState


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


Event = BreakerEvent | Switch | BudgetRejected


# Decisions are named tuples: immutable values like the rest, and cheap enough to
# build on every request (a frozen dataclass costs several times more). On the hot
# path they are built with ``_new(Cls, (fields...))``: the ``__new__`` a NamedTuple
# generates is a Python function that does only this.
_new = tuple.__new__


class Attempt(NamedTuple):
    """Decision: send attempt ``number`` (1-based) to ``domain`` after ``delay`` seconds,
    with at most ``timeout`` seconds for it."""

    number: int
    domain: Domain
    delay: float
    timeout: float
    probe: bool
    events: tuple[Event, ...] = ()


class Stop(NamedTuple):
    """Decision: no further attempt. ``reason`` is ``done`` after a success or an
    answer, else why the plan gave up: ``exhausted``, ``deadline``,
    ``not_retryable``, ``retry_budget`` or ``circuit_open``."""

    reason: str
    events: tuple[Event, ...] = ()


_DONE = Stop(reason="done")


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestOptions:
    """The ``extensions={"failover": {...}}`` of one request, validated."""

    enabled: bool = True
    domain: str | None = None
    pool: str | None = None
    idempotent: bool | None = None

    @classmethod
    def from_extensions(cls, extensions: Mapping[str, object]) -> RequestOptions:
        raw = extensions.get("failover")
        if raw is None:
            return _DEFAULT_OPTIONS
        if not isinstance(raw, Mapping):
            raise TypeError('extensions["failover"] must be a dict such as {"enabled": False}')
        unknown = sorted(set(raw) - {"enabled", "domain", "pool", "idempotent"})
        if unknown:
            raise ValueError(
                f'extensions["failover"]: unknown option(s) {unknown}; '
                "expected enabled, domain, pool or idempotent"
            )
        for key, kind in (("enabled", bool), ("idempotent", bool), ("domain", str), ("pool", str)):
            if key in raw and not isinstance(raw[key], kind):
                raise TypeError(f'extensions["failover"]["{key}"] must be a {kind.__name__}')
        return cls(**raw)


_DEFAULT_OPTIONS = RequestOptions()


# -- one pool --------------------------------------------------------------------------------


class PoolCore:
    """The shared, mutable state of one pool: breakers, budget, serving domain."""

    def __init__(self, pool: Pool, policy: Policy, *, region: str | None) -> None:
        self.pool = pool
        self.name = pool.name
        self.policy = policy
        self.max_attempts = policy.max_attempts
        self.order: tuple[Domain, ...] = pool.order(region)
        self._position = {d: i for i, d in enumerate(self.order)}
        self.breakers = {
            d: Breaker(threshold=policy.breaker_threshold, cooldown=policy.breaker_cooldown)
            for d in pool.domains
        }
        self._in_order = tuple((d, self.breakers[d]) for d in self.order)
        self.budget = TokenBucket(policy.retry_budget) if policy.retry_budget else None
        self.disabled: frozenset[Domain] = frozenset()
        self.serving: Domain | None = None
        self.lock = threading.Lock()

    def _rank_key(self, domain: Domain, now: float, tried: Sequence[Domain]) -> tuple[int, int, int]:
        breaker = self.breakers[domain]
        recent = self.policy.sticky and breaker.recently_failed(now) and not breaker.probe_due(now)
        return (tried.count(domain), int(recent), self._position[domain])

    def best(self, now: float, tried: Sequence[Domain]) -> tuple[Domain, Breaker] | None:
        """The best admissible domain and its breaker. The common case, an untried
        healthy domain early in the order, returns without ranking them all."""
        disabled = self.disabled
        sticky = self.policy.sticky
        for member in self._in_order:
            domain, breaker = member
            if (disabled and domain in disabled) or (tried and domain in tried):
                continue
            if breaker.state is _CLOSED and not (
                sticky and breaker.last_failure_at is not None and breaker.recently_failed(now)
            ):
                return member
            break
        ranked = self.ranked(now, tried)
        return (ranked[0], self.breakers[ranked[0]]) if ranked else None

    def ranked(self, now: float, tried: Sequence[Domain] = ()) -> list[Domain]:
        """Admissible domains, best first (caller holds the lock)."""
        usable = [
            d for d in self.order if d not in self.disabled and self.breakers[d].admits(now)
        ]
        return sorted(usable, key=lambda d: self._rank_key(d, now, tried))

    def restore_serving(self, domain: Domain, now: float) -> None:
        """Resume on ``domain`` after a restart: the domains ahead of it count as
        recently failed for one cooldown, then the client fails back."""
        with self.lock:
            self.serving = domain
            for ahead in self.order[: self._position[domain]]:
                self.breakers[ahead].last_failure_at = now

    def snapshot(self, now: float) -> PoolState:
        with self.lock:
            return PoolState(
                name=self.name,
                domains=tuple(
                    DomainState(
                        domain=d.url,
                        breaker=self.breakers[d].state.value,
                        consecutive_failures=self.breakers[d].failures,
                        enabled=d not in self.disabled,
                        can_request=d not in self.disabled and self.breakers[d].admits(now),
                    )
                    for d in self.order
                ),
                sticky=self.serving.url if self.serving else None,
                budget_tokens=self.budget.tokens if self.budget else None,
            )


# -- one logical request -------------------------------------------------------------------


class RequestPlan:
    """The decisions for one logical request. Not shared between threads."""

    __slots__ = (
        "_attempt_timeout",
        "_failed_on",
        "_in_flight",
        "_in_flight_breaker",
        "_initial",
        "_max_attempts",
        "_random",
        "_ranks_live",
        "_tried",
        "core",
        "deadline_at",
        "done",
        "idempotent",
        "last_outcome",
        "may_resend",
        "method",
        "pinned",
        "policy",
        "records",
        "replayable",
        "started_at",
    )

    def __init__(
        self,
        core: PoolCore,
        method: str,
        idempotent: bool,
        replayable: bool,
        pinned: Domain | None,
        now: float,
        random: Callable[[], float],
    ) -> None:
        self.core = core
        self.policy = core.policy
        self.method = method
        self.idempotent = idempotent
        self.replayable = replayable
        self.pinned = pinned
        self.started_at = now
        self.deadline_at = now + self.policy.deadline
        self._max_attempts = core.max_attempts
        self._attempt_timeout = self.policy.attempt_timeout
        self._random = random
        self.records: list[AttemptRecord] = []
        self._tried: list[Domain] = []  # in order; list look-ups compare identity first
        self._in_flight: Attempt | None = None
        self._in_flight_breaker: Breaker | None = None
        self.last_outcome: Outcome | None = None  # of the latest attempt
        # Could this request be sent again after its bytes left?
        self.may_resend = idempotent and replayable and self._max_attempts > 1
        self._failed_on: tuple[Domain, str] | None = None
        self.done = False  # an attempt ended the request (a success or an answer)
        # With backoff, each attempt takes the best domain at that moment; a pinned
        # request has one candidate; a table names domains by their rank at the start.
        backoff = isinstance(self.policy.schedule, ExponentialBackoff)
        self._ranks_live = backoff and pinned is None
        self._initial: list[Domain] = []
        if not backoff:
            with core.lock:
                self._initial = self._candidates(now)

    @property
    def pool(self) -> str:
        return self.core.name

    def _candidates(self, now: float) -> list[Domain]:
        core = self.core
        if self.pinned is not None:
            return [self.pinned] if core.breakers[self.pinned].admits(now) else []
        return core.ranked(now, self._tried)

    # -- next -------------------------------------------------------------------------

    def next(self, now: float) -> Attempt | Stop:
        """What to do now: another attempt, or stop (and why)."""
        if self._in_flight is not None:
            raise RuntimeError(
                f"attempt {self._in_flight.number} is in flight: record its outcome first"
            )
        if self.done:
            return _DONE
        number = len(self.records) + 1
        if number > self._max_attempts:
            return Stop(reason="exhausted")
        core = self.core
        if number == 1 and self._ranks_live:
            # The common case needs no lock: choosing only reads, and sending to a
            # closed breaker changes nothing in it.
            best = core.best(now, ())
            timeout = self._timeout(now)
            if best is not None and best[1].state is _CLOSED and timeout >= MIN_ATTEMPT_TIME:
                return self._start(number, best, 0.0, timeout, False, ())
        events: list[Event] = []
        with core.lock:
            if number > 1:
                refusal = self._refuse_retry(events)
                if refusal is not None:
                    return Stop(reason=refusal, events=tuple(events))
            chosen = self._choose(number, now)
            if chosen is None:
                return Stop(reason="circuit_open" if number == 1 else "exhausted")
            domain, breaker = chosen
            delay = 0.0 if number == 1 else self._delay(number, now, domain)
            timeout = self._timeout(now + delay)
            if timeout < MIN_ATTEMPT_TIME:
                return Stop(reason="deadline")
            if breaker.state is _CLOSED:  # acquire() would change nothing
                probe = False
            else:
                probe, transition = breaker.acquire(now + delay)
                self._add_transition(events, domain, transition)
        return self._start(number, chosen, delay, timeout, probe, tuple(events) if events else ())

    def _timeout(self, start: float) -> float:
        """The time an attempt starting at ``start`` may take: to the deadline, capped
        by the per-attempt timeout."""
        timeout = self.deadline_at - start
        if self._attempt_timeout is not None and self._attempt_timeout < timeout:
            return self._attempt_timeout
        return timeout

    def _start(
        self,
        number: int,
        member: tuple[Domain, Breaker],
        delay: float,
        timeout: float,
        probe: bool,
        events: tuple[Event, ...],
    ) -> Attempt:
        domain, self._in_flight_breaker = member
        attempt = _new(Attempt, (number, domain, delay, timeout, probe, events))
        self._in_flight = attempt
        self._tried.append(domain)
        return attempt

    def _refuse_retry(self, events: list[Event]) -> str | None:
        last = self.last_outcome
        assert last is not None
        if last.sent and not (self.idempotent and self.replayable):
            return "not_retryable"
        budget = self.core.budget
        if budget is not None and not budget.allows_retry():
            events.append(BudgetRejected(pool=self.pool))
            return "retry_budget"
        return None

    def _choose(self, number: int, now: float) -> tuple[Domain, Breaker] | None:
        if self._ranks_live:
            return self.core.best(now, self._tried)
        domain = self._choose_named(number, now)
        return None if domain is None else (domain, self.core.breakers[domain])

    def _choose_named(self, number: int, now: float) -> Domain | None:
        """The pinned domain, or the one the schedule's table names for this step."""
        candidates = self._candidates(now)
        if not candidates or not self._initial:
            return candidates[0] if candidates else None
        schedule = self.policy.schedule
        assert not isinstance(schedule, ExponentialBackoff)
        wanted = schedule.steps[number - 1].domain % len(self._initial)
        for offset in range(len(self._initial)):
            domain = self._initial[(wanted + offset) % len(self._initial)]
            if domain in candidates:
                return domain
        return candidates[0]

    def _delay(self, number: int, now: float, domain: Domain) -> float:
        if number == 1:
            return 0.0
        schedule = self.policy.schedule
        last = self.last_outcome
        if isinstance(schedule, ExponentialBackoff):
            if last is not None and not last.sent and domain not in self._tried:
                # Transparent failover: nothing reached a server, so moving to a
                # domain this request has not tried adds no load anywhere.
                return 0.0
            delay = schedule.delay(number - 1, self._random)
        else:
            delay = max(0.0, self.started_at + schedule.offset(number - 1, self._random) - now)
        if last is not None and last.retry_after is not None:
            delay = max(delay, min(last.retry_after, self.policy.retry_after_cap))
        return delay

    # -- record -----------------------------------------------------------------------

    def record(self, outcome: Outcome, now: float, duration: float) -> tuple[Event, ...]:
        """Report what the attempt in flight did; returns the events it caused."""
        attempt, breaker = self._in_flight, self._in_flight_breaker
        if attempt is None or breaker is None:
            raise RuntimeError("no attempt is in flight: call next() first")
        self._in_flight = self._in_flight_breaker = None
        self.records.append(
            _new(
                AttemptRecord,
                (attempt.number, attempt.domain.url, outcome.error_type, outcome.status, duration, outcome.sent),
            )
        )
        self.last_outcome = outcome
        events: list[Event] = []
        core = self.core
        domain = attempt.domain
        lock = core.lock
        lock.acquire()  # not `with`: its protocol costs more than the rest of this block
        try:
            if outcome.kind is _FAILURE:
                transition = breaker.failure(now, probe=attempt.probe)
                if core.budget is not None:
                    core.budget.failure()
                self._failed_on = (domain, outcome.error_type or "failure")
            else:
                transition = breaker.success(now, probe=attempt.probe)
                if core.budget is not None:
                    if outcome.kind is _THROTTLED:
                        core.budget.failure()
                    else:
                        core.budget.success()
            if transition is not None:
                self._add_transition(events, domain, transition)
            if not outcome.retryable:
                self.done = True
                if core.serving is not domain:
                    self._note_serving(domain, events)
        finally:
            lock.release()
        return tuple(events) if events else ()

    def abandon(self, now: float) -> tuple[Event, ...]:
        """The attempt in flight ended without an outcome (cancelled, or an error that
        says nothing about the domain): release its probe, count nothing."""
        attempt, breaker = self._in_flight, self._in_flight_breaker
        if attempt is None or breaker is None:
            return ()
        self._in_flight = self._in_flight_breaker = None
        self._tried.remove(attempt.domain)
        events: list[Event] = []
        with self.core.lock:
            transition = breaker.abandon(now, probe=attempt.probe)
            self._add_transition(events, attempt.domain, transition)
        self.done = True
        return tuple(events)

    def _note_serving(self, domain: Domain, events: list[Event]) -> None:
        core = self.core
        before = core.serving
        core.serving = domain
        if before is None or before == domain:
            return
        if self._failed_on is not None and self._failed_on[0] == before:
            reason = self._failed_on[1]
        elif core._position[domain] < core._position[before]:
            reason = "failback"
        else:
            reason = "preferred_unavailable"
        events.append(Switch(pool=self.pool, before=before, after=domain, reason=reason))

    def _add_transition(
        self, events: list[Event], domain: Domain, transition: BreakerTransition | None
    ) -> None:
        if transition is not None:
            events.append(
                BreakerEvent(
                    pool=self.pool, domain=domain, before=transition.before, after=transition.after
                )
            )


# -- every pool ------------------------------------------------------------------------------


class FailoverCore:
    """All pools of one transport, and the request routing between them."""

    def __init__(
        self,
        pools: Sequence[Pool],
        policy: Policy | Mapping[str, Policy] | None = None,
        *,
        region: str | None = None,
        random: Callable[[], float] = _random.random,
    ) -> None:
        if isinstance(pools, Pool):
            pools = [pools]
        if not pools:
            raise ValueError("FailoverTransport needs at least one Pool")
        names = [p.name for p in pools]
        if len(set(names)) != len(names):
            raise ValueError(f"pool names must be unique, got {names}")
        seen: dict[Domain, str] = {}
        for p in pools:
            for d in p.domains:
                if d in seen:
                    raise ValueError(f"domain {d} is in pools {seen[d]!r} and {p.name!r}")
                seen[d] = p.name
        policies = self._policies(policy, names)
        self.pools: dict[str, PoolCore] = {
            p.name: PoolCore(p, policies[p.name], region=region) for p in pools
        }
        self._by_domain = {d: self.pools[name] for d, name in seen.items()}
        # (scheme, host, port) as httpx.URL gives them (a default port is None)
        self._by_origin = {(d.scheme, d.host, d.port): (d, pc) for d, pc in self._by_domain.items()}
        self.random = random
        self.control_version: int | None = None
        self._control_lock = threading.Lock()

    @staticmethod
    def _policies(policy: Policy | Mapping[str, Policy] | None, names: list[str]) -> dict[str, Policy]:
        if policy is None or isinstance(policy, Policy):
            shared = policy or Policy()
            return {n: shared for n in names}
        unknown = sorted(set(policy) - set(names))
        if unknown:
            raise ValueError(f"policy given for unknown pool(s) {unknown}")
        for name, value in policy.items():
            if not isinstance(value, Policy):
                raise TypeError(f"policy for pool {name!r} must be a Policy")
        return {n: policy.get(n) or Policy() for n in names}

    def route(
        self, url: httpx.URL, options: RequestOptions
    ) -> tuple[PoolCore, Domain | None, Domain | None] | None:
        """The pool a request belongs to, its pinned domain, and the domain its URL
        already points at (if any), or None when the request passes through."""
        if not options.enabled:
            return None
        if options.domain is not None:
            try:
                pinned = Domain.parse(options.domain)
            except ValueError as exc:
                raise ValueError(f'extensions["failover"]["domain"]: {exc}') from None
            pool_core = self._by_domain.get(pinned)
            if pool_core is None:
                raise ValueError(f"pinned domain {pinned} is not in any pool")
            return pool_core, pinned, self._origin(url)
        if options.pool is not None:
            pool_core = self.pools.get(options.pool)
            if pool_core is None:
                raise ValueError(f"unknown pool {options.pool!r}; pools are {sorted(self.pools)}")
            return pool_core, None, self._origin(url)
        found = self._find(url)
        if found is None:
            return None
        origin, pool_core = found
        return pool_core, None, origin

    def _origin(self, url: httpx.URL) -> Domain | None:
        found = self._find(url)
        return None if found is None else found[0]

    def _find(self, url: httpx.URL) -> tuple[Domain, PoolCore] | None:
        """The domain ``url`` points at, and its pool."""
        scheme, host, port = url.scheme, url.host, url.port
        found = self._by_origin.get((scheme, host, port))
        if found is None and host.endswith("."):  # a fully qualified name
            found = self._by_origin.get((scheme, host.rstrip("."), port))
        return found

    def begin(
        self,
        pool_core: PoolCore,
        method: str,
        headers: httpx.Headers,
        options: RequestOptions,
        replayable: bool,
        pinned: Domain | None,
        now: float,
    ) -> RequestPlan:
        method = method.upper()
        if options.idempotent is not None:
            idempotent = options.idempotent
        else:
            idempotent = method in pool_core.policy.idempotent_methods or "idempotency-key" in headers
        # positional: this runs on every request
        return RequestPlan(pool_core, method, idempotent, replayable, pinned, now, self.random)

    def state(self, now: float) -> TransportState:
        return TransportState(
            pools={name: pc.snapshot(now) for name, pc in self.pools.items()},
            control_version=self.control_version,
        )

    def apply_control(self, doc: ControlDocument) -> None:
        """Apply a verified control document, or raise ``ControlError`` and change nothing."""
        with self._control_lock:
            doc.check([pc.pool for pc in self.pools.values()], self.control_version)
            # Pools the document names get exactly its disabled set (the others of
            # the pool are enabled again); pools it does not name are left alone.
            disabled = {
                name: frozenset(Domain.parse(url) for url in urls)
                for name, urls in doc.disabled.items()
            }
            for name, domains in disabled.items():
                pool_core = self.pools[name]
                with pool_core.lock:
                    pool_core.disabled = domains
            self.control_version = doc.version

