"""The sans-I/O decision core of the failover client.

Rules and theory of operation
-----------------------------
The transports never decide anything. For each logical request they open a
:class:`RequestPlan` and loop::

    decision = plan.next(now)            # Attempt(domain, delay, timeout) or Stop(reason)
    ... wait decision.delay, send the attempt, classify what happened ...
    events = plan.record(outcome, now)   # breaker transitions, switches

Which domain next (:meth:`PoolCore.choose`, the only place that decides it).
Every enabled domain has a *standing*, read off its breaker (see ``_breaker.py``):
HEALTHY, DUE, SUSPECT, PROBING, OPEN or RESTING. Then, in this order:

1. Among the admissible domains (HEALTHY, DUE, SUSPECT), the best is the first
   by ``(tried by this request, SUSPECT, pool position)``: an untried domain
   before a tried one, a working one before a suspect one, then pool order.
   Choosing a DUE domain takes its probe lease, so one request probes it and
   everybody else keeps using the domain that works. With shared health
   (``PoolCore.lease``) that lease is the fleet's: when another process holds
   it, the domain is PROBING here too and the choice is made again.
2. If the best was already tried by this request (or there is none) and some
   domain is OPEN, one is probed early (untried first, then the one whose
   cooldown ends first; its probe lease, so never more than one such attempt in
   flight), at most once per request. This is the availability-first rule for
   "every other domain is out": the pool recovers the moment a domain answers
   again, not a whole cooldown later.
3. Else, if a domain this request has not tried is being probed, the request
   waits for that probe (``Wait``: polls of a few milliseconds,
   ``Policy.probe_wait`` in all) rather than go back to a domain that just
   failed it.
4. Else the best tried domain is tried again (after a backoff).
5. With nothing admissible it waits in the same way for a probe in flight, or
   for the moment an open domain may be probed early (an open domain rests a
   tenth of its cooldown first), if that comes within its wait. Otherwise it
   stops with ``circuit_open`` (before any attempt) or ``exhausted``, and the
   fallback answers.

So when every domain is open a pool has at most one probe in flight per domain
and at most one early probe per domain per tenth of a cooldown, a logical
request makes at most one attempt, and requests that arrive while a probe is
out get its answer instead of an error. With the default 30 s cooldown the rest
(3 s) is longer than ``probe_wait`` (1 s), so in a total outage requests fail
fast, and the fallback answers.

The rule walks an *order*: the pool's (``Pool.order(region)``) unless the request
is steered (``_steering.py``). Each request's orders are fixed once, when its
plan is made (:meth:`PoolCore.steer`, from the request's options, the Unix time
and a draw of the random source): a named order (``"order"``) or the current time
window's order replaces the pool's for the whole request; a weight draw and the
affinity key's rendezvous ranking of the affinity domains go in front of it for
the first attempt only, so the rule above skips an open canary or gateway like any
other domain, and after the first attempt the request fails over in that order.
A request nothing steers walks the pool's precomputed order at no cost. Steered
requests (but for time windows, which move everyone) leave the serving domain
and its switches to the pool's own traffic.

A pinned request has one candidate; an explicit :class:`ScheduleTable` names
the domain of each step by its rank at the start of the request (the first
attempt's first admissible domain, then the rest in the request's order), and
falls back to the rule above when that domain is not admissible.

Whether to retry: never after a success or an answer (4xx, application error);
never once the schedule's attempts are used up; never when request bytes may
have left and the request is not idempotent (or its body cannot be replayed);
never when the next attempt could not start before the deadline. A failure that
sent nothing (DNS, refused, TLS handshake, connect timeout) moves to an untried
domain at once: it costs no retry budget, does not count against the schedule's
attempts, and is never refused (gRPC's transparent retries). Every other retry
needs the pool's retry budget (``_budget.py``), which charges only failed
retries. Moving on to an untried domain, and a probe, go at once; going back to
a domain this request already tried waits a full-jitter backoff (lengthened by
that server's capped ``Retry-After``), so returns to a struggling server are
spread out. A :class:`ScheduleTable` is followed as written.

Hedging (``Policy.hedging``, see ``_slowness.py`` and ``_race.py``): while a
hedgeable request (idempotent, replayable, not turned off) has attempts in
flight, :meth:`RequestPlan.hedge` may add one, to the first domain of its order
that it has not tried, if that one is HEALTHY (never an open domain, never a due
probe, never a suspect one: it failed within its cooldown), if the pool's throttle has a
token, at most ``max_extra`` per request. A hedge costs no retry budget and no
schedule attempt. Attempts in flight are recorded by number; once one answers,
the others are cancelled (:meth:`RequestPlan.cancel`): their breakers count
nothing, a probe's lease is released. Slow calls (``Policy.slow_calls``): every
recorded attempt enters its domain's window; when the slow share reaches the
rate the breaker opens (``slow_calls``), and a probe that answers slowly fails;
both only while another domain is faster (``PoolCore.faster_elsewhere``).

The first attempt is never delayed. Time and randomness are arguments. The
pool's lock is held only while deciding and recording, never during I/O, so a
slow domain never blocks requests to another.
"""

from __future__ import annotations

import math
import random as _random
import threading
import time as _time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import httpx

from . import _steering, semconv
from ._breaker import Breaker, BreakerState, BreakerTransition, Standing
from ._budget import TokenBucket
from ._classify import Outcome
from ._decisions import (
    Attempt,
    BreakerEvent,
    BudgetRejected,
    Event,
    HedgeThrottled,
    SlowCall,
    Stop,
    Switch,
    Wait,
)
from ._policy import ExponentialBackoff, Policy, ScheduleTable
from ._pool import Domain, Pool
from ._slowness import UNKNOWN_DELAY, HedgeThrottle, LatencyWindow, SlowCallWindow
from ._snapshot import DomainState, PoolState, TransportState
from ._steering import key_unit, rendezvous_rank

if TYPE_CHECKING:
    from .control import ControlDocument

__all__ = [
    "DONE",
    "Choice",
    "FailoverCore",
    "Members",
    "Orders",
    "PoolCore",
    "RequestOptions",
    "RequestPlan",
]

# An attempt with less time than this before the deadline is not started.
MIN_ATTEMPT_TIME = 0.001

DONE = Stop(reason=semconv.STOP_DONE)

# ``failover.reason`` of a breaker transition that slow calls caused.
_SLOW = semconv.BREAKER_REASON_SLOW_CALLS

# Polls while waiting for another request's probe: 2 ms, doubling, at most 50 ms.
_FIRST_WAIT = 0.002
_LONGEST_WAIT = 0.05


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
            return _DEFAULT_OPTIONS
        if not isinstance(raw, Mapping):
            raise TypeError('extensions["failover"] must be a dict such as {"enabled": False}')
        unknown = sorted(set(raw) - _OPTION_TYPES.keys())
        if unknown:
            raise ValueError(
                f'extensions["failover"]: unknown option(s) {unknown}; '
                "expected enabled, domain, pool, idempotent, affinity, order or hedge"
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
_DEFAULT_OPTIONS = RequestOptions()


# The pool's answer to "which domain next": the domain, its breaker, whether the
# attempt takes the domain's probe lease, and whether that is an early probe (before
# the cooldown is over). A plain tuple, as one is built for every request: a named
# tuple costs 330 ns to build on CPython 3.11, a tuple 10 ns (timeit).
Choice = tuple[Domain, Breaker, bool, bool]

# An order the choice walks: (position in that order, domain, its breaker) per domain.
Members = tuple[tuple[int, Domain, Breaker], ...]
# A request's orders: its first attempt's, the one after that, and why the first
# differs from the pool's (a ``_steering.*`` value, or None).
Orders = tuple[Members, Members, str | None]


# -- one pool --------------------------------------------------------------------------------


class PoolCore:
    """The shared, mutable state of one pool: breakers, budget, serving domain."""

    def __init__(self, pool: Pool, policy: Policy, *, region: str | None) -> None:
        self.pool = pool
        self.name = pool.name
        self.policy = policy
        self.max_attempts = policy.max_attempts
        self.resends = policy.max_attempts > 1  # may a request be sent again at all?
        # A table is followed as written (no transparent moves); it names domains by
        # their rank at the start of the request.
        self.table = policy.schedule if isinstance(policy.schedule, ScheduleTable) else None
        self.order: tuple[Domain, ...] = pool.order(region)
        self.position = {d: i for i, d in enumerate(self.order)}
        self.breakers = {
            d: Breaker(threshold=policy.breaker_threshold, cooldown=policy.breaker_cooldown)
            for d in pool.domains
        }
        self._members = self._walk(self.order)
        # What a request walks when nothing steers it: one shared value, no work.
        self.orders: Orders = (self._members, self._members, None)
        # Traffic steering (``_steering.py``); ``steers`` says whether begin() must look.
        self.named = {name: self._walk(order) for name, order in pool.region_order.items()}
        self.weights = pool.weights
        self.affinity = pool.affinity_domains
        self._affinity_urls = tuple(d.url for d in pool.affinity_domains)
        self.time_orders = tuple((window, self._walk(order)) for window, order in pool.time_orders)
        self.steers = bool(self.weights or self.affinity or self.time_orders)
        self.budget = TokenBucket(policy.retry_budget) if policy.retry_budget else None
        # How much of a 2xx body a request reads before its outcome is known: for the
        # app-error check, and so that a re-sendable request whose connection breaks
        # mid-body fails over; and for the stale cache (GET only).
        self.read_limit = (
            policy.read_body_max_bytes if policy.is_app_error is not None or policy.read_body else 0
        )
        self.app_check = policy.is_app_error is not None
        self.stale_limit = policy.stale_max_bytes if policy.stale_on_failure else 0
        # What a request reads of a 2xx body before its outcome is known, by whether it may
        # be re-sent and is a GET: (bytes at most, whether the exchange looks at them, and
        # whether the stale cache stores and serves it). All of a small body, for the
        # app-error check, the stale cache (GET only), and so that a re-sendable request
        # whose connection breaks mid-body fails over.
        self.reading: dict[tuple[bool, bool], tuple[int, bool, bool]] = {}
        for resendable in (False, True):
            for get in (False, True):
                stale = policy.stale_on_failure and get
                read = self.read_limit if resendable or self.app_check else 0
                limit = max(read, self.stale_limit) if stale else read
                self.reading[resendable, get] = (limit, stale or self.app_check, stale)
        # Slow domains (``_slowness.py``): the hedge throttle, each domain's latency
        # (for an adaptive hedge delay) and slow calls. None: not configured, no cost.
        hedging = policy.hedging
        self.hedging = hedging
        self.throttle = HedgeThrottle(hedging) if hedging is not None else None
        self.latency = (
            {d: LatencyWindow() for d in pool.domains} if hedging is not None and hedging.delay is None else None
        )
        slow_calls = policy.slow_calls
        self.slow_calls = {d: SlowCallWindow(slow_calls) for d in pool.domains} if slow_calls is not None else None
        self.disabled: frozenset[Domain] = frozenset()
        self.serving: Domain | None = None
        self.serving_since = -math.inf  # when ``serving`` last changed (monotonic seconds)
        self.lock = threading.Lock()
        # Shared health (``pytest_failover.shared``): the fleet's probe lease, asked
        # under the lock before a probe is sent; False means another process holds it
        # (the breaker is then PROBING here too). None: not shared, no cost.
        self.lease: Callable[[Domain, Breaker, float, float], bool] | None = None

    def _walk(self, order: Sequence[Domain]) -> Members:
        return tuple((i, d, self.breakers[d]) for i, d in enumerate(order))

    def standing(self, domain: Domain, now: float) -> Standing:
        return self.breakers[domain].standing(now, sticky=self.policy.sticky)

    def steer(self, options: RequestOptions, wall: float | None, draw: Callable[[], float]) -> Orders:
        """The orders one request walks (see :data:`Orders`): a named order or the time
        window's replaces the pool order; a weight draw (``draw()``, or the affinity
        key's fixed one) and the affinity key's rendezvous ranking go first on the
        first attempt. ``wall`` is the Unix time, for the time windows."""
        base = self._members
        why: str | None = None
        if options.order is not None:
            named = self.named.get(options.order)
            if named is None:
                raise ValueError(
                    f'extensions["failover"]["order"]: pool {self.name!r} has no order '
                    f"{options.order!r}; its orders (region_order) are {sorted(self.named)}"
                )
            base, why = named, _steering.ORDER
        elif self.time_orders and wall is not None:
            minute = self.time_orders[0][0].local_minute(wall)  # one time zone per pool
            for window, members in self.time_orders:
                if window.covers_minute(minute):
                    base, why = members, _steering.TIME_ORDER
                    break
        key = options.affinity
        picks: list[Domain] = []
        unsteered = why  # the order's own reason, if the picks change nothing
        if self.weights:
            point = 100 * (key_unit(key) if key is not None else draw())
            for domain, share in self.weights:
                if point < share:
                    picks.append(domain)
                    why = _steering.WEIGHT
                    break
                point -= share
        if key is not None and self.affinity:
            picks.extend(self.affinity[i] for i in rendezvous_rank(key, self._affinity_urls))
            if why != _steering.WEIGHT:
                why = _steering.AFFINITY
        if not picks:
            return base, base, why
        first = dict.fromkeys(picks)
        first.update(dict.fromkeys(d for _, d, _ in base))
        order = tuple(first)
        if order == tuple(d for _, d, _ in base):  # e.g. the weighted domain is the primary
            return base, base, unsteered
        return self._walk(order), base, why

    def choose(self, now: float, tried: Sequence[Domain], members: Members, early: bool = True) -> Choice | None:
        """Which domain next, walking ``members`` (the request's order), for a request
        that already tried ``tried`` (the module's rule; the caller holds the lock)."""
        best: tuple[tuple[bool, bool, int], Domain, Breaker, Standing] | None = None
        earliest: tuple[tuple[bool, float], Domain, Breaker] | None = None
        sticky = self.policy.sticky
        disabled = self.disabled
        for position, domain, breaker in members:
            if disabled and domain in disabled:
                continue
            standing = breaker.standing(now, sticky)
            if not standing.admissible:
                if standing.early and early:
                    # untried first, then the one whose cooldown ends first
                    key = (domain in tried, breaker.open_until)
                    if earliest is None or key < earliest[0]:
                        earliest = (key, domain, breaker)
                continue
            again = domain in tried
            if not again and not standing.suspect:
                # untried and working: nothing later in the order ranks higher
                return domain, breaker, standing.lease, False
            rank = (again, standing.suspect, position)
            if best is None or rank < best[0]:
                best = (rank, domain, breaker, standing)
        if best is not None and (not best[0][0] or earliest is None):
            _, domain, breaker, standing = best
            return domain, breaker, standing.lease, False
        if earliest is not None:
            _, domain, breaker = earliest
            return domain, breaker, True, True
        return None

    def hedge_delay(self, domain: Domain) -> float:
        """How long a request on ``domain`` waits for an answer before it hedges: the
        fixed delay, or the domain's latency at the percentile (read under the lock,
        which the caller must not hold)."""
        hedging = self.hedging
        assert hedging is not None
        if hedging.delay is not None:
            return hedging.delay
        assert self.latency is not None
        with self.lock:
            observed = self.latency[domain].percentile(hedging.percentile)
        return UNKNOWN_DELAY if observed is None else observed

    def enabled(self) -> Iterator[tuple[Domain, Breaker]]:
        """The domains the control document leaves enabled, in pool order, with their
        breakers: the one home of that filter."""
        disabled = self.disabled
        return ((d, breaker) for _, d, breaker in self._members if d not in disabled)

    def admits(self, domain: Domain, now: float) -> Standing | None:
        """``domain``'s standing if it is enabled and an ordinary request may be sent to
        it now (it is admissible); else None."""
        if domain in self.disabled:
            return None
        standing = self.breakers[domain].standing(now, sticky=self.policy.sticky)
        return standing if standing.admissible else None

    def early_probe_at(self) -> float | None:
        """The earliest time an early probe may reach an open domain."""
        times = [
            breaker.early_probe_at
            for _, breaker in self.enabled()
            if breaker.state is BreakerState.OPEN and not breaker.leased
        ]
        return min(times) if times else None

    def probing(self, *, besides: Sequence[Domain] = ()) -> bool:
        """Is a probe of some enabled domain (other than ``besides``) in flight?"""
        return any(breaker.leased for d, breaker in self.enabled() if d not in besides)

    def faster_elsewhere(self, domain: Domain) -> bool:
        """Does slowness count against ``domain``? Only while another enabled domain's
        breaker is closed and its latest call was not slow (or it had none): see
        ``_slowness.py``. Envoy's outlier detection caps its ejections in the same
        spirit (``max_ejection_percent``). Slow calls only; the caller holds the lock."""
        windows = self.slow_calls
        assert windows is not None
        for other, breaker in self.enabled():
            if other == domain or breaker.state is not BreakerState.CLOSED:
                continue
            last = windows[other].last
            if last is None or not windows[other].is_slow(last):
                return True
        return False

    def admit(self, domain: Domain, now: float) -> Choice | None:
        """``domain`` as the next attempt's target, if it is enabled and admissible."""
        standing = self.admits(domain, now)
        if standing is None:
            return None
        return domain, self.breakers[domain], standing.lease, False

    def admissible(self, now: float, orders: Orders | None = None) -> list[Domain]:
        """The enabled domains an ordinary request may be sent to now, in pool order;
        with a request's ``orders``, its first attempt's first admissible domain, then
        the rest in the order after that."""
        ok = [d for d, _ in self.enabled() if self.admits(d, now) is not None]
        if orders is None:
            return ok
        first = next((d for _, d, _ in orders[0] if d in ok), None)
        rest = [d for _, d, _ in orders[1] if d in ok and d != first]
        return rest if first is None else [first, *rest]

    def restore_serving(self, domain: Domain, now: float) -> None:
        """Resume on ``domain`` after a restart: the domains ahead of it count as
        suspect for one cooldown, then the client fails back (one probe)."""
        with self.lock:
            self.serving, self.serving_since = domain, now
            for ahead in self.order[: self.position[domain]]:
                self.breakers[ahead].suspect_since(now)

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
                        can_request=self.admits(d, now) is not None,
                        probe_due=d not in self.disabled and self.standing(d, now).lease,
                    )
                    for d in self.order
                ),
                sticky=self.serving.url if self.serving else None,
                budget_tokens=self.budget.tokens if self.budget else None,
            )


# -- one logical request -------------------------------------------------------------------


class RequestPlan:
    """The decisions for one logical request. Not shared between threads.

    What only a retry, a wait or a hedge reads starts as a class attribute, so a
    request answered at its first attempt never writes it. (Hence no ``__slots__``.
    What every request reads is set in ``__init__``: on CPython 3.11 reading a class
    attribute through an instance costs 40 ns, an instance attribute 13 ns.)
    """

    last_outcome: Outcome | None = None  # of the latest attempt
    done = False  # an attempt ended the request (a success or an answer)
    _counted = 0  # attempts that count against the schedule (not transparent)
    _early_allowed = True  # one early probe per request
    _initial: tuple[Domain, ...] = ()  # a table's domains by rank, at the start
    _waited = 0.0  # seconds spent waiting for another request's probe
    _next_wait = _FIRST_WAIT
    _hedges = 0  # hedges sent
    _throttled = False  # a hedge of this request was held back by the throttle
    _failed_on: tuple[Domain, str] | None = None  # the domain and error that moved it

    def __init__(
        self,
        core: PoolCore,
        method: str,
        idempotent: bool,
        replayable: bool,
        pinned: Domain | None,
        now: float,
        random: Callable[[], float],
        orders: Orders,
        hedge: bool = True,
    ) -> None:
        self.core = core
        self._orders = orders  # the order the first attempt walks, the one after, why
        self.policy = policy = core.policy
        self.method = method
        self.idempotent = idempotent
        self.replayable = replayable
        self.pinned = pinned
        self.started_at = now
        self.deadline_at = now + policy.deadline
        self._random = random
        # The one record of each attempt (``Attempt``), in one of two lists: those that
        # ended, in the order they ended, and those in flight (more than one only while a
        # hedge races). Every other view of them (tried, raced, in flight) reads these.
        self.records: list[Attempt] = []
        self.flying: list[Attempt] = []
        # Could this request be sent again after its bytes left? May it hedge
        # (``Policy.hedging``: only what could be sent twice)?
        resendable = idempotent and replayable
        self.may_resend = resendable and core.resends
        self.hedgeable = resendable and hedge and core.hedging is not None
        if core.table is not None and pinned is None:
            with core.lock:
                self._initial = tuple(core.admissible(now, orders))

    @property
    def pool(self) -> str:
        return self.core.name

    @property
    def steering(self) -> str | None:
        """Why this request's order is not the pool's: ``"weight"``, ``"affinity"``,
        ``"order"``, ``"time_order"``, or None."""
        return self._orders[2]

    @property
    def first_order(self) -> tuple[Domain, ...]:
        """The order this request's first attempt walks (the pool's when unsteered)."""
        return tuple(d for _, d, _ in self._orders[0])

    @property
    def in_flight(self) -> tuple[Attempt, ...]:
        """The attempts in flight (more than one only while a hedge races)."""
        return tuple(self.flying)

    @property
    def tried(self) -> list[Domain]:
        """The domains this request has sent attempts to (those that ended, then those in flight)."""
        return [attempt.domain for attempt in self.records] + [attempt.domain for attempt in self.flying]

    # -- next -------------------------------------------------------------------------

    def next(self, now: float) -> Attempt | Wait | Stop:
        """What to do now: another attempt, wait for a probe, or stop (and why)."""
        if self.flying:
            raise RuntimeError(f"attempt {self.flying[0].number} is in flight: record its outcome first")
        if self.done:
            return DONE
        events: list[Event] = []
        core = self.core
        with core.lock:
            if self.hedgeable and not self.records:
                assert core.throttle is not None
                core.throttle.earn()
            counted = self._counted
            while True:
                decision = self._decide(now, events)
                if not isinstance(decision, tuple):  # Stop or Wait
                    return decision
                (domain, breaker, probe, early), delay, timeout = decision
                if not probe or core.lease is None or core.lease(domain, breaker, now + delay, timeout):
                    break
                # another process probes it (PROBING here now, see core.lease): decide again
                self._counted = counted
            if probe:
                if early:
                    self._early_allowed = False
                self._add_transition(events, domain, breaker.acquire(now + delay, early=early))
            attempt = Attempt(
                len(self.records) + 1, domain, delay, timeout, probe, tuple(events) if events else (), False, breaker, now + delay
            )
            if core.slow_calls is not None:
                core.slow_calls[domain].began(attempt, attempt.sent_at)
        self.flying.append(attempt)
        return attempt

    # -- hedging ----------------------------------------------------------------------

    def hedge_delay(self) -> float | None:
        """How long after the latest attempt was sent a hedge is due, or None when this
        request hedges no more (not hedgeable, answered, or ``max_extra`` sent)."""
        if not self._may_hedge():
            return None
        return self.core.hedge_delay(self.flying[0].domain)

    def _may_hedge(self) -> bool:
        hedging = self.core.hedging
        return (
            self.hedgeable
            and hedging is not None
            and not self.done
            and bool(self.flying)
            and self._hedges < hedging.max_extra
        )

    def hedge(self, now: float) -> Attempt | HedgeThrottled | None:
        """A hedge while the attempts in flight have not answered: to the next domain
        this request has not tried that is healthy (never an open domain, never one
        whose probe is due, never a suspect one), if the throttle lets it go. None when
        no domain fits, or time is short.

        A suspect domain failed within its cooldown, and traffic returns to it through
        one probe: hedges sent there would be the failback herd that rule prevents
        (with 200 tasks served by the backup after the primary refused, 7 hedges a
        cooldown went to the dead primary)."""
        if not self._may_hedge():
            return None
        core = self.core
        tried = self.tried
        with core.lock:
            choice = core.choose(now, tried, self._orders[1], False)
            if choice is None:
                return None
            domain, breaker, probe, _ = choice
            if probe or domain in tried or breaker.standing(now, core.policy.sticky).suspect:
                return None  # (the choice ranks a healthy untried domain before a suspect one)
            timeout = self._timeout(now)
            if timeout < MIN_ATTEMPT_TIME:
                return None
            assert core.throttle is not None
            if not core.throttle.take(now, again=self._throttled):  # said once; it may try again later
                if self._throttled:
                    return None
                self._throttled = True
                return HedgeThrottled(pool=self.pool, domain=domain)
            attempt = Attempt(len(self.records) + len(self.flying) + 1, domain, 0.0, timeout, False, (), True, breaker, now)
            attempt.raced = True
            if core.slow_calls is not None:
                core.slow_calls[domain].began(attempt, now)
        self._hedges += 1
        for racing in self.flying:
            racing.raced = True
        self.flying.append(attempt)
        return attempt

    def _decide(self, now: float, events: list[Event]) -> tuple[Choice, float, float] | Wait | Stop:
        last = self.last_outcome
        if last is None:  # the first attempt: never delayed, never refused a domain
            choice = self._choose(now, self._orders[0])
            if choice is None:
                return self._wait_for_probe(now, besides=()) or Stop(reason=semconv.OUTCOME_CIRCUIT_OPEN)
            self._counted = 1
            return choice, 0.0, self._timeout(now)
        if last.sent and not (self.idempotent and self.replayable):
            return Stop(reason=semconv.STOP_NOT_RETRYABLE)
        choice = self._choose(now, self._orders[1])
        tried = self.tried
        if choice is None or (choice[0] in tried and self.core.probing(besides=tried)):
            # Rather than stop, or go back to a domain that just failed this request,
            # wait for the probe of one it has not tried.
            wait = self._wait_for_probe(now, besides=() if choice is None else tried)
            if wait is not None:
                return wait
        if choice is None:
            return Stop(reason=semconv.STOP_EXHAUSTED)
        transparent = self.core.table is None and not last.sent and choice[0] not in tried
        if not transparent:
            if self._counted >= self.core.max_attempts:
                return Stop(reason=semconv.STOP_EXHAUSTED)
            budget = self.core.budget
            if last.sent and budget is not None and not budget.allows_retry():
                events.append(BudgetRejected(pool=self.pool))
                return Stop(reason=semconv.STOP_RETRY_BUDGET, events=tuple(events))
        delay = 0.0 if self._goes_at_once(choice, tried) else self._backoff(now)
        timeout = self._timeout(now + delay)
        if timeout < MIN_ATTEMPT_TIME:
            return Stop(reason=semconv.STOP_DEADLINE)
        if not transparent:
            self._counted += 1
        return choice, delay, timeout

    def _wait_for_probe(self, now: float, *, besides: Sequence[Domain]) -> Wait | None:
        """Wait, if time allows, for another request's probe of a domain not in
        ``besides``, or for the moment this request may probe an open domain early."""
        if self.pinned is not None:
            return None
        budget = min(self.policy.probe_wait - self._waited, self.deadline_at - now)
        delay = min(self._next_wait, budget)
        if not self.core.probing(besides=besides):
            probe_at = self.core.early_probe_at() if self._early_allowed else None
            if probe_at is None or probe_at - now > budget:
                return None
            delay = min(delay, max(probe_at - now, MIN_ATTEMPT_TIME))
        if delay < MIN_ATTEMPT_TIME:
            return None
        self._waited += delay
        self._next_wait = min(2 * self._next_wait, _LONGEST_WAIT)
        return Wait(delay=delay)

    def _choose(self, now: float, members: Members) -> Choice | None:
        core = self.core
        if self.pinned is not None:
            return core.admit(self.pinned, now)
        if self._initial:
            schedule = core.table
            assert schedule is not None
            step = schedule.steps[min(self._counted, len(schedule.steps) - 1)]
            named = core.admit(self._initial[step.domain % len(self._initial)], now)
            if named is not None:
                return named
        return core.choose(now, self.tried if self.records else (), members, self._early_allowed)

    def _goes_at_once(self, choice: Choice, tried: Sequence[Domain]) -> bool:
        """Does this retry skip the backoff? With backoff schedules, moving on to a
        domain this request has not tried is failover and goes at once: the jitter
        exists to spread returns to a struggling server, and a ``Retry-After`` speaks
        for the server that sent it. A probe goes at once too: it holds the
        domain's lease, which others wait on, and being the only one it cannot
        retry in lockstep with anybody. A table is followed as written."""
        if self.core.table is not None:
            return False
        domain, _, probe, _ = choice
        return probe or domain not in tried

    def _backoff(self, now: float) -> float:
        """The wait before a counted retry: the schedule's, lengthened by a (capped)
        ``Retry-After``."""
        schedule = self.policy.schedule
        if isinstance(schedule, ExponentialBackoff):
            delay = schedule.delay(self._counted, self._random)
        else:
            index = min(self._counted, len(schedule.steps) - 1)
            delay = max(0.0, self.started_at + schedule.offset(index, self._random) - now)
        last = self.last_outcome
        if last is not None and last.retry_after is not None:
            delay = max(delay, min(last.retry_after, self.policy.retry_after_cap))
        return delay

    def _timeout(self, start: float) -> float:
        """The time an attempt starting at ``start`` may take: to the deadline, capped
        by the per-attempt timeout."""
        timeout = self.deadline_at - start
        cap = self.policy.attempt_timeout
        return timeout if cap is None or cap > timeout else cap  # not min(): 0.1 us a call

    # -- record -----------------------------------------------------------------------

    def record(
        self, outcome: Outcome, now: float, duration: float, attempt: Attempt | None = None
    ) -> tuple[Event, ...]:
        """Report what an attempt in flight did (``attempt``: which one, when a hedge
        races it); returns the events it caused."""
        flying = self.flying
        if len(flying) == 1 and (attempt is None or flying[0] is attempt):  # it ran alone
            attempt = flying.pop()
        else:
            attempt = self._land(attempt)
        domain = attempt.domain
        attempt.error_type = outcome.error_type
        attempt.status = outcome.status
        attempt.duration = duration
        attempt.sent = outcome.sent
        if attempt.raced:
            attempt.race = semconv.HEDGE_LOST if outcome.retryable else semconv.HEDGE_WON
        self.records.append(attempt)
        self.last_outcome = outcome
        events: list[Event] = []
        core = self.core
        breaker = attempt.breaker
        with core.lock:
            slow = False if core.slow_calls is None else self._slow_call(attempt, now, duration, events)
            if outcome.failed or (slow and attempt.probe and core.faster_elsewhere(domain)):  # a slow probe fails
                transition = breaker.failure(now, attempt.sent_at, attempt.probe)
                if outcome.failed:
                    self._failed_on = (domain, outcome.error_type or "failure")
                self._add_transition(events, domain, transition, None if outcome.failed else _SLOW)
            else:  # the domain answered: healthy, even when it asks to slow down
                transition = breaker.success(now, attempt.sent_at, attempt.probe)
                if core.latency is not None:
                    core.latency[domain].add(duration)
                if transition is not None:  # rare: the common success changes nothing
                    self._add_transition(events, domain, transition)
            budget = core.budget
            if budget is not None:
                if not outcome.retryable:
                    budget.refund()
                elif attempt.number > 1 and outcome.sent and not attempt.hedge:
                    budget.charge()  # a failed retry: the only thing the budget charges
            if not outcome.retryable:
                self.done = True
                # What moves the pool: an answer to an attempt sent since it last moved (one
                # sent before is old news: under concurrency it would move the pool back and
                # forth), and not a hedge that won alone (one slow answer raced says nothing
                # about where the pool's traffic goes).
                if (
                    core.serving is not domain
                    and attempt.sent_at >= core.serving_since
                    and (not attempt.hedge or self._failed_on is not None)
                ):
                    self._note_serving(domain, now, events)
        return tuple(events) if events else ()

    def _land(self, attempt: Attempt | None) -> Attempt:
        """Take ``attempt`` (None: the only one) off the attempts in flight."""
        flying = self.flying
        if attempt is None:
            if len(flying) != 1:
                raise RuntimeError(
                    "no attempt is in flight: call next() first"
                    if not flying
                    else "several attempts are in flight: name the one to record"
                )
            return flying.pop()
        if flying and flying[0] is attempt:
            del flying[0]
            return attempt
        for i, candidate in enumerate(flying):
            if candidate is attempt:
                del flying[i]
                return attempt
        raise RuntimeError(f"attempt {attempt.number} is not in flight")

    def _slow_call(self, attempt: Attempt, now: float, duration: float, events: list[Event]) -> bool:
        """Count the call in its domain's slow-call window (the caller holds the lock);
        eject the domain when its slow calls reach the rate. True if it was slow."""
        windows = self.core.slow_calls
        assert windows is not None
        window = windows[attempt.domain]
        slow = window.is_slow(duration)
        if slow:
            events.append(SlowCall(pool=self.pool, domain=attempt.domain))
        rate_reached = window.add(now, duration, attempt)
        if rate_reached and not attempt.probe and self.core.faster_elsewhere(attempt.domain):
            transition = self.core.breakers[attempt.domain].eject(now)
            self._add_transition(events, attempt.domain, transition, _SLOW)
        return slow

    def cancel(self, attempt: Attempt, now: float, elapsed: float, sent: bool = True) -> tuple[Event, ...]:
        """Another attempt won while ``attempt`` was in flight: it is cut off (``sent``:
        after it was handed to the network, so bytes may have left). Its domain's
        breaker counts nothing (a probe's lease is released), but the time it ran
        enters its domain's latency window (a lower bound of its answer's), and a call
        already slower than the slow-call threshold counts as a slow call."""
        attempt = self._land(attempt)
        attempt.error_type = semconv.ERROR_CANCELLED
        attempt.duration = elapsed
        attempt.sent = sent
        attempt.race = semconv.HEDGE_CANCELLED
        self.records.append(attempt)
        events: list[Event] = []
        core = self.core
        with core.lock:
            self._add_transition(events, attempt.domain, attempt.breaker.abandon(now, probe=attempt.probe))
            if core.latency is not None:
                # It took at least this long. Left out, the window would see only the
                # answers that beat their hedge, and the adaptive delay would sink
                # under load until most requests hedged.
                core.latency[attempt.domain].add(elapsed)
            if core.slow_calls is not None:
                if core.slow_calls[attempt.domain].is_slow(elapsed):
                    self._slow_call(attempt, now, elapsed, events)
                else:
                    core.slow_calls[attempt.domain].forget(attempt)
        return tuple(events)

    def abandon(self, now: float) -> tuple[Event, ...]:
        """The attempts in flight ended without an outcome (cancelled, or an error that
        says nothing about the domain): release their probes, count nothing."""
        self.done = True
        events: list[Event] = []
        flying, self.flying = self.flying, []
        for attempt in flying:
            with self.core.lock:
                self._add_transition(events, attempt.domain, attempt.breaker.abandon(now, probe=attempt.probe))
                if self.core.slow_calls is not None:
                    self.core.slow_calls[attempt.domain].forget(attempt)
        return tuple(events)

    def _note_serving(self, domain: Domain, now: float, events: list[Event]) -> None:
        core = self.core
        if self._orders[2] is not None and self._orders[2] != _steering.TIME_ORDER:
            # a steered request says nothing about where the pool's traffic goes
            return
        before = core.serving
        core.serving, core.serving_since = domain, now
        if before is None or before is domain or before == domain:
            return
        if self._failed_on is not None and self._failed_on[0] == before:
            reason = self._failed_on[1]
        elif self._position(domain) < self._position(before):
            reason = semconv.SWITCH_REASON_FAILBACK
        else:
            reason = semconv.SWITCH_REASON_PREFERRED_UNAVAILABLE
        events.append(Switch(pool=self.pool, before=before, after=domain, reason=reason))

    def _position(self, domain: Domain) -> int:
        """``domain``'s place in the order this request fails over in."""
        return next(i for i, d, _ in self._orders[1] if d == domain)

    def _add_transition(
        self,
        events: list[Event],
        domain: Domain,
        transition: BreakerTransition | None,
        reason: str | None = None,
    ) -> None:
        if transition is not None:
            events.append(
                BreakerEvent(
                    pool=self.pool, domain=domain, before=transition.before, after=transition.after, reason=reason
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
        wall_clock: Callable[[], float] = _time.time,
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
        # (scheme, host, port) as httpx.URL gives them (a default port is None)
        self._by_origin = {(d.scheme, d.host, d.port): (d, self.pools[name]) for d, name in seen.items()}
        self.random = random
        self.wall_clock = wall_clock  # Unix time, read only for pools with time windows
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
        # (scheme, host, port) as httpx.URL gives them (a default port is None)
        scheme, host, port = url.scheme, url.host, url.port
        found = self._by_origin.get((scheme, host, port))
        if found is None and host.endswith("."):  # a fully qualified name
            found = self._by_origin.get((scheme, host.rstrip("."), port))
        origin = None if found is None else found[0]
        if options.domain is not None:
            try:
                pinned = Domain.parse(options.domain)
            except ValueError as exc:
                raise ValueError(f'extensions["failover"]["domain"]: {exc}') from None
            pinned_in = self._find_domain(pinned)
            if pinned_in is None:
                raise ValueError(f"pinned domain {pinned} is not in any pool")
            return pinned_in, pinned, origin
        if options.pool is not None:
            pool_core = self.pools.get(options.pool)
            if pool_core is None:
                raise ValueError(f"unknown pool {options.pool!r}; pools are {sorted(self.pools)}")
            return pool_core, None, origin
        if found is None:
            return None
        return found[1], None, origin

    def _find_domain(self, domain: Domain) -> PoolCore | None:
        found = self._by_origin.get((domain.scheme, domain.host, domain.port))
        return None if found is None else found[1]

    def begin(
        self,
        pool_core: PoolCore,
        method: str,
        headers: httpx.Headers,
        options: RequestOptions,
        replayable: bool,
        pinned: Domain | None,
        now: float,
        wall: float | None = None,
    ) -> RequestPlan:
        """A plan for one request at ``now`` (the transport's clock); ``wall`` is the
        Unix time for the pool's time windows (``wall_clock()`` when not given)."""
        method = method.upper()
        if options.idempotent is not None:
            idempotent = options.idempotent
        else:
            idempotent = method in pool_core.policy.idempotent_methods or "idempotency-key" in headers
        orders = pool_core.orders
        if pool_core.steers or options.order is not None:
            if wall is None and pool_core.time_orders:
                wall = self.wall_clock()
            orders = pool_core.steer(options, wall, self.random)
        # positional: one plan per request, and keywords cost a mapping per call
        return RequestPlan(
            pool_core, method, idempotent, replayable, pinned, now, self.random, orders, options.hedge
        )

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
