"""The decision core driven directly: explicit clock, explicit outcomes, no sockets."""

from __future__ import annotations

import httpx
import pytest

from pytest_failover import ExponentialBackoff, Policy, Pool, RetryBudget, ScheduleTable, Step
from pytest_failover._breaker import BreakerState
from pytest_failover._classify import Outcome, OutcomeKind
from pytest_failover._core import FailoverCore
from pytest_failover._plan import RequestPlan
from pytest_failover._values import (
    Attempt,
    BreakerEvent,
    BudgetRejected,
    RequestOptions,
    Stop,
    Switch,
    Wait,
)

DOMAINS = ["https://a.example", "https://b.example", "https://c.example", "https://d.example"]
OK = Outcome(kind=OutcomeKind.SUCCESS, status=200)
NOT_FOUND = Outcome(kind=OutcomeKind.ANSWER, status=404, error_type="404")
REFUSED = Outcome(kind=OutcomeKind.FAILURE, error_type="connection_refused", sent=False)
RESET = Outcome(kind=OutcomeKind.FAILURE, error_type="connection_reset", sent=True)
UNAVAILABLE = Outcome(kind=OutcomeKind.FAILURE, error_type="503", status=503)


def no_jitter() -> float:
    return 1.0


def core(n: int = 3, **policy: object) -> FailoverCore:
    policy.setdefault("schedule", ExponentialBackoff(base=0.1, cap=1, max_attempts=n))
    return FailoverCore([Pool("api", DOMAINS[:n])], Policy(**policy), random=no_jitter)  # type: ignore[arg-type]  # Policy's keywords, any field


def plan(c: FailoverCore, now: float, method: str = "GET", **kw: object) -> RequestPlan:
    headers = httpx.Headers(kw.pop("headers", {}))  # type: ignore[arg-type]  # the caller passes a headers mapping
    return c.begin(
        c.pools["api"],
        method=method,
        headers=headers,
        options=RequestOptions(**kw),  # type: ignore[arg-type]  # RequestOptions' keywords, any field
        replayable=True,
        pinned=None,
        now=now,
    )


def attempt(p: RequestPlan, now: float) -> Attempt:
    step = p.next(now)
    assert isinstance(step, Attempt), step
    return step


def run(p: RequestPlan, outcomes: list[Outcome], now: float = 0.0) -> tuple[list[str], Stop]:
    """Feed outcomes until the plan stops; returns the hosts tried and the stop."""
    hosts: list[str] = []
    for outcome in outcomes:
        step = p.next(now)
        if isinstance(step, Stop):
            return hosts, step
        assert isinstance(step, Attempt), step
        hosts.append(step.domain.host)
        now += step.delay
        p.record(outcome, now, duration=0.0)
    step = p.next(now)
    assert isinstance(step, Stop)
    return hosts, step


def test_healthy_state_sends_everything_to_the_primary() -> None:
    """Failover, not round-robin: every request goes to the first domain."""
    c = core()
    for i in range(20):
        hosts, stop = run(plan(c, i), [OK], now=i)
        assert hosts == ["a.example"] and stop.reason == "done"


def test_retry_goes_to_the_next_domain_at_once_and_a_return_waits_a_backoff() -> None:
    """Moving on to an untried domain is failover and goes at once; coming back to a
    domain this request already tried waits a full-jitter backoff."""
    c = core(n=2, breaker_threshold=10, schedule=ExponentialBackoff(base=0.1, cap=1, max_attempts=3))
    p = plan(c, 0.0)
    first = attempt(p, 0.0)
    assert first.delay == 0 and first.domain.host == "a.example"
    p.record(UNAVAILABLE, 0.0, duration=0.0)
    second = attempt(p, 0.0)
    assert second.domain.host == "b.example" and second.delay == 0
    p.record(UNAVAILABLE, 0.0, duration=0.0)
    third = attempt(p, 0.0)
    assert third.domain.host == "a.example" and third.delay == pytest.approx(0.2)  # retry 2: base * 2


def test_failures_before_any_byte_left_move_to_an_untried_domain_at_once() -> None:
    """Transparent failover: DNS or refused on the primary costs no backoff wait and
    no attempt of the schedule, but going back to a domain already tried does."""
    c = core(n=2, breaker_threshold=100, schedule=ExponentialBackoff(base=0.1, max_attempts=3))
    p = plan(c, 0.0)
    attempt(p, 0.0)
    p.record(REFUSED, 0.0, duration=0.0)
    assert attempt(p, 0.0).delay == 0
    p.record(REFUSED, 0.0, duration=0.0)
    third = attempt(p, 0.0)
    assert third.domain.host == "a.example" and third.delay == pytest.approx(0.1)  # the first counted retry


def test_4xx_is_an_answer_never_retried_never_held_against_the_domain() -> None:
    c = core()
    hosts, stop = run(plan(c, 0.0), [NOT_FOUND, OK])
    assert hosts == ["a.example"] and stop.reason == "done"
    assert c.pools["api"].breakers[c.pools["api"].order[0]].failures == 0


def test_post_is_not_resent_after_bytes_left_but_is_after_connect_failures() -> None:
    c = core()
    hosts, stop = run(plan(c, 0.0, method="POST"), [RESET, OK])
    assert hosts == ["a.example"] and stop.reason == "not_retryable"
    hosts, stop = run(plan(core(), 1.0, method="POST"), [REFUSED, OK], now=1.0)
    assert hosts == ["a.example", "b.example"] and stop.reason == "done"


def test_post_with_idempotency_key_or_opt_in_is_retried() -> None:
    c = core()
    hosts, _ = run(plan(c, 0.0, method="POST", headers={"Idempotency-Key": "k1"}), [RESET, OK])
    assert hosts == ["a.example", "b.example"]
    hosts, _ = run(plan(c, 100.0, method="PATCH", idempotent=True), [RESET, OK], now=100.0)
    assert len(hosts) == 2


def test_schedule_bounds_the_attempts() -> None:
    c = core(n=2, schedule=ExponentialBackoff(base=0.1, max_attempts=2))
    hosts, stop = run(plan(c, 0.0), [UNAVAILABLE] * 5)
    assert len(hosts) == 2 and stop.reason == "exhausted"


def test_breaker_opens_then_open_domain_is_skipped_without_an_attempt() -> None:
    c = core(breaker_threshold=2, breaker_cooldown=30, sticky=False)
    for i in range(2):
        run(plan(c, float(i)), [REFUSED, OK], now=float(i))
    a = c.pools["api"].order[0]
    assert c.pools["api"].breakers[a].state is BreakerState.OPEN
    for i in range(10):
        hosts, _ = run(plan(c, 5.0 + i), [OK], now=5.0 + i)
        assert hosts == ["b.example"]


def test_after_cooldown_one_request_probes_the_primary_and_fails_back() -> None:
    c = core(breaker_threshold=1, breaker_cooldown=30)
    run(plan(c, 0.0), [REFUSED, OK])
    p1 = plan(c, 31.0)
    probe = attempt(p1, 31.0)
    assert probe.domain.host == "a.example" and probe.probe
    # a concurrent request does not probe too: it goes to the backup
    p2 = plan(c, 31.0)
    assert attempt(p2, 31.0).domain.host == "b.example"
    events = p1.record(OK, 31.1, duration=0.1)
    assert any(isinstance(e, BreakerEvent) and e.after is BreakerState.CLOSED for e in events)
    switch = [e for e in events if isinstance(e, Switch)]
    assert switch and switch[0].reason == "failback" and switch[0].after.host == "a.example"


def test_an_answer_sent_before_the_pool_moved_does_not_move_it_back() -> None:
    """Under concurrency a request already on the primary when another's failure there
    moved the pool answers late: old news, no switch back (and none forth again with the
    next request), so ``failover.switches`` counts the moves the traffic made."""
    c = core()  # sticky, as by default
    run(plan(c, 0.0), [OK])  # the first answer sets the serving domain: a
    late = plan(c, 1.0)
    assert attempt(late, 1.0).domain.host == "a.example"  # on the wire since 1.0
    failing = plan(c, 1.1)
    assert attempt(failing, 1.1).domain.host == "a.example"
    failing.record(UNAVAILABLE, 1.2, duration=0.1)
    assert attempt(failing, 1.2).domain.host == "b.example"
    moved = failing.record(OK, 1.3, duration=0.1)
    assert [(e.after.host, e.reason) for e in moved if isinstance(e, Switch)] == [("b.example", "503")]
    old_news = late.record(OK, 1.4, duration=0.4)
    assert not [e for e in old_news if isinstance(e, Switch)]
    assert c.pools["api"].serving is not None and c.pools["api"].serving.host == "b.example"
    after = plan(c, 1.5)
    assert attempt(after, 1.5).domain.host == "b.example"  # a is suspect: the pool stays
    assert not [e for e in after.record(OK, 1.6, duration=0.1) if isinstance(e, Switch)]


def test_all_open_keeps_one_early_probe_per_domain_and_the_rest_wait_for_them() -> None:
    """Every domain open: the one whose cooldown ends first is probed at once, one
    probe per domain in flight; other requests wait for the probes, and stop before
    any attempt of their own when the probes fail."""
    c = core(n=2, breaker_threshold=1, breaker_cooldown=30)
    p = plan(c, 0.0)
    attempt(p, 0.0)
    p.record(REFUSED, 0.0, duration=0.0)
    attempt(p, 0.5)
    p.record(REFUSED, 0.5, duration=0.0)  # b opened later: its cooldown ends later
    step = plan(c, 1.0).next(1.0)  # both rest a tenth of the cooldown first
    assert isinstance(step, Stop) and step.reason == "circuit_open"
    probes = [plan(c, 5.0), plan(c, 5.0)]
    first, second = attempt(probes[0], 5.0), attempt(probes[1], 5.0)
    assert first.probe and first.domain.host == "a.example"
    assert second.probe and second.domain.host == "b.example"
    waiting = plan(c, 5.0)
    step = waiting.next(5.0)
    assert isinstance(step, Wait) and 0 < step.delay <= 0.05
    for probe in probes:
        probe.record(UNAVAILABLE, 5.01, duration=0.0)
    for probe in probes:
        assert isinstance(probe.next(5.01), Stop)  # one early probe per request
    step = waiting.next(5.02)
    assert isinstance(step, Stop) and step.reason == "circuit_open"


def test_a_request_waiting_for_a_probe_follows_it_when_it_succeeds() -> None:
    """The probe's success closes the breaker, and the waiting request goes there."""
    c = core(n=1, breaker_threshold=1, breaker_cooldown=30)
    run(plan(c, 0.0), [UNAVAILABLE])
    probe = plan(c, 5.0)
    assert attempt(probe, 5.0).probe
    waiting = plan(c, 5.0)
    assert isinstance(waiting.next(5.0), Wait)
    probe.record(OK, 5.01, duration=0.0)
    assert attempt(waiting, 5.02).domain.host == "a.example"


def test_waiting_for_a_probe_is_bounded_by_probe_wait() -> None:
    """A probe that never reports leaves the waiting request to stop after ``probe_wait``."""
    c = core(n=1, breaker_threshold=1, breaker_cooldown=30, probe_wait=0.1)
    run(plan(c, 0.0), [UNAVAILABLE])
    attempt(plan(c, 5.0), 5.0)  # the probe, in flight for ever
    waiting, now, waited = plan(c, 5.0), 5.0, 0.0
    while isinstance(step := waiting.next(now), Wait):
        now += step.delay
        waited += step.delay
    assert isinstance(step, Stop) and step.reason == "circuit_open"
    assert waited == pytest.approx(0.1)


def test_sticky_last_good_domain_is_tried_first_until_the_primary_cools_down() -> None:
    c = core(breaker_threshold=3, breaker_cooldown=10)
    hosts, _ = run(plan(c, 0.0), [REFUSED, OK])
    assert hosts == ["a.example", "b.example"]
    hosts, _ = run(plan(c, 1.0), [OK], now=1.0)
    assert hosts == ["b.example"]  # the primary failed recently: stay on the backup
    hosts, _ = run(plan(c, 10.5), [OK], now=10.5)
    assert hosts == ["a.example"]  # cooldown over: fail back


def test_without_stickiness_the_primary_is_tried_while_its_breaker_is_closed() -> None:
    c = core(sticky=False)
    run(plan(c, 0.0), [REFUSED, OK])
    hosts, _ = run(plan(c, 1.0), [OK], now=1.0)
    assert hosts == ["a.example"]


def test_retry_after_is_honoured_and_capped() -> None:
    """A ``Retry-After`` lengthens the wait before going back to the server that sent it."""
    c = core(
        n=1,
        retry_after_cap=5.0,
        deadline=60.0,
        breaker_threshold=10,
        schedule=ExponentialBackoff(base=0.1, cap=1, max_attempts=3),
    )
    p = plan(c, 0.0)
    attempt(p, 0.0)
    p.record(Outcome(kind=OutcomeKind.FAILURE, error_type="503", status=503, retry_after=2.0), 0.0, duration=0)
    assert attempt(p, 0.0).delay == pytest.approx(2.0)
    p2 = plan(c, 100.0)
    attempt(p2, 100.0)
    p2.record(Outcome(kind=OutcomeKind.THROTTLED, error_type="429", status=429, retry_after=120.0), 100.0, duration=0)
    assert attempt(p2, 100.0).delay == pytest.approx(5.0)


def test_deadline_stops_attempts_that_could_not_finish() -> None:
    c = core(deadline=1.0, attempt_timeout=10.0)
    p = plan(c, 0.0)
    attempt(p, 0.0)
    p.record(REFUSED, 1.0, duration=1.0)
    step = p.next(1.0)  # no time left at all
    assert isinstance(step, Stop) and step.reason == "deadline"
    c = core(n=1, deadline=1.0, attempt_timeout=10.0, schedule=ExponentialBackoff(base=0.1, cap=1, max_attempts=3))
    p = plan(c, 0.0)
    first = attempt(p, 0.0)
    assert first.timeout == pytest.approx(1.0)  # clamped to the deadline
    p.record(UNAVAILABLE, 0.95, duration=0.95)
    step = p.next(0.95)  # backoff 0.1 would start past the deadline
    assert isinstance(step, Stop) and step.reason == "deadline"


def test_a_drop_past_the_deadline_is_not_sent_again() -> None:
    """A connection dropped as the deadline passed (a server that trickled an answer's head
    until then): nothing is sent again, since no time is left for it (a socket's timeout
    of 0 or less is an error of its own)."""
    c = core(deadline=1.0, attempt_timeout=10.0)
    p = plan(c, 0.0)
    attempt(p, 0.0)
    p.record(Outcome(kind=OutcomeKind.DROPPED, error_type="remote_protocol_error"), 1.5, duration=1.5)
    step = p.next(1.5)
    assert isinstance(step, Stop) and step.reason == "deadline"
    p = plan(c, 0.0)
    attempt(p, 0.0)
    p.record(Outcome(kind=OutcomeKind.DROPPED, error_type="remote_protocol_error"), 0.5, duration=0.5)
    again = attempt(p, 0.5)  # time left: sent there again at once, with what is left
    assert (again.domain.url, again.delay) == (DOMAINS[0], 0.0) and again.timeout == pytest.approx(0.5)


def test_retry_budget_charges_failed_retries_only_and_stops_retries_not_first_attempts() -> None:
    """Failed first attempts are free; each failed retry costs a token; at half the
    retries stop, the first attempts still go out, and successes refund."""
    c = core(n=2, breaker_threshold=1000, retry_budget=RetryBudget(max_tokens=4, token_ratio=1))
    for t in (0.0, 1.0):
        hosts, stop = run(plan(c, t), [UNAVAILABLE, UNAVAILABLE], now=t)  # tokens 4 -> 3 -> 2
        assert len(hosts) == 2
    assert c.pools["api"].budget is not None and c.pools["api"].budget.tokens == 2
    p = plan(c, 1.5)
    hosts, stop = run(p, [UNAVAILABLE, UNAVAILABLE], now=1.5)
    assert hosts == ["a.example"] and stop.reason == "retry_budget"
    assert any(isinstance(e, BudgetRejected) for e in stop.events)
    hosts, stop = run(plan(c, 2.0), [OK], now=2.0)  # successes refund
    assert stop.reason == "done"


def test_agora_table_follows_the_seed_offsets_and_domains() -> None:
    c = FailoverCore([Pool("api", DOMAINS)], Policy.agora(breaker_threshold=100), random=no_jitter)
    p = plan(c, 0.0)
    seen = []
    now = 0.0
    for _ in range(5):
        step = attempt(p, now)
        now += step.delay
        seen.append((round(now, 6), step.domain.host))
        p.record(REFUSED, now, duration=0.0)
    assert seen == [(0, "a.example"), (1, "a.example"), (3, "b.example"), (6, "c.example"), (10, "d.example")]
    assert isinstance(p.next(now), Stop)


def test_table_jitter_pulls_retries_earlier_only() -> None:
    table = ScheduleTable([Step(0, 0), Step(2, 1)], jitter=0.5)
    assert table.offset(1, lambda: 1.0) == 1.0 and table.offset(1, lambda: 0.0) == 2.0
    assert table.offset(0, lambda: 1.0) == 0


def test_pinned_domain_never_fails_over() -> None:
    c = core()
    pool_core = c.pools["api"]
    p = c.begin(
        pool_core,
        method="GET",
        headers=httpx.Headers(),
        options=RequestOptions(),
        replayable=True,
        pinned=pool_core.order[1],
        now=0.0,
    )
    hosts, _ = run(p, [REFUSED, REFUSED, REFUSED])
    assert set(hosts) == {"b.example"}


def test_region_order_changes_the_primary() -> None:
    pool = Pool("api", DOMAINS[:2], region_order={"cn": [DOMAINS[1]]})
    c = FailoverCore([pool], Policy(), region="cn")
    p = plan(c, 0.0)
    assert attempt(p, 0.0).domain.host == "b.example"


def test_routing_and_request_options() -> None:
    c = FailoverCore([Pool("api", DOMAINS[:2]), Pool("auth", ["https://auth.example"])])
    route = c.route(httpx.URL("https://B.example./v1"), RequestOptions())
    assert route is not None and route[0].name == "api"
    assert c.route(httpx.URL("https://other.example/v1"), RequestOptions()) is None
    assert c.route(httpx.URL("https://a.example/v1"), RequestOptions(enabled=False)) is None
    route = c.route(httpx.URL("https://other.example/v1"), RequestOptions(pool="auth"))
    assert route is not None and route[0].name == "auth"
    with pytest.raises(ValueError, match="unknown pool"):
        c.route(httpx.URL("https://a.example"), RequestOptions(pool="nope"))
    with pytest.raises(ValueError, match="not in any pool"):
        c.route(httpx.URL("https://a.example"), RequestOptions(domain="https://x.example"))
    with pytest.raises(ValueError, match="unknown option"):
        RequestOptions.from_extensions({"failover": {"enable": False}})
    with pytest.raises(TypeError, match="must be a bool"):
        RequestOptions.from_extensions({"failover": {"enabled": "no"}})


def test_core_rejects_overlapping_pools_and_stray_policies() -> None:
    with pytest.raises(ValueError, match="is in pools"):
        FailoverCore([Pool("a", DOMAINS[:1]), Pool("b", DOMAINS[:1])])
    with pytest.raises(ValueError, match="unknown pool"):
        FailoverCore([Pool("a", DOMAINS[:1])], {"b": Policy()})


def test_plan_refuses_out_of_order_calls() -> None:
    p = plan(core(), 0.0)
    with pytest.raises(RuntimeError, match="call next"):
        p.record(OK, 0.0, duration=0)
    p.next(0.0)
    with pytest.raises(RuntimeError, match="in flight"):
        p.next(0.0)


def test_answer_decides_the_next_step_and_next_hands_it_out() -> None:
    """``answer`` records a failure and decides the next attempt under the same lock; the
    attempt is not in flight (nothing for a hedge to race) until ``next`` hands it out,
    and it is the attempt ``record`` then ``next`` would have made."""
    decided, recorded = plan(core(), 0.0), plan(core(), 0.0)
    for p in (decided, recorded):
        first = attempt(p, 0.0)
        assert first.domain.host == "a.example"
    decided.answer(decided.in_flight[0], REFUSED, 0.5, 0.5)
    recorded.record(REFUSED, 0.5, duration=0.5)
    assert not decided.in_flight and decided.tried == [decided.records[0].domain]
    handed = attempt(decided, 9.0)  # the step decided at 0.5, not one decided now
    made = attempt(recorded, 0.5)
    assert decided.in_flight == (handed,)
    assert (handed.number, handed.domain, handed.delay, handed.sent_at) == (made.number, made.domain, made.delay, made.sent_at)
    decided.answer(handed, OK, 9.5, 0.1)
    assert decided.done and decided.next(10.0).reason == "done"  # type: ignore[union-attr]  # a Stop


def test_abandon_releases_the_probe_lease_of_an_attempt_answer_decided() -> None:
    """A probe that ``answer`` decided but nobody sent (the request was cancelled first)
    gives its domain's lease back: the domain is due again at once, not PROBING for ever."""
    c = core(n=2, breaker_threshold=1, breaker_cooldown=10, sticky=False)
    run(plan(c, 0.0), [REFUSED, OK])  # a opens for 10 s; b answers
    p = plan(c, 1.0)
    assert attempt(p, 1.0).domain.host == "b.example"  # a is open
    breaker = c.pools["api"].breakers[p.core.order[0]]
    p.answer(p.in_flight[0], REFUSED, 11.0, 0.1)  # b fails once a is due: a's probe is decided
    assert breaker.leased and breaker.state is BreakerState.HALF_OPEN and p.in_flight == ()
    events = p.abandon(11.0)
    assert not breaker.leased and breaker.state is BreakerState.OPEN
    assert any(isinstance(e, BreakerEvent) and e.after is BreakerState.OPEN for e in events)
    assert attempt(plan(c, 11.0), 11.0).probe  # due again at once: the next request probes it


def test_a_failure_that_sent_nothing_is_never_refused_by_a_drained_budget() -> None:
    """With the budget spent, a refused primary still moves to the untried backup at once."""
    c = core(n=2, breaker_threshold=1000, retry_budget=RetryBudget(max_tokens=2, token_ratio=0.1))
    for t in (0.0, 1.0):
        run(plan(c, t), [UNAVAILABLE, UNAVAILABLE], now=t)
    budget = c.pools["api"].budget
    assert budget is not None and not budget.allows_retry()
    hosts, stop = run(plan(c, 2.0), [REFUSED, OK], now=2.0)
    assert hosts == ["a.example", "b.example"] and stop.reason == "done"


def test_a_cold_burst_of_pre_send_failures_leaves_the_budget_full() -> None:
    """A hundred concurrent first attempts refused by the primary cost no token."""
    c = core(n=2, retry_budget=RetryBudget(max_tokens=10, token_ratio=0.1))
    plans = [plan(c, 0.0) for _ in range(100)]
    for p in plans:
        assert attempt(p, 0.0).domain.host == "a.example"
    for p in plans:
        p.record(REFUSED, 0.0, duration=0.0)
    for p in plans:
        second = attempt(p, 0.0)
        assert second.domain.host == "b.example" and second.delay == 0
        p.record(OK, 0.0, duration=0.0)
    budget = c.pools["api"].budget
    assert budget is not None and budget.tokens == budget.max_tokens


def test_failback_sends_one_probe_per_cooldown_however_many_requests_run() -> None:
    """Sticky traffic on the backup: after the cooldown one request probes the primary,
    every other concurrent request stays on the backup until it reports."""
    c = core(n=2, breaker_threshold=3, breaker_cooldown=10)
    run(plan(c, 0.0), [REFUSED, OK])  # one failure: the primary is suspect, not open
    plans = [plan(c, 10.0) for _ in range(20)]
    chosen = [attempt(p, 10.0) for p in plans]
    assert [a.domain.host for a in chosen].count("a.example") == 1
    assert next(a for a in chosen if a.domain.host == "a.example").probe
    for p in plans:
        p.record(OK, 10.1, duration=0.0)
    hosts, _ = run(plan(c, 10.2), [OK], now=10.2)
    assert hosts == ["a.example"]  # the probe succeeded: everyone fails back
