"""One request's decisions: what to do next, and what an attempt's end means.

Each logical request has a :class:`RequestPlan` (a front-end's exchange is one, a
subclass), driven in a loop::

    decision = plan.next(now)            # Attempt(domain, delay, timeout), Wait or Stop(reason)
    ... wait decision.delay, send the attempt, classify what happened ...
    events = plan.answer(attempt, outcome, now, duration)   # breaker transitions, switches

``answer`` records the outcome and, when the request goes on, decides its next step
under the same pool lock; ``next`` hands that step out (``record`` is ``answer``
without the decision, for tests that call ``next`` themselves). The plan asks its pool
(``_pools.py``) which domain comes next, and decides the rest here.

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

A connection that closed before any byte of the answer (``OutcomeKind.DROPPED``: the
server's keep-alive timeout closed it as the request went out) says nothing about the
domain: a request that may be sent again goes there again at once (RFC 9112, 9.3.1;
what aiohttp and browsers do for an idempotent request), with no verdict, no backoff, no
schedule attempt; and again while each resend met a kept-alive connection too (a server
closes its idle connections together; Go's rule), up to :data:`RESENDS` times. A drop
on a new connection after the first, or on one that cannot be told, a probe's, a
hedge's, or a drop of a request that may not be re-sent is the domain's failure
(:meth:`RequestPlan.dropped`).

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

from collections.abc import Sequence
from typing import TYPE_CHECKING

from . import _steering, semconv
from ._breaker import BreakerTransition, Standing
from ._classify import Outcome, OutcomeKind
from ._looplag import measure
from ._policy import ExponentialBackoff, Policy
from ._pool import Domain
from ._pools import Choice, Members, PoolCore
from ._testing import MODE as _TESTING
from ._values import (
    Attempt,
    BreakerEvent,
    BudgetRejected,
    Event,
    HedgeThrottled,
    RequestOptions,
    SlowCall,
    Stop,
    Switch,
    Wait,
    new_attempt,
)

if TYPE_CHECKING:
    from ._lib import Headers

__all__ = ["DONE", "MIN_ATTEMPT_TIME", "RequestPlan"]

# An attempt with less time than this before the deadline is not started.
MIN_ATTEMPT_TIME = 0.001

DONE = Stop(reason=semconv.STOP_DONE)

# ``failover.reason`` of a breaker transition that slow calls caused.
_SLOW = semconv.BREAKER_REASON_SLOW_CALLS
_WON = semconv.HEDGE_WON
_DROPPED = OutcomeKind.DROPPED
# The most times one request is sent again after drops (each resend after the first one
# met a kept-alive connection: the pool had that many stale ones).
RESENDS = 4

# What a cut attempt ended with (``RequestPlan.cancel``), by whether it had been handed to
# the network: no answer, as a failure is to its request; its breaker counts nothing.
_CUT = {
    sent: Outcome(kind=OutcomeKind.FAILURE, error_type=semconv.ERROR_CANCELLED, sent=sent) for sent in (False, True)
}

# Polls while waiting for another request's probe: 2 ms, doubling, at most 50 ms.
_FIRST_WAIT = 0.002
_LONGEST_WAIT = 0.05


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
    _drops = 0  # times sent again after a connection closed before any answer
    pinned: Domain | None = None  # the one domain it may go to
    _walks = True  # its first attempt walks an order: neither pinned nor on a table
    _decided: Attempt | Wait | Stop | None = None  # the step answer() decided, until next() hands it out
    # May it hedge (``Policy.hedging``: only what could be sent twice)? Until it has sent
    # ``Hedging.max_extra`` hedges: asked at every attempt, so the count is not.
    hedgeable = False

    def __init__(
        self,
        core: PoolCore,
        method: str,
        headers: Headers,
        options: RequestOptions,
        replayable: bool,
        pinned: Domain | None,
        now: float,
        wall: float | None = None,
    ) -> None:
        """The plan of a request to ``core``'s pool at ``now`` (the front-end's clock);
        ``wall`` is the Unix time for the pool's time windows (``core.wall_clock()`` when
        not given). Positional, as one is made per request (keywords cost a mapping a call)."""
        self.core = core
        self.method = method  # upper case (as the HTTP libraries make it)
        idempotent = options.idempotent
        if idempotent is None:
            idempotent = core.idempotent(method, headers)
        # Could it be sent again after its bytes left (idempotent, and its body replayable)?
        self.resendable = resendable = idempotent and replayable
        if pinned is not None:
            self.pinned = pinned
            self._walks = False
        self.started_at = now
        orders = core.orders  # the pool's, shared: nothing steers most requests
        if core.steers or options.order is not None:
            if wall is None and core.time_orders:
                wall = core.wall_clock()
            orders = core.steer(options, wall, core.random)
        self._orders = orders  # the order the first attempt walks, the one after, why
        # The one record of each attempt (``Attempt``), in one of two lists: those that
        # ended, in the order they ended, and those in flight (more than one only while a
        # hedge races). Every other view of them (tried, raced, in flight) reads these.
        self.records: list[Attempt] = []
        self.flying: list[Attempt] = []
        # May it hedge (``Policy.hedging``: only what could be sent twice)?
        if core.hedging is not None and resendable and options.hedge:
            self.hedgeable = True
        if core.table is not None and pinned is None:
            self._walks = False
            with core.lock:
                self._initial = tuple(core.admissible(now, orders))

    @property
    def policy(self) -> Policy:
        return self.core.policy

    @property
    def deadline_at(self) -> float:
        """When the request is out of time (the deadline after its start)."""
        return self.started_at + self.core.policy.deadline

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

    def _failed_here(self) -> list[Domain]:
        """The domains this request holds as tried when it chooses its next one: those it
        sent attempts to, but for one the pool has seen recover since the attempt there
        ended (its breaker's ``recovered_at`` is later: another request's answer there
        cleared it). "Tried" keeps a request from going back to a domain that just failed
        it, not from one that works again: held as tried, a domain that recovered ranked
        behind an early probe of an open one, and the request ended on that one's 503
        while the pool served the recovered domain (the rolling scenario)."""
        return [
            attempt.domain
            for attempt in self.records
            if attempt.breaker.recovered_at <= attempt.sent_at + attempt.duration
        ] + [attempt.domain for attempt in self.flying]

    def resume(self, attempt: Attempt, now: float) -> Domain | None:
        """``attempt``, which waited its backoff (its ``delay``), goes out at ``now``: the
        domain it was decided for, when it goes elsewhere instead (None: it goes there).

        A delayed attempt goes back to a domain this request tried, as none it had not was
        known to work when the wait began. If the pool has since seen one work (healthy:
        another request's answer there, a probe's say), the attempt goes there, as a move to
        it would have gone at once: the rolling scenario's request went back after a 0.36 s
        backoff to a domain that had answered it 503, while the pool had seen the primary
        recover 7 ms into the wait, and returned that domain's second 503. A probe, a hedge,
        a pinned request's and a table's attempts go as decided."""
        if attempt.probe or attempt.hedge or self.pinned is not None or self._initial:
            return None
        core = self.core
        with core.lock:
            tried = self._failed_here()  # (the attempt is in flight: its domain too)
            choice = core.choose(now, tried, self._orders[1], False)
            if choice is None:
                return None
            domain, breaker, probe, _ = choice
            if probe or domain in tried or breaker.standing(now, core.policy.sticky) is not Standing.HEALTHY:
                return None
            if core.slow_calls is not None:
                core.slow_calls[attempt.domain].forget(attempt)
                core.slow_calls[domain].began(attempt, now)
            decided = attempt.domain
            attempt.domain, attempt.breaker = domain, breaker
        return decided

    # -- next -------------------------------------------------------------------------

    def next(self, now: float) -> Attempt | Wait | Stop:
        """What to do now: another attempt, wait for a probe, or stop (and why); the step
        :meth:`answer` decided, if it did."""
        if self.flying:
            raise RuntimeError(f"attempt {self.flying[0].number} is in flight: record its outcome first")
        decided = self._decided
        if decided is not None:
            self._decided = None
            if decided.__class__ is Attempt:
                self.flying.append(decided)
            return self._stepped(decided)
        if self.done:
            return self._stepped(DONE)
        with self.core.lock:
            decision = self._next(now)
        return self._stepped(decision)

    def first(self) -> Attempt | Wait | Stop:
        """The first step, at the request's start (no clock read of its own): the first
        attempt, a wait, or stop. Most requests (neither pinned nor on a table) walk an
        order, and their first attempt is the pool's choice as :meth:`_decide` makes it,
        taken at once unless it is a probe, with the pool's first timeout (``_timeout``
        at the start, worked out once per pool).

        That choice reads the breakers without the pool's lock: a request answered at its
        first attempt takes the lock once, to record its answer, and a dozen threads do not
        queue for it to read. An unlocked read is what a locked read just before a
        concurrent writer would see, and all it may yield is an ordinary attempt on a
        domain it read as HEALTHY; what needs the lock (a probe's lease, hedging's throttle
        token, a slow-call window's note) takes it, and anything else is decided again
        under it."""
        core = self.core
        now = self.started_at
        if self._walks:
            attempt = core.first_attempt(now, self._orders[0])
            if attempt is not None:
                if self.hedgeable or core.slow_calls is not None:
                    with core.lock:
                        self.noted(core, attempt, self.hedgeable)
                self._counted = 1  # (_took, with no frame of its own)
                self.flying.append(attempt)
                return attempt  # (nothing to report: an ordinary attempt caused no event)
        with core.lock:
            decision = self._next(now)
        return self._stepped(decision)

    def _took(self, attempt: Attempt) -> None:
        """``attempt``, the request's first, chosen by the pool without the lock
        (``PoolCore.first_attempt``), is in flight: by :meth:`first`, or by a lane that
        sent it before the request had a plan (``Exchange.adopting``)."""
        self._counted = 1
        self.flying.append(attempt)

    def _stepped(self, decision: Attempt | Wait | Stop) -> Attempt | Wait | Stop:
        """``decision``, handed out by :meth:`first` or :meth:`next`: the hook where a
        front-end's exchange reports what it caused on its way out."""
        return decision

    @staticmethod
    def noted(core: PoolCore, attempt: Attempt, hedgeable: bool) -> None:
        """What ``core``'s pool notes of a request's new attempt (the caller holds the lock;
        ``hedgeable``: the request may hedge): a hedgeable request's first earns the hedge
        throttle a token; slow-call windows watch every attempt. A lane's first attempt is
        noted here too (``_exchange.Lane``), as it has no plan."""
        if hedgeable and attempt.number == 1:
            assert core.throttle is not None
            core.throttle.earn()
        if core.slow_calls is not None:
            core.slow_calls[attempt.domain].began(attempt, attempt.sent_at)
            measure()  # how late an event loop here runs, for its verdict (``_looplag``)

    def _next(self, now: float) -> Attempt | Wait | Stop:
        """The next step, decided under the pool's lock (the caller holds it); an attempt
        joins the attempts in flight."""
        core = self.core
        events: list[Event] = []
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
        attempt = new_attempt(len(self.records) + 1, domain, breaker, delay, timeout, now + delay)
        if probe:
            attempt.probe = True
        if events:
            attempt.events = tuple(events)
        if self.hedgeable or core.slow_calls is not None:
            self.noted(core, attempt, self.hedgeable)
        self.flying.append(attempt)
        return attempt

    # -- hedging ----------------------------------------------------------------------

    def hedge_delay(self) -> float | None:
        """How long after the latest attempt was sent a hedge is due, or None when this
        request hedges no more (not hedgeable, answered, nothing in flight, or
        ``max_extra`` sent): the one home of whether it may hedge (:meth:`hedge` asks it)."""
        if not self.hedgeable or self.done or not self.flying:
            return None
        return self.core.hedge_delay(self.flying[0].domain)

    def hedge(self, now: float) -> Attempt | HedgeThrottled | None:
        """A hedge while the attempts in flight have not answered: to the next domain
        this request has not tried that is healthy (never an open domain, never one
        whose probe is due, never a suspect one), if the throttle lets it go. None when
        no domain fits, or time is short.

        A suspect domain failed within its cooldown, and traffic returns to it through
        one probe: hedges sent there would be the failback herd that rule prevents
        (with 200 tasks served by the backup after the primary refused, 7 hedges a
        cooldown went to the dead primary)."""
        if self.hedge_delay() is None:  # it hedges no more
            return None
        core = self.core
        tried = self.tried
        with core.lock:
            assert core.throttle is not None
            if self._throttled and core.throttle.refuses(now, again=True):
                # Refused before, and again: said once already. Asked before the domain's
                # choice, which a loaded client's hedge timer would otherwise make at every
                # delay while the request waits (4 to 10 times, ~650 opcodes each, at 10 ms).
                return None
            choice = core.choose(now, tried, self._orders[1], False)
            if choice is None:
                return None
            domain, breaker, probe, _ = choice
            if probe or domain in tried or breaker.standing(now, core.policy.sticky).suspect:
                return None  # (the choice ranks a healthy untried domain before a suspect one)
            timeout = self._timeout(now)
            if timeout < MIN_ATTEMPT_TIME:
                return None
            if not core.throttle.take(now, again=self._throttled):  # said once; it may try again later
                if self._throttled:
                    return None
                self._throttled = True
                return HedgeThrottled(pool=self.pool, domain=domain)
            attempt = new_attempt(len(self.records) + len(self.flying) + 1, domain, breaker, 0.0, timeout, now)
            attempt.hedge = attempt.raced = True
            if core.slow_calls is not None:
                core.slow_calls[domain].began(attempt, now)
        self._hedges += 1
        if self._hedges >= core.max_hedges:  # ``Hedging.max_extra`` sent: it hedges no more
            self.hedgeable = False
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
            return self._in_time(choice, 0.0, now)
        if last.sent and not self.resendable:
            return Stop(reason=semconv.STOP_NOT_RETRYABLE)
        if last.kind is _DROPPED:  # sent again there at once, as it came (``dropped``)
            again = self.core.admit(self.records[-1].domain, now)
            if again is not None:
                return self._in_time(again, 0.0, now)
        choice = self._choose(now, self._orders[1])
        tried = self._failed_here()
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
        decided = self._in_time(choice, delay, now)
        if not transparent and decided.__class__ is not Stop:
            self._counted += 1
        return decided

    def _in_time(self, choice: Choice, delay: float, now: float) -> tuple[Choice, float, float] | Stop:
        """``choice``, sent after ``delay``, with the time it may take; a stop when the
        deadline leaves it less than :data:`MIN_ATTEMPT_TIME` (a socket's timeout must
        be positive). In testing mode (``_testing``) it is sent at once, decided alike."""
        timeout = self._timeout(now + delay)
        if timeout < MIN_ATTEMPT_TIME:
            return Stop(reason=semconv.STOP_DEADLINE)
        return choice, 0.0 if _TESTING.skip_waits else delay, timeout

    def _wait_for_probe(self, now: float, *, besides: Sequence[Domain]) -> Wait | None:
        """Wait, if time allows, for another request's probe of a domain not in
        ``besides``, or for the moment this request may probe an open domain early."""
        if self.pinned is not None:
            return None
        budget = min(self.core.policy.probe_wait - self._waited, self.deadline_at - now)
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
        return core.choose(now, self._failed_here() if self.records else (), members, self._early_allowed)

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
        schedule = self.core.policy.schedule
        if isinstance(schedule, ExponentialBackoff):
            delay = schedule.delay(self._counted, self.core.random)
        else:
            index = min(self._counted, len(schedule.steps) - 1)
            delay = max(0.0, self.started_at + schedule.offset(index, self.core.random) - now)
        last = self.last_outcome
        if last is not None and last.retry_after is not None:
            delay = max(delay, min(last.retry_after, self.core.policy.retry_after_cap))
        return delay

    def _timeout(self, start: float) -> float:
        """The time an attempt starting at ``start`` may take: to the deadline, capped
        by the per-attempt timeout."""
        timeout = self.deadline_at - start
        cap = self.core.policy.attempt_timeout
        return timeout if cap is None or cap > timeout else cap  # not min(): 0.1 us a call

    # -- record -----------------------------------------------------------------------

    def record(
        self, outcome: Outcome, now: float, duration: float, attempt: Attempt | None = None
    ) -> tuple[Event, ...]:
        """Report what an attempt in flight did (``attempt``: which one, when a hedge
        races it); returns the events it caused. :meth:`next` decides what follows."""
        if attempt is None:  # the only one (_land raises when none, or several, are in flight)
            attempt = self.flying[0] if len(self.flying) == 1 else self._land(None)
        return self.answer(attempt, outcome, now, duration, decide=False)

    def answer(
        self, attempt: Attempt, outcome: Outcome, now: float, duration: float, decide: bool = True
    ) -> tuple[Event, ...]:
        """Report what ``attempt`` (in flight) did, and, when the request goes on with
        nothing else in flight, decide its next step under the same lock (``decide``):
        :meth:`next` hands it out. The events the outcome caused.

        A decided attempt is not in flight until it is handed out: a hedge timer that
        looks meanwhile sees nothing to hedge (an attempt that sat in the in-flight list
        there re-armed the timers for ever), and :meth:`abandon` releases it."""
        try:
            self.flying.remove(attempt)  # by identity: an attempt equals only itself
        except ValueError:
            self._land(attempt)  # raises: it is not in flight
        if outcome.kind is _DROPPED:
            outcome = self.dropped(attempt, outcome)
        domain = attempt.domain
        attempt.outcome = outcome
        attempt.duration = duration
        if attempt.raced:
            attempt.race = semconv.HEDGE_LOST if outcome.retryable else semconv.HEDGE_WON
        self.records.append(attempt)
        self.last_outcome = outcome
        events: list[Event] = []
        core = self.core
        with core.lock:
            slow = (
                False if core.slow_calls is None
                else self._slow_call(attempt, now, self._judged(duration, attempt.waited), events)
            )
            if outcome.failed or (slow and attempt.probe and core.faster_elsewhere(domain)):  # a slow probe fails
                transition = attempt.breaker.failure(now, attempt.sent_at, attempt.probe)
                if outcome.failed:
                    self._failed_on = (domain, outcome.error_type or "failure")
                self._add_transition(events, domain, transition, None if outcome.failed else _SLOW)
            elif outcome.kind is _DROPPED:  # no verdict: it is sent there again
                pass
            else:  # the domain answered: healthy, even when it asks to slow down
                transition = attempt.breaker.success(now, attempt.sent_at, attempt.probe)
                if core.latency is not None:
                    core.latency[domain].add(duration)
                if transition is not None:  # rare: the common success changes nothing
                    self._add_transition(events, domain, transition)
            budget = core.budget
            if outcome.retryable:
                if budget is not None and attempt.number > 1 and outcome.sent and not attempt.hedge:
                    budget.charge()  # a failed retry: the only thing the budget charges
                if decide and not self.flying:  # the request goes on: what next, under this lock
                    self._decided = decided = self._next(now)
                    if decided.__class__ is Attempt:
                        self.flying.pop()  # not in flight until next() hands it out
            else:
                self.done = True
                if budget is not None:
                    budget.refund()
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

    def dropped(self, attempt: Attempt, outcome: Outcome) -> Outcome:
        """What ``attempt``'s connection closing before any byte of the answer means
        (``outcome``, ``OutcomeKind.DROPPED``; it is no longer in flight): the server closed
        a connection as the request went out, which says nothing about the domain, and
        ``outcome`` stands (no verdict; :meth:`_decide` sends the request there again) for
        the first such drop of a request that may be sent again, on an ordinary attempt
        with nothing else in flight; and for a later one of a resend that met a kept-alive
        connection too (``attempt.new_connection`` False: its server closed its idle
        connections together), up to :data:`RESENDS` resends. Any other drop is the
        domain's failure: one on a new connection after the first (the server closes
        every connection) or on one that could not be told, a probe's (its verdict is due),
        a hedge's or one raced by another attempt (the race decides), or one of a request
        that may not be re-sent (RFC 9112, 9.3.1: only an idempotent request is retried
        automatically)."""
        drops = self._drops
        if (
            self.resendable
            and (not drops or (attempt.new_connection is False and drops < RESENDS))
            and not attempt.probe
            and not attempt.raced
            and not self.flying
        ):
            self._drops = drops + 1
            return outcome
        return Outcome(kind=OutcomeKind.FAILURE, error_type=outcome.error_type, sent=outcome.sent)

    @staticmethod
    def answered_alone(core: PoolCore, attempt: Attempt, now: float) -> bool:
        """Record a success of ``attempt``, the first of a request that has no plan
        (``_exchange.Lane``: a plain pool's, ``PoolCore.plain``, or a hedging pool's that is
        otherwise plain, ``PoolCore.lane_hedges``, whose hedge did not fall due), when the
        pool serves its domain already; False, recording nothing, when it does not: the
        request's plan records it then.

        This is :meth:`answer` for that case, which the stateful tests hold equal to it: a
        success that is not a probe's never moves a breaker (``Breaker.success``), a lone
        attempt is not raced, and an answer from the domain the pool serves moves the pool
        nowhere; what is left is the breaker's count, the domain's latency window (an
        adaptive hedge delay's) and the budget's refund, under the one lock.

        Most such answers change nothing: the domain's breaker is quiet (``Breaker.quiet``),
        no latency is kept and the budget is full (``TokenBucket.full``), each read as an
        attribute, not asked with a call. Those take no lock.
        Each field is read whole under the GIL, and a success that writes nothing takes its
        place at the reads: a failure, a switch or a spent token that another thread records
        after them follows it, as it would follow the locked success; one recorded before
        them is read, and the answer takes the lock. The lock cost a request about 0.4 µs
        of CPU in process: 0.54 -> 0.52 of what issue 27's filing commit adds (3 processes)."""
        breaker, budget = attempt.breaker, core.budget
        if (
            core.serving is attempt.domain
            and breaker.quiet
            and core.latency is None
            and (budget is None or budget.full)
        ):
            return True
        with core.lock:
            if core.serving is not attempt.domain:
                return False
            attempt.breaker.success(now, attempt.sent_at, False)
            if core.latency is not None:
                core.latency[attempt.domain].add(now - attempt.sent_at)
            if core.budget is not None:
                core.budget.refund()
        return True

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

    def _slow_call(self, attempt: Attempt, now: float, judged: float, events: list[Event]) -> bool:
        """Count the call, which took ``judged`` seconds of the domain's (:meth:`_judged`),
        in its domain's slow-call window (the caller holds the lock); eject the domain when
        its slow calls reach the rate. True if it was slow."""
        windows = self.core.slow_calls
        assert windows is not None
        window = windows[attempt.domain]
        slow = window.is_slow(judged)
        if slow:
            events.append(SlowCall(pool=self.pool, domain=attempt.domain))
        rate_reached = window.add(now, judged, attempt, self._judged)
        if rate_reached and not attempt.probe and self.core.faster_elsewhere(attempt.domain):
            transition = self.core.breakers[attempt.domain].eject(now)
            self._add_transition(events, attempt.domain, transition, _SLOW)
        return slow

    def _judged(self, duration: float, waited: float = 0.0) -> float:
        """What a call that took ``duration`` seconds is judged on for slowness: its
        duration less the client's own delay, which is not the domain's. That is the
        longer of two lower bounds of it: how long the client ran late meanwhile
        (:meth:`_client_late`), and how long it held the call up before its request left
        and after its answer came (``waited``, the kernel's word: ``Attempt.waited``; none
        for a call still in flight)."""
        late = self._client_late(duration)
        return duration - (late if late > waited else waited)

    def _client_late(self, span: float) -> float:
        """How long the client itself ran late within the last ``span`` seconds (its event
        loop's lateness, :mod:`._looplag`): none for a sync request, which the loop
        measure cannot tell from its own blocking call (the kernel's word,
        ``Attempt.waited``, covers a thread kept from the GIL)."""
        return 0.0

    def cancel(self, attempt: Attempt, now: float, elapsed: float, sent: bool = True) -> tuple[Event, ...]:
        """Another attempt won while ``attempt`` was in flight: it is cut off (``sent``:
        after it was handed to the network, so bytes may have left). Its domain's
        breaker counts nothing (a probe's lease is released), but the time it ran
        enters its domain's latency window (a lower bound of its answer's), and a call
        already slower than the slow-call threshold counts as a slow call, unless the
        winner was sent no later (:meth:`_outrun`)."""
        attempt = self._land(attempt)
        attempt.outcome = _CUT[sent]
        attempt.duration = elapsed
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
                judged = self._judged(elapsed)
                if core.slow_calls[attempt.domain].is_slow(judged) and not self._outrun(attempt):
                    self._slow_call(attempt, now, judged, events)
                else:
                    core.slow_calls[attempt.domain].forget(attempt)
        return tuple(events)

    def _outrun(self, attempt: Attempt) -> bool:
        """Was ``attempt``, cut, beaten by an attempt sent no later than it? Then it had less
        time than the winner took, and its time is no evidence against its domain: the
        winner's answer, no faster, is judged on its own. Most often the client's own delays
        made both calls long (a hedge beaten by the attempt it hedged, threads waiting for
        the GIL: twelve threads beside four CPU-bound ones, hedging after 20 ms, ejected a
        healthy backup in 3 runs of 3 on cut hedges alone). A loser sent before the winner
        still counts: a slow domain's attempts are beaten by their hedges."""
        for record in reversed(self.records):
            if record.race == _WON:
                return record.sent_at <= attempt.sent_at
        return False  # no winner (cut for an error of the caller's stack): judged on its time

    def abandon(self, now: float) -> tuple[Event, ...]:
        """The attempts in flight ended without an outcome (cancelled, or an error that
        says nothing about the domain): release their probes, count nothing."""
        self.done = True
        events: list[Event] = []
        flying, self.flying = self.flying, []
        decided, self._decided = self._decided, None
        if isinstance(decided, Attempt):  # decided by answer(), never handed out: released alike
            flying.append(decided)
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
