"""Hedging and slow-call ejection under any interleaving of concurrent requests (hypothesis stateful).

Many plans share one pool with ``Policy(hedging=..., slow_calls=...)``: each rule
begins a request, sends its next attempt, hedges one with attempts in flight,
reports one attempt's outcome and duration (a winner cuts the others off, as the
transports do), abandons a request, or moves the clock. The invariants are the
promises of issue #11: a hedge goes only to a healthy domain (never an open or
suspect one, never as a probe), never twice to one domain, never for a request
that cannot be sent twice, at most ``max_extra`` per request; the pool's hedges stay within ``max_ratio`` of its
hedgeable requests; leases match the probes in flight; breakers move only through
their events, and slow calls open one only with ``minimum_calls`` calls seen, and
never the last closed one; and only on calls slow on the domain's own time: their
duration less the longer of how late the client's own event loop ran (a rule sets it:
``_looplag``) and how long the answer sat unread (``Attempt.waited``, the kernel's word:
a rule sets what share of each call). A verdict needs at least half the window's calls
slow, and the machine bounds both: the calls that ended slow on their domain's time
since the window was last cleared, each with the calls in flight it may have counted,
are at least two and at least half the calls that surely count in it. A loser cut off
counts as a slow call exactly when it ran past the threshold on its domain's time and was
sent before the winner (a race rule makes such cuts common).
"""

from __future__ import annotations

import math
import os
from collections import Counter
from collections.abc import Callable

import httpx
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from pytest_failover import ExponentialBackoff, Hedging, Policy, Pool, SlowCalls
from pytest_failover._breaker import BreakerState, Standing
from pytest_failover._classify import Outcome, OutcomeKind
from pytest_failover._core import FailoverCore
from pytest_failover._plan import RequestPlan
from pytest_failover._values import (
    Attempt,
    BreakerEvent,
    HedgeThrottled,
    RequestOptions,
    SlowCall,
    Stop,
    Wait,
)

DOMAINS = ["https://a.example", "https://b.example", "https://c.example"]
OUTCOMES = {
    "ok": Outcome(kind=OutcomeKind.SUCCESS, status=200),
    "refused": Outcome(kind=OutcomeKind.FAILURE, error_type="connection_refused", sent=False),
    "503": Outcome(kind=OutcomeKind.FAILURE, error_type="503", status=503),
    # the server closed the connection as the request went out (its keep-alive timeout)
    "dropped": Outcome(kind=OutcomeKind.DROPPED, error_type="remote_protocol_error", sent=True),
}
THRESHOLD = 0.1
MINIMUM_CALLS = 3
WINDOW = 10.0


class HedgedRequestsOnOnePool(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0
        self.plans: list[RequestPlan] = []
        self.flights: dict[RequestPlan, dict[int, Attempt]] = {}
        self.breaker_state: dict[str, BreakerState] = {}
        self.sent = 0
        self.ended = 0  # recorded or cancelled
        self.hedgeable_begun = 0
        self.hedges = 0
        self.late = 0.0  # how late the client's event loop ran (seconds, at most), as every plan is told
        self.sat = 0.0  # the share of each call's time its answer then sat unread
        # Per domain, since its window was last cleared: for each call that ended slow on
        # the domain's own time, 1 + the calls then in flight past the threshold (which it
        # may have counted as slow: at most that many slow calls); and when each call that
        # ended was sent (one sent since the clear counts in the window once).
        self.slow_ends: dict[str, list[int]] = {}
        self.ended_sent: dict[str, list[float]] = {}
        self.cleared_at: dict[str, float] = {}
        self.slow_here = False  # the call the last report ended was slow on its domain's time

    @initialize(n=st.integers(2, 3), max_extra=st.integers(1, 2), ratio=st.sampled_from([0.1, 0.5, 1.0]))
    def make_core(self, n: int, max_extra: int, ratio: float) -> None:
        self.max_extra = max_extra
        self.ratio = ratio
        policy = Policy(
            schedule=ExponentialBackoff(base=0.01, cap=0.1, max_attempts=3),
            breaker_threshold=2,
            breaker_cooldown=1.0,
            deadline=5.0,
            hedging=Hedging(delay=0.05, max_extra=max_extra, max_ratio=ratio),
            slow_calls=SlowCalls(threshold=THRESHOLD, rate=0.5, minimum_calls=MINIMUM_CALLS, window=WINDOW),
        )
        self.core = FailoverCore([Pool("api", DOMAINS[:n])], policy, random=lambda: 0.5)
        self.pool = self.core.pools["api"]
        self.breaker_state = {d.url: BreakerState.CLOSED for d in self.pool.order}
        self.sent_to: Counter[str] = Counter()  # attempts sent to each domain

    def _events(self, events: tuple[object, ...], probe: bool = False) -> None:
        """Follow the breakers; ``probe``: the events of a probe's outcome (a slow probe
        fails like any failed probe, whatever the window holds)."""
        for event in events:
            if isinstance(event, BreakerEvent):
                url = event.domain.url
                assert event.before is self.breaker_state[url], "transitions skip a state"
                self.breaker_state[url] = event.after
                if event.reason == "slow_calls" and probe:  # its own answer was slow
                    assert self.slow_here, "a probe failed as slow on the client's own time"
                elif event.reason == "slow_calls":
                    # at most this many slow calls in the window, and at least that many calls
                    slow = sum(self.slow_ends.get(url, []))
                    since = max(self.cleared_at.get(url, -math.inf), self.now - WINDOW * 0.9)  # 10 buckets
                    calls = sum(sent >= since for sent in self.ended_sent.get(url, []))
                    assert slow >= 2 and slow >= 0.5 * calls, f"slow calls judged on the client's own time: {slow} of {calls}"
                    self._cleared(url)
                if event.reason == "slow_calls" and event.before is BreakerState.CLOSED and not probe:
                    # a window counts calls that ended and calls in flight: all were sent
                    assert self.sent_to[url] >= MINIMUM_CALLS, "ejected before minimum_calls"
                    # and never the last closed domain: slow answers beat none
                    closed = [d for d, state in self.breaker_state.items() if state is BreakerState.CLOSED]
                    assert closed, "slow calls ejected the last closed domain"

    @rule(
        method=st.sampled_from(["GET", "GET", "POST"]),
        hedge=st.sampled_from([True, True, False]),
        start=st.booleans(),
    )
    def begin(self, method: str, hedge: bool, start: bool) -> None:
        """A new request; ``start``: it takes its first step at once, as a front-end's
        does (``first``), else later through ``next``."""
        plan = self.core.begin(
            self.pool, method, httpx.Headers(), RequestOptions(hedge=hedge), True, None, self.now
        )
        plan._client_late = lambda span: min(span, self.late)  # type: ignore[method-assign]  # its event loop's, as this machine sets it
        self.plans.append(plan)
        self.flights[plan] = {}
        if start:
            self._step(plan, plan.first)

    @precondition(lambda self: any(not self.flights[p] for p in self.plans))
    @rule(pick=st.integers(0, 50))
    def decide(self, pick: int) -> None:
        idle = [p for p in self.plans if not self.flights[p]]
        plan = idle[pick % len(idle)]
        self._step(plan, lambda: plan.next(self.now))

    def _step(self, plan: RequestPlan, decide: Callable[[], Attempt | Wait | Stop]) -> None:
        """``plan`` decides its next step (``decide``)."""
        first = not plan.records
        decision = decide()
        self._events(decision.events)
        if isinstance(decision, Wait):
            return
        if isinstance(decision, Stop):
            self._finish(plan)
            return
        if first and plan.hedgeable:
            self.hedgeable_begun += 1
        self.flights[plan][decision.number] = decision
        self.sent += 1
        self.sent_to[decision.domain.url] += 1

    @precondition(lambda self: any(self.flights[p] for p in self.plans))
    @rule(pick=st.integers(0, 50))
    def hedge(self, pick: int) -> None:
        flying = [p for p in self.plans if self.flights[p]]
        self._hedge(flying[pick % len(flying)])

    def _hedge(self, plan: RequestPlan) -> None:
        """``plan`` hedges now, if it may."""
        standings = {d: self.pool.standing(d, self.now) for d in self.pool.order}
        in_flight = {a.domain for a in self.flights[plan].values()}
        decision = plan.hedge(self.now)
        if decision is None or isinstance(decision, HedgeThrottled):
            return
        assert decision.hedge and not decision.probe
        assert plan.method != "POST", "a request that cannot be sent twice was hedged"
        # never a suspect domain: it failed within its cooldown, and one probe brings it back
        assert standings[decision.domain] is Standing.HEALTHY, standings[decision.domain]
        assert decision.domain not in in_flight, "a hedge to a domain this request has in flight"
        assert sum(a.hedge for a in self.flights[plan].values()) < self.max_extra
        self.flights[plan][decision.number] = decision
        self.sent += 1
        self.sent_to[decision.domain.url] += 1
        self.hedges += 1

    @precondition(lambda self: any(self.flights[p] for p in self.plans))
    @rule(
        pick=st.integers(0, 50),
        which=st.integers(0, 3),
        result=st.sampled_from(sorted(OUTCOMES)),
        duration=st.sampled_from([0.0, 0.05, 0.5, 0.5]),
    )
    def report(self, pick: int, which: int, result: str, duration: float) -> None:
        flying = [p for p in self.plans if self.flights[p]]
        plan = flying[pick % len(flying)]
        numbers = sorted(self.flights[plan])
        self._report(plan, numbers[which % len(numbers)], result, duration)

    @precondition(lambda self: any(len(self.flights[p]) == 1 for p in self.plans))
    @rule(pick=st.integers(0, 50), gap=st.sampled_from([0.01, 0.3]), first_wins=st.booleans())
    def race(self, pick: int, gap: float, first_wins: bool) -> None:
        """A request with one attempt in flight hedges once the delay passed (if it may), and
        ``gap`` later one of the two answers: the other is cut, as long as it ran (the
        other rules rarely come in this order)."""
        alone = [p for p in self.plans if len(self.flights[p]) == 1]
        plan = alone[pick % len(alone)]
        self.tick(0.06)  # past the hedge delay (0.05)
        self._hedge(plan)
        self.tick(gap)
        numbers = sorted(self.flights[plan])
        self._report(plan, numbers[0 if first_wins else -1], "ok", gap)

    def _report(self, plan: RequestPlan, number: int, result: str, duration: float) -> None:
        """The attempt ``number`` of ``plan`` ended with ``result``, after ``duration``."""
        attempt = self.flights[plan].pop(number)
        others = bool(self.flights[plan])  # attempts of the request still in flight
        attempt.waited = duration * self.sat  # as the exchange reads it (for a call that looks slow)
        url = attempt.domain.url
        self.ended_sent.setdefault(url, []).append(attempt.sent_at)
        self.slow_here = duration - max(min(duration, self.late), attempt.waited) >= THRESHOLD
        if self.slow_here:
            there = [a for f in self.flights.values() for a in f.values() if a.domain == attempt.domain]
            self.slow_ends.setdefault(url, []).append(1 + sum(self.now - a.sent_at >= THRESHOLD for a in there))
        self._events(plan.record(OUTCOMES[result], self.now, duration, attempt), probe=attempt.probe)
        windows = self.pool.slow_calls
        assert windows is not None
        if windows[attempt.domain].counts == (0, 0):  # cleared without a verdict (a probe's, or nowhere faster)
            self._cleared(url)
        self.ended += 1
        if result == "dropped" and (attempt.raced or attempt.probe or others):
            # a race decides, and a probe's verdict is due: only a lone attempt's drop is spared
            assert attempt.outcome.kind is OutcomeKind.FAILURE
        if plan.done:  # the winner: the transports cut the others off
            assert plan.records[-1].race in (None, "won")
            won_sent = attempt.sent_at if attempt.race == "won" else None
            for loser in list(self.flights[plan].values()):
                self._cut(plan, loser, won_sent)
                self.ended += 1
                assert plan.records[-1].race == "cancelled"
            self.flights[plan].clear()
            self._finish(plan)
        elif attempt.raced:
            assert plan.records[-1].race == "lost"

    def _cut(self, plan: RequestPlan, loser: Attempt, won_sent: float | None) -> None:
        """Cut ``loser`` off, as long as it ran. It counts in its domain's window, as a slow
        call, only when slow on its domain's time (no kernel's word: only the loop's
        lateness is left out) and sent before the winner (sent at ``won_sent``; None: no
        winner raced it), which it had longer than: one sent no earlier is no evidence."""
        elapsed = self.now - loser.sent_at
        slow = elapsed - min(elapsed, self.late) >= THRESHOLD and (won_sent is None or loser.sent_at < won_sent)
        if slow:
            url = loser.domain.url
            there = [a for f in self.flights.values() for a in f.values() if a.domain == loser.domain and a is not loser]
            self.slow_ends.setdefault(url, []).append(1 + sum(self.now - a.sent_at >= THRESHOLD for a in there))
            self.ended_sent.setdefault(url, []).append(loser.sent_at)
        events = plan.cancel(loser, self.now, elapsed)
        assert any(isinstance(event, SlowCall) for event in events) == slow, (elapsed, loser.sent_at, won_sent)
        self._events(events)

    @precondition(lambda self: bool(self.plans))
    @rule(pick=st.integers(0, 50))
    def abandon(self, pick: int) -> None:
        plan = self.plans[pick % len(self.plans)]
        self.sent -= len(self.flights[plan])  # never reported: counts as not sent
        self._events(plan.abandon(self.now))
        self.flights[plan].clear()
        self._finish(plan)

    @rule(seconds=st.sampled_from([0.0, 0.01, 0.3, 1.0, 2.5]))
    def tick(self, seconds: float) -> None:
        self.now += seconds

    @rule(late=st.sampled_from([0.0, 0.0, 0.01, 0.2, math.inf]))
    def loop_runs_late(self, late: float) -> None:
        """The client's event loop ran this late (seconds, at most) within any span asked
        about, from now on; ``inf``: all along, so no call takes any of the domain's time."""
        self.late = late

    @rule(sat=st.sampled_from([0.0, 0.5, 1.0, 1.0]))
    def answers_sit(self, sat: float) -> None:
        """From now on each answer sits unread this share of its call's time before the
        client reads it (threads kept from the GIL); 1.0: all along, so no call that ends
        took any of the domain's time."""
        self.sat = sat

    def _cleared(self, url: str) -> None:
        self.slow_ends.pop(url, None)
        self.ended_sent.pop(url, None)
        self.cleared_at[url] = self.now

    def _finish(self, plan: RequestPlan) -> None:
        self.plans.remove(plan)
        del self.flights[plan]

    @invariant()
    def leases_match_probes_in_flight(self) -> None:
        probes = Counter(a.domain for flights in self.flights.values() for a in flights.values() if a.probe)
        assert all(n == 1 for n in probes.values()), probes
        for domain, breaker in self.pool.breakers.items():
            assert breaker.leased == (domain in probes), f"{domain}: lease without its probe, or back"

    @invariant()
    def hedges_stay_within_the_throttle(self) -> None:
        if hasattr(self, "ratio"):
            assert self.hedges <= self.ratio * self.hedgeable_begun + 1e-9

    @invariant()
    def breaker_states_follow_the_events(self) -> None:
        for domain, breaker in self.pool.breakers.items():
            assert breaker.state is self.breaker_state.get(domain.url, BreakerState.CLOSED)

    @invariant()
    def every_attempt_ends_once(self) -> None:
        in_flight = sum(len(f) for f in self.flights.values())
        assert self.sent == self.ended + in_flight


HedgedRequestsOnOnePool.TestCase.settings = settings(max_examples=int(os.environ.get('HYPOTHESIS_EXAMPLES', 150)), stateful_step_count=60, deadline=None)
TestHedgedRequestsOnOnePool = HedgedRequestsOnOnePool.TestCase
