"""Pool state and the choice of domain: the rules for "which domain next".

Each pool of a transport (or ``sharing`` group) has one :class:`PoolCore`: its
breakers, retry budget, serving domain, slow-call windows, hedge throttle and the
control document's disabled set, behind one lock. The plan of each request
(``_plan.py``) asks it which domain comes next.

Rules and theory of operation
-----------------------------
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
"""

from __future__ import annotations

import math
import operator
import random
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

from . import _steering
from ._breaker import Breaker, BreakerState, Standing
from ._budget import TokenBucket
from ._classify import outcome_table, success_table
from ._fork import renew_locks
from ._policy import Policy, ScheduleTable
from ._pool import Domain, Pool
from ._slowness import UNKNOWN_DELAY, HedgeThrottle, LatencyWindow, SlowCallWindow
from ._snapshot import DomainState, PoolState
from ._steering import key_unit, rendezvous_rank
from ._values import Attempt, RequestOptions, WholeOnly, new_attempt

if TYPE_CHECKING:
    from ._lib import Headers

__all__ = ["Choice", "Members", "Orders", "PoolCore"]

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

_IDEMPOTENCY_KEY = b"idempotency-key"
_LOWERED = operator.itemgetter(1)  # of a (name, lowercased name, value) triple of ``Headers._list``


class PoolCore:
    """The shared, mutable state of one pool: breakers, budget, serving domain."""

    # Slots: its 41 fields are more than the 30 an instance shares its class's dict keys for
    # on CPython 3.11, past which each instance has a dict of its own. A look-up the
    # interpreter specialised for one instance's dict misses on the next: with two pools or
    # transports in a process, ``core.first_attempt``, ``self.choose`` and ``core.idempotent``
    # went back and forth between their specialised and general forms (a full look-up each
    # general one). A slot's look-up is specialised for the class, whatever the instance.
    # (``__weakref__``: a fork's child renews its lock, ``_fork.renew_locks``)
    __slots__ = (
        "__weakref__", "_affinity_urls", "_members", "affinity", "app_check", "breakers", "budget",
        "disabled", "first_timeout", "hedging", "idempotent_methods", "idempotent_reading", "lane_hedges", "latency", "lease",
        "lock", "max_attempts", "max_hedges", "name", "named", "order", "orders", "outcomes", "plain",
        "policy", "pool", "position", "random", "read_limit", "reading", "resends", "serving",
        "serving_since", "slow_calls", "stale_limit", "steers", "successes", "table", "throttle",
        "time_orders", "wall_clock", "weights",
    )  # fmt: skip

    def __init__(self, pool: Pool, policy: Policy, *, region: str | None) -> None:
        self.pool = pool
        self.name = pool.name
        self.policy = policy
        self.max_attempts = policy.max_attempts
        self.idempotent_methods = policy.idempotent_methods
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
        # The time a request's first attempt has when it starts with the request: the whole
        # deadline, capped by the per-attempt timeout (``RequestPlan._timeout`` at the start).
        cap = policy.attempt_timeout
        self.first_timeout = policy.deadline if cap is None or cap > policy.deadline else cap
        # How much of a 2xx body a request reads before its outcome is known: for the
        # app-error check, and so that a re-sendable request whose connection breaks
        # mid-body fails over; and for the stale cache (GET only).
        self.read_limit = (
            policy.read_body_max_bytes if policy.is_app_error is not None or policy.read_body else 0
        )
        self.app_check = policy.is_app_error is not None
        # What a response of each status means, where the status alone decides it: most
        # responses are classified by one look-up here (a table pools alike share).
        self.outcomes = outcome_table(policy)
        self.successes = success_table(policy)  # those of them that are successes (the lane's)
        self.stale_limit = policy.stale_max_bytes if policy.stale_on_failure else 0
        # What a request reads of a 2xx body before its outcome is known, by whether it
        # could be sent again (idempotent and replayable) and is a GET: (bytes at most,
        # whether the exchange looks at them, and whether the stale cache stores and serves
        # it). All of a small body, for the app-error check, the stale cache (GET only), and
        # so that a request the pool may re-send whose connection breaks mid-body fails over;
        # of any other request's, only one it reads whole (``WholeOnly``), for speed.
        # Indexed ``reading[resendable][get]``: two C-level indexings, where a ``(resendable,
        # get)`` key made, hashed and compared a tuple at every request (300 instructions).
        reading = []
        for resendable in (False, True):
            row = []
            for get in (False, True):
                stale = policy.stale_on_failure and get
                counted = self.read_limit if (resendable and self.resends) or self.app_check else 0
                limit = max(counted, self.stale_limit) if stale else counted or WholeOnly(self.read_limit)
                row.append((limit, stale or self.app_check, stale))
            reading.append(tuple(row))
        self.reading: tuple[tuple[tuple[int, bool, bool], ...], ...] = tuple(reading)
        # The same for a request whose method the policy names idempotent (it may be sent
        # again whatever its headers: :meth:`idempotent`), by method, with that answer
        # first: the lane's one look-up (``Lane.start``), where asking :meth:`idempotent`
        # was a call a request (0.35 µs of CPU between httpx.Client's own work).
        self.idempotent_reading: dict[str, tuple[bool, int, bool, bool]] = {
            method: (True, *self.reading[True][method == "GET"]) for method in self.idempotent_methods
        }
        # Slow domains (``_slowness.py``): the hedge throttle, each domain's latency
        # (for an adaptive hedge delay) and slow calls. None: not configured, no cost.
        hedging = policy.hedging
        self.hedging = hedging
        self.max_hedges = hedging.max_extra if hedging is not None else 0  # hedges per request
        slow_calls = policy.slow_calls
        # May a request with no options take the fast lane (``_exchange.Lane``): does the
        # pool's choice alone decide its first attempt, and a success at it move nothing
        # but the breaker's count and the budget? Not on a table, steered, hedged, or
        # watched for slow calls (each notes or decides more per attempt).
        self.plain = self.table is None and not self.steers and hedging is None and slow_calls is None
        # ... or would, but for hedging: a front-end whose race can cut a loser (the async
        # loops; a sync one over httpx's own transport) starts its requests in the lane too,
        # a hedgeable one with its first hedge armed (``SyncLoop._raced``, ``AsyncLoop._raced``).
        self.lane_hedges = self.table is None and not self.steers and hedging is not None and slow_calls is None
        self.disabled: frozenset[Domain] = frozenset()
        self._learn_afresh()
        self.lock = threading.Lock()
        renew_locks(self, "lock")
        # Shared health (``pytest_failover.shared``): the fleet's probe lease, asked
        # under the lock before a probe is sent; False means another process holds it
        # (the breaker is then PROBING here too). None: not shared, no cost.
        self.lease: Callable[[Domain, Breaker, float, float], bool] | None = None
        # The transport's random source and Unix clock (``FailoverCore`` sets them): weight
        # draws and jitter; the time windows of ``time_orders``.
        self.random: Callable[[], float] = random.random
        self.wall_clock: Callable[[], float] = time.time

    def _learn_afresh(self) -> None:
        """What the pool learns from its traffic, as built: the domain serving it, the
        retry budget (full), and for slow domains the hedge throttle, each domain's latency
        (for an adaptive hedge delay) and slow calls (None: not configured, no cost)."""
        policy, domains = self.policy, self.pool.domains
        self.serving: Domain | None = None
        self.serving_since = -math.inf  # when ``serving`` last changed (monotonic seconds)
        self.budget = TokenBucket(policy.retry_budget) if policy.retry_budget else None
        hedging, slow_calls = policy.hedging, policy.slow_calls
        self.throttle = HedgeThrottle(hedging) if hedging is not None else None
        self.latency = {d: LatencyWindow() for d in domains} if hedging is not None and hedging.delay is None else None
        self.slow_calls = {d: SlowCallWindow(slow_calls) for d in domains} if slow_calls is not None else None

    def forget(self) -> None:
        """Forget what traffic taught the pool (``State.forget``): every breaker closed,
        the primary serving, the budget full, no latency or slow call counted. What it was
        told stays: its control document's disabled domains, its shared health's lease.
        A request in flight meanwhile ends on the state it finds."""
        with self.lock:
            for breaker in self.breakers.values():
                breaker.forget()
            self._learn_afresh()

    def first_attempt(self, now: float, members: Members) -> Attempt | None:
        """The first attempt of a request that walks ``members`` (its first order) at
        ``now``, its start: the choice (:meth:`choose`), taken at once with the pool's first
        timeout, unless it is a probe, which needs the lock (None: the request's plan decides
        under it). Read without the lock (``RequestPlan.first`` says why that is sound).

        The first member, enabled and quiet (``Breaker.quiet``: healthy whatever the time,
        as most requests find it), is what the choice's walk would answer at once: taken
        without the walk. A breaker healthy but not quiet (a failure counted in a pool that
        is not sticky) takes the walk, which answers the same."""
        _, domain, breaker = members[0]
        disabled = self.disabled
        if breaker.quiet and not (disabled and domain in disabled):
            return new_attempt(1, domain, breaker, 0.0, self.first_timeout, now)
        choice = self.choose(now, (), members, True)
        if choice is None or choice[2]:
            return None
        return new_attempt(1, choice[0], choice[1], 0.0, self.first_timeout, now)

    def idempotent(self, method: str, headers: Headers) -> bool:
        """May a request be sent twice, by the pool's policy: its ``method`` is one of the
        idempotent ones, or it carries an ``Idempotency-Key``. Looked for among the
        lowercased names of httpx's (and httpx2's) list at C level: ``in headers`` encodes
        the key and raises a KeyError to say no (2.3 against 1.3 us with an SDK's 15
        headers, timeit; every POST asks)."""
        return method in self.idempotent_methods or _IDEMPOTENCY_KEY in map(_LOWERED, headers._list)

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
