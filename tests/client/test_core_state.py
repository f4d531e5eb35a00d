"""The decision core under any interleaving of many concurrent requests (hypothesis stateful).

Many plans are open at once on one pool, as with hundreds of tasks sharing a
transport: each rule moves one of them a step (decide, or report an outcome),
abandons one, or moves the clock. The invariants are the core's promises. The
pool may steer (a weighted canary, affinity domains, a named order): steered
requests obey the same rules, and their first attempt is the first healthy
domain of their own order.

A request in a plain pool may also start in the fast lane, as the front-ends' do
(``_exchange.Lane``): its first attempt is the pool's choice with no plan, its success is
recorded by ``RequestPlan.answered_alone``, and anything else hands it to a plan that
takes that attempt over. Each success the lane records is checked against what
``RequestPlan.answer`` does to a twin of the pool in the same state: the same breakers,
budget, serving domain, hedge throttle and latency windows, and no event.

The pool may hedge (a fixed or an adaptive delay) and then takes the lane too, as the
sync front-ends' does: a hedgeable request's lane earns the throttle its token as a plan's
first attempt does (checked against a twin whose plan took its first step), and when its
hedge falls due, the race builds its plan with the lane's attempt in flight
(``Exchange.adopting``), which may hedge; whichever attempt wins, the other is cut. The
throttle counts each hedgeable request once, wherever it started.
"""

from __future__ import annotations

import copy
import math
import os
import threading
from collections import Counter
from collections.abc import Callable

import httpx
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from pytest_failover import ExponentialBackoff, Hedging, Policy, Pool, RetryBudget
from pytest_failover._breaker import Breaker, BreakerState, Standing
from pytest_failover._classify import Outcome, OutcomeKind
from pytest_failover._core import FailoverCore
from pytest_failover._plan import MIN_ATTEMPT_TIME, RESENDS, RequestPlan
from pytest_failover._pool import Domain
from pytest_failover._pools import PoolCore
from pytest_failover._values import (
    DEFAULT_OPTIONS,
    Attempt,
    BreakerEvent,
    RequestOptions,
    Stop,
    Wait,
    new_attempt,
)

DOMAINS = ["https://a.example", "https://b.example", "https://c.example"]
OUTCOMES = {
    "ok": Outcome(kind=OutcomeKind.SUCCESS, status=200),
    "404": Outcome(kind=OutcomeKind.ANSWER, status=404, error_type="404"),
    "refused": Outcome(kind=OutcomeKind.FAILURE, error_type="connection_refused", sent=False),
    "reset": Outcome(kind=OutcomeKind.FAILURE, error_type="connection_reset", sent=True),
    "503": Outcome(kind=OutcomeKind.FAILURE, error_type="503", status=503),
    # the server closed the connection as the request went out (its keep-alive timeout)
    "dropped": Outcome(kind=OutcomeKind.DROPPED, error_type="remote_protocol_error", sent=True),
}


class ManyRequestsOnOnePool(RuleBasedStateMachine):
    """Concurrent plans on one pool; the invariants below hold after every step."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0
        self.plans: list[RequestPlan] = []
        self.in_flight: dict[int, Attempt] = {}  # id(plan) -> its attempt in flight
        self.breaker_state: dict[Domain, BreakerState] = {}
        self.attempts_sent = 0
        self.attempts_recorded = 0
        self.early_probes: dict[RequestPlan, int] = {}  # keyed by the plan: ids of finished plans are reused
        self.lanes: list[tuple[str, Attempt]] = []  # requests in the fast lane: method, first attempt in flight
        self.hedgeable_started = 0  # hedgeable requests whose first attempt was decided (plan or lane)
        self.went_out: dict[int, Attempt] = {}  # the attempts that waited a backoff and went out since

    @initialize(
        n=st.integers(2, 3),
        threshold=st.integers(1, 3),
        sticky=st.booleans(),
        budget=st.booleans(),
        steer=st.booleans(),
        hedging=st.sampled_from([None, None, "fixed", "adaptive"]),
    )
    def make_core(
        self, n: int, threshold: int, sticky: bool, budget: bool, steer: bool, hedging: str | None
    ) -> None:
        policy = Policy(
            schedule=ExponentialBackoff(base=0.01, cap=0.1, max_attempts=3),
            breaker_threshold=threshold,
            breaker_cooldown=1.0,
            sticky=sticky,
            retry_budget=RetryBudget(max_tokens=4, token_ratio=0.5) if budget else None,
            deadline=5.0,
            hedging=None if hedging is None else Hedging(delay=0.05 if hedging == "fixed" else None, max_ratio=0.5),
        )
        domains = DOMAINS[:n]
        pool = Pool("api", domains)
        if steer:  # the draw is 0.5: every request without a key tries the canary first
            pool = Pool(
                "api",
                domains,
                weights={domains[-1]: 60},
                affinity_domains=domains[1:],
                region_order={"x": [domains[-1]]},
            )
        self.core = FailoverCore([pool], policy, random=lambda: 0.5)
        self.pool = self.core.pools["api"]
        self.as_built = _pool_facts(FailoverCore([pool], policy, random=lambda: 0.5).pools["api"])
        self.breaker_state = {d: BreakerState.CLOSED for d in self.pool.order}

    def _events(self, events: tuple[object, ...]) -> None:
        for event in events:
            if isinstance(event, BreakerEvent):
                assert event.before is self.breaker_state[event.domain], "transitions skip a state"
                self.breaker_state[event.domain] = event.after

    @rule(
        method=st.sampled_from(["GET", "GET", "POST"]),
        affinity=st.sampled_from([None, "u1", "u2", "u3"]),
        order=st.sampled_from([None, None, "x"]),
        start=st.booleans(),
    )
    def begin(self, method: str, affinity: str | None, order: str | None, start: bool) -> None:
        """A new logical request arrives (steered, when the pool steers); ``start``: it
        takes its first step at once, as a front-end's does (``first``: the pool's lock
        only when needed), else later through ``next``."""
        steers = self.pool.steers
        options = RequestOptions(affinity=affinity if steers else None, order=order if steers else None)
        plan = self.core.begin(
            self.pool,
            method=method,
            headers=httpx.Headers(),
            options=options,
            replayable=True,
            pinned=None,
            now=self.now,
        )
        self.plans.append(plan)
        if start:
            self._step(plan, plan.first)

    def _hedgeable(self, method: str) -> bool:
        """Does a request with ``method`` (no options, a replayable body) hedge in this pool?"""
        return self.pool.hedging is not None and method in self.pool.idempotent_methods

    @precondition(lambda self: self.pool.plain or self.pool.lane_hedges)
    @rule(method=st.sampled_from(["GET", "GET", "POST"]))
    def begin_in_lane(self, method: str) -> None:
        """A new request in the fast lane: the pool's choice, with no plan, unless the
        choice is a probe (then a plan decides it, under the lock). A hedgeable one's
        lane earns the hedge throttle its token (``Lane.racing``): the pool then holds what
        a twin holds whose plan took the same first step."""
        standings = {d: self.pool.standing(d, self.now) for d in self.pool.order}
        attempt = self.pool.first_attempt(self.now, self.pool.orders[0])
        if attempt is None:
            fit = [d for d in self.pool.order if standings[d] in (Standing.HEALTHY, Standing.DUE)]
            assert not fit or standings[fit[0]] is Standing.DUE, f"the lane refused a request to {fit[0]}"
            plan = self.core.begin(self.pool, method, httpx.Headers(), DEFAULT_OPTIONS, True, None, self.now)
            self.plans.append(plan)
            self._step(plan, plan.first)
            return
        fit = [d for d in self.pool.order if standings[d] in (Standing.HEALTHY, Standing.DUE)]
        if fit:
            assert attempt.domain == fit[0], f"the lane's attempt on {attempt.domain}, not {fit[0]}"
        standing = standings[attempt.domain]
        assert standing in (Standing.HEALTHY, Standing.SUSPECT), f"the lane sent to a {standing.label} domain"
        assert not attempt.probe
        assert attempt.number == 1 and attempt.delay == 0.0
        twin = _started_by_a_plan(self.pool, method, self.now, attempt)
        if self._hedgeable(method):  # as Lane.start notes a racing attempt
            with self.pool.lock:
                RequestPlan.noted(self.pool, attempt, True)
            self.hedgeable_started += 1
        assert _pool_facts(self.pool) == _pool_facts(twin), "the lane began apart from a plan"
        self.lanes.append((method, attempt))
        self.attempts_sent += 1

    @precondition(lambda self: any(self._hedgeable(method) for method, _ in self.lanes))
    @rule(pick=st.integers(0, 50), hedge_wins=st.booleans())
    def hedge_falls_due_in_lane(self, pick: int, hedge_wins: bool) -> None:
        """A hedgeable lane's hedge falls due while its attempt is in flight: the race
        builds the request's plan with that attempt in flight (``Exchange.adopting``),
        earning nothing more, and the plan may hedge; whichever attempt wins, the other is
        cut. With no hedge (the throttle, no healthy untried domain), the plan waits for
        its attempt."""
        racing = [i for i, (method, _) in enumerate(self.lanes) if self._hedgeable(method)]
        method, attempt = self.lanes.pop(racing[pick % len(racing)])
        plan = self.core.begin(self.pool, method, httpx.Headers(), DEFAULT_OPTIONS, True, None, attempt.sent_at)
        plan._took(attempt)
        standings = {d: self.pool.standing(d, self.now) for d in self.pool.order}
        hedge = plan.hedge(self.now)
        if not isinstance(hedge, Attempt):
            self.plans.append(plan)
            self.in_flight[id(plan)] = attempt
            return
        assert hedge.hedge and not hedge.probe and hedge.domain != attempt.domain
        assert standings[hedge.domain] is Standing.HEALTHY, f"a hedge to a {standings[hedge.domain].label} domain"
        self.attempts_sent += 1
        winner, loser = (hedge, attempt) if hedge_wins else (attempt, hedge)
        self._events(plan.answer(winner, OUTCOMES["ok"], self.now, self.now - winner.sent_at))
        self._events(plan.cancel(loser, self.now, self.now - loser.sent_at))
        self.attempts_recorded += 2
        assert plan.done and not plan.flying

    @precondition(lambda self: bool(self.lanes))
    @rule(pick=st.integers(0, 50), result=st.sampled_from(sorted(OUTCOMES)))
    def report_lane(self, pick: int, result: str) -> None:
        """A lane's attempt ends: a success the lane may record alone, or the request's
        plan takes the attempt over and records it."""
        method, attempt = self.lanes.pop(pick % len(self.lanes))
        outcome = OUTCOMES[result]
        self.attempts_recorded += 1
        if outcome.kind is OutcomeKind.SUCCESS:
            twin, twin_events = _answered_by_a_plan(self.pool, attempt, method, outcome, self.now)
            before = _pool_facts(self.pool)
            if RequestPlan.answered_alone(self.pool, attempt, self.now):
                assert twin_events == (), f"the lane recorded alone a success that caused {twin_events}"
                assert _pool_facts(self.pool) == _pool_facts(twin), "the lane and a plan left the pool apart"
                return
            assert _pool_facts(self.pool) == before, "the lane changed the pool and handed the request over"
        plan = self.core.begin(self.pool, method, httpx.Headers(), DEFAULT_OPTIONS, True, None, attempt.sent_at)
        plan._took(attempt)
        self._events(plan.record(outcome, self.now, duration=0.0))
        if not plan.done:
            self.plans.append(plan)

    @precondition(lambda self: bool(self.lanes))
    @rule(pick=st.integers(0, 50))
    def abandon_lane(self, pick: int) -> None:
        """A request is cancelled while its lane's attempt is in flight: its plan takes the
        attempt over and abandons it, as the front-ends do."""
        method, attempt = self.lanes.pop(pick % len(self.lanes))
        self.attempts_sent -= 1  # it never reported: it counts as not sent
        plan = self.core.begin(self.pool, method, httpx.Headers(), DEFAULT_OPTIONS, True, None, attempt.sent_at)
        plan._took(attempt)
        self._events(plan.abandon(self.now))

    @precondition(lambda self: any(id(p) not in self.in_flight for p in self.plans))
    @rule(pick=st.integers(0, 50))
    def decide(self, pick: int) -> None:
        """A request with nothing in flight asks what to do next."""
        waiting = [p for p in self.plans if id(p) not in self.in_flight]
        plan = waiting[pick % len(waiting)]
        self._step(plan, lambda: plan.next(self.now))

    def _step(self, plan: RequestPlan, decide: Callable[[], Attempt | Wait | Stop]) -> None:
        """``plan`` decides its next step (``decide``), which must follow the rules."""
        early_probes = self.early_probes
        standings = {d: self.pool.standing(d, self.now) for d in self.pool.order}
        probes_out = Counter(a.domain for a in self.in_flight.values() if a.probe)
        admitted = {d for d in self.pool.order if self.pool.admits(d, self.now) is not None}
        decision = decide()
        self._events(decision.events)
        if isinstance(decision, Wait):
            assert any(
                b.leased or b.state is BreakerState.OPEN for b in self.pool.breakers.values()
            ), "a wait with neither a probe in flight nor an open domain to probe"
            return
        if isinstance(decision, Stop):
            last = plan.last_outcome
            if last is not None and not last.sent and decision.reason not in ("deadline", "done"):
                untried = [
                    d
                    for d, s in standings.items()
                    if s in (Standing.HEALTHY, Standing.DUE) and d not in plan.tried
                ]
                assert not untried, f"a request that sent nothing was refused {untried} ({decision.reason})"
            self.plans.remove(plan)
            return
        last = plan.last_outcome
        if last is not None and last.kind is OutcomeKind.DROPPED and plan.records[-1].domain in admitted:
            # sent again where its connection was closed, at once (its probe, if the domain is due)
            assert (decision.domain, decision.delay) == (plan.records[-1].domain, 0.0)
        standing = standings[decision.domain]
        if decision.number == 1 and plan.hedgeable:  # it earned the hedge throttle a token
            self.hedgeable_started += 1
        if decision.number == 1:  # the first attempt: the first healthy domain of the request's order
            fit = [d for d in plan.first_order if standings[d] in (Standing.HEALTHY, Standing.DUE)]
            if fit:
                assert decision.domain == fit[0], f"first attempt on {decision.domain}, not {fit[0]}"
        assert standing is not Standing.PROBING, "an attempt on a domain whose probe is in flight"
        if standing is Standing.OPEN or standing is Standing.DUE:
            assert decision.probe, f"an ordinary attempt on a {standing.label} domain"
        if decision.probe:
            assert probes_out[decision.domain] == 0, "two probes in flight on one domain"
        if standing is Standing.OPEN:
            early_probes[plan] = early_probes.get(plan, 0) + 1
            assert early_probes[plan] == 1, "a request made two early probes"
            # not while a domain this request tried works again: another request's answer
            # there cleared its failure since this request's last attempt there ended
            ended: dict[Domain, float] = {}
            for r in plan.records:
                ended[r.domain] = max(ended.get(r.domain, -math.inf), r.sent_at + r.duration)
            came_back = [
                d
                for d, at in ended.items()
                if standings[d] is Standing.HEALTHY and self.pool.breakers[d].recovered_at > at
            ]
            assert not came_back, f"an early probe while {came_back} came back since this request tried it"
        assert self.now + decision.delay + decision.timeout <= plan.deadline_at + 1e-9
        assert decision.timeout >= MIN_ATTEMPT_TIME, f"an attempt with {decision.timeout} s to run"
        self.in_flight[id(plan)] = decision
        self.attempts_sent += 1

    @precondition(lambda self: bool(self.in_flight))
    @rule(pick=st.integers(0, 50), result=st.sampled_from(sorted(OUTCOMES)))
    def report(self, pick: int, result: str) -> None:
        """An attempt in flight reports its outcome."""
        self._report([p for p in self.plans if id(p) in self.in_flight][pick % len(self.in_flight)], result)

    @precondition(lambda self: bool(self._sent_again()))
    @rule(pick=st.integers(0, 50))
    def dropped_again(self, pick: int) -> None:
        """A request sent again after its connection was dropped meets another drop (a
        server that closes every connection unanswered): the domain's failure this time."""
        plans = self._sent_again()
        self._report(plans[pick % len(plans)], "dropped")

    @precondition(lambda self: bool(self._sent_again()))
    @rule(pick=st.integers(0, 50))
    def dropped_on_a_kept_alive_connection(self, pick: int) -> None:
        """A request sent again after a drop meets another kept-alive connection the server
        closed (it closes its idle ones together): no verdict, up to ``RESENDS`` times."""
        plans = self._sent_again()
        plan = plans[pick % len(plans)]
        self.in_flight[id(plan)].new_connection = False
        self._report(plan, "dropped")

    def _sent_again(self) -> list[RequestPlan]:
        """The plans with an attempt in flight whose last attempt's connection was dropped."""
        return [
            p
            for p in self.plans
            if id(p) in self.in_flight and p.last_outcome is not None and p.last_outcome.kind is OutcomeKind.DROPPED
        ]

    def _report(self, plan: RequestPlan, result: str) -> None:
        attempt = self.in_flight.pop(id(plan))
        before = len(plan.records)
        breaker = [getattr(attempt.breaker, name) for name in Breaker.__slots__]
        resendable = plan.resendable
        dropped_before = [r for r in plan.records if r.outcome.kind is OutcomeKind.DROPPED]
        self._events(plan.record(OUTCOMES[result], self.now + attempt.delay, duration=0.0))
        assert len(plan.records) == before + 1
        if OUTCOMES[result].kind is OutcomeKind.DROPPED:
            # The first drop of a request that may be re-sent, on an ordinary attempt, is no
            # verdict, and so is a later one on a kept-alive connection, up to RESENDS; any
            # other is the domain's failure.
            spared = (
                resendable
                and not attempt.probe
                and (not dropped_before or (attempt.new_connection is False and len(dropped_before) < RESENDS))
            )
            assert attempt.outcome.kind is (OutcomeKind.DROPPED if spared else OutcomeKind.FAILURE)
            if spared:
                assert [getattr(attempt.breaker, name) for name in Breaker.__slots__] == breaker, "a drop moved a breaker"
        self.attempts_recorded += 1
        if plan.done:
            self.plans.remove(plan)

    def _waited(self) -> list[tuple[RequestPlan, Attempt]]:
        """The plans whose attempt in flight waited a backoff and has not gone out yet."""
        return [
            (p, a)
            for p in self.plans
            if (a := self.in_flight.get(id(p))) is not None and a.delay > 0 and id(a) not in self.went_out
        ]

    @precondition(lambda self: bool(self._waited()))
    @rule(pick=st.integers(0, 50))
    def go_out_after_backoff(self, pick: int) -> None:
        """A retry that waited its backoff goes out (``Exchange.prepare``): to a domain the
        pool saw work meanwhile, if any, else as decided (``RequestPlan.resume``)."""
        plan, attempt = self._waited()[pick % len(self._waited())]
        self.went_out[id(attempt)] = attempt
        leases = {d: b.leased for d, b in self.pool.breakers.items()}
        decided = attempt.domain
        moved = plan.resume(attempt, self.now)
        assert {d: b.leased for d, b in self.pool.breakers.items()} == leases, "going out took or left a lease"
        if moved is None:
            assert attempt.domain is decided
            return
        assert moved is decided and attempt.domain != decided
        assert not (attempt.probe or attempt.hedge), "a probe or a hedge went elsewhere than decided"
        assert attempt.breaker is self.pool.breakers[attempt.domain]
        assert self.pool.standing(attempt.domain, self.now) is Standing.HEALTHY, "moved to a domain that is not healthy"
        ended = [r.sent_at + r.duration for r in plan.records if r.domain == attempt.domain]
        assert not ended or self.pool.breakers[attempt.domain].recovered_at > max(ended), (
            "moved back to a domain that failed this request and has not recovered since"
        )

    @precondition(lambda self: bool(self.plans))
    @rule(pick=st.integers(0, 50))
    def abandon(self, pick: int) -> None:
        """A request is cancelled, with or without an attempt in flight."""
        plan = self.plans.pop(pick % len(self.plans))
        if self.in_flight.pop(id(plan), None) is not None:
            self.attempts_sent -= 1  # it never reported: it counts as not sent
        self._events(plan.abandon(self.now))

    @precondition(lambda self: not self.plans and not self.lanes)
    @rule()
    def forget(self) -> None:
        """Between two tests, nothing in flight, what the pool learned is forgotten
        (``PoolCore.forget``, the pytest plugin's ``failover_fresh_state``): it is as built,
        and the requests after it keep every promise below."""
        self.pool.forget()
        assert _pool_facts(self.pool) == self.as_built
        self.breaker_state = {d: BreakerState.CLOSED for d in self.pool.order}
        self.hedgeable_started = 0

    @rule(seconds=st.sampled_from([0.0, 0.01, 0.3, 1.0, 2.5]))
    def tick(self, seconds: float) -> None:
        """Time passes."""
        self.now += seconds

    @invariant()
    def at_most_one_probe_per_domain(self) -> None:
        probes = Counter(a.domain for a in self.in_flight.values() if a.probe)
        assert all(n <= 1 for n in probes.values()), probes

    @invariant()
    def leases_match_probes_in_flight(self) -> None:
        probes = {a.domain for a in self.in_flight.values() if a.probe}
        for domain, breaker in self.pool.breakers.items():
            assert breaker.leased == (domain in probes), f"{domain}: lease without its probe, or back"

    @invariant()
    def breaker_states_follow_the_events(self) -> None:
        for domain, breaker in self.pool.breakers.items():
            assert breaker.state is self.breaker_state.get(domain, BreakerState.CLOSED)

    @invariant()
    def a_counted_failure_leaves_the_breaker_unquiet(self) -> None:
        """``Breaker.quiet`` (a success that changes nothing, recorded without the lock)
        reads ``failed_at`` alone for the failure count: every counted failure sets it."""
        for domain, breaker in self.pool.breakers.items():
            assert breaker.failures == 0 or breaker.failed_at is not None, f"{domain}: failures without failed_at"

    @invariant()
    def the_attributes_the_happy_path_reads_follow_their_fields(self) -> None:
        """``Breaker.quiet`` and ``TokenBucket.full`` are kept by each write, not worked out
        when read: after every step they say what their fields say."""
        for domain, breaker in self.pool.breakers.items():
            quiet = breaker.state is BreakerState.CLOSED and breaker.failed_at is None and not breaker.leased
            assert breaker.quiet is quiet, f"{domain}: quiet is {breaker.quiet}, its fields say {quiet}"
        budget = self.pool.budget
        if budget is not None:
            assert budget.full is (budget.tokens >= budget.max_tokens), "the budget's full is stale"

    @invariant()
    def the_throttle_counts_each_hedgeable_request_once(self) -> None:
        throttle = getattr(self, "pool", None) and self.pool.throttle
        if throttle:
            assert throttle.requests == self.hedgeable_started, "a hedgeable request earned no token, or two"
            assert throttle.hedges <= throttle.ratio * throttle.requests + 1e-9, "more hedges than the throttle allows"

    @invariant()
    def counts_are_consistent(self) -> None:
        assert self.attempts_sent == self.attempts_recorded + len(self.in_flight) + len(self.lanes)
        budget = self.pool.budget
        if budget is not None:
            assert 0 <= budget.tokens <= budget.max_tokens


def _pool_facts(pool: PoolCore) -> tuple[object, ...]:
    """What a request's start or answer may change in a pool: each breaker's fields, the
    budget's tokens, the serving domain and since when, the hedge throttle's counts and
    each domain's latency window."""
    breakers = tuple(
        sorted((d.url, tuple(getattr(b, name) for name in Breaker.__slots__)) for d, b in pool.breakers.items())
    )
    tokens = None if pool.budget is None else pool.budget.tokens
    throttle = pool.throttle
    hedging = None if throttle is None else (throttle.requests, throttle.hedges, throttle.tokens)
    latency = None if pool.latency is None else sorted((d.url, list(w._arrived)) for d, w in pool.latency.items())
    return breakers, tokens, pool.serving, pool.serving_since, hedging, latency


def _twin(pool: PoolCore) -> PoolCore:
    """A copy of ``pool`` whose state (breakers, budget, serving domain, hedge throttle,
    latency windows) is its own."""
    twin = copy.copy(pool)
    twin.breakers = {d: copy.copy(b) for d, b in pool.breakers.items()}
    twin.budget = copy.copy(pool.budget)
    twin.throttle = copy.copy(pool.throttle)
    twin.latency = copy.deepcopy(pool.latency)
    twin.lock = threading.Lock()
    return twin


def _started_by_a_plan(pool: PoolCore, method: str, now: float, attempt: Attempt) -> PoolCore:
    """A twin of ``pool`` after a plan of a request with ``method`` took its first step
    (``RequestPlan.first``): the same attempt the lane took (``attempt``)."""
    twin = _twin(pool)
    plan = RequestPlan(twin, method, httpx.Headers(), DEFAULT_OPTIONS, True, None, now)
    step = plan.first()
    assert isinstance(step, Attempt) and step.domain == attempt.domain and not step.probe
    return twin


def _answered_by_a_plan(
    pool: PoolCore, attempt: Attempt, method: str, outcome: Outcome, now: float
) -> tuple[PoolCore, tuple[object, ...]]:
    """A twin of ``pool`` after a plan recorded ``attempt``'s ``outcome`` on it (its
    duration: from when it was sent to ``now``), and the events that caused: what the lane
    must match when it records the success alone."""
    twin = _twin(pool)
    twin_attempt = new_attempt(1, attempt.domain, twin.breakers[attempt.domain], 0.0, attempt.timeout, attempt.sent_at)
    plan = RequestPlan(twin, method, httpx.Headers(), DEFAULT_OPTIONS, True, None, attempt.sent_at)
    plan._took(twin_attempt)
    return twin, plan.answer(twin_attempt, outcome, now, now - attempt.sent_at)


ManyRequestsOnOnePool.TestCase.settings = settings(
    max_examples=int(os.environ.get("HYPOTHESIS_EXAMPLES", 200)), stateful_step_count=60, deadline=None
)
TestManyRequestsOnOnePool = ManyRequestsOnOnePool.TestCase
