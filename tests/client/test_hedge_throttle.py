"""The hedge throttle: at most ``max_ratio`` of hedgeable requests, and while hedges are
being refused, the last token for a request that was refused before."""

from __future__ import annotations

import random

import httpx
from hypothesis import given
from hypothesis import strategies as st

from pytest_failover import Hedging, Policy, Pool
from pytest_failover._core import FailoverCore
from pytest_failover._plan import RequestPlan
from pytest_failover._slowness import CONTENTION, HEDGE_BURST, HedgeThrottle
from pytest_failover._values import Attempt, HedgeThrottled, RequestOptions

DOMAINS = ["https://a.example", "https://b.example", "https://c.example"]


def throttle(tokens: float) -> HedgeThrottle:
    bucket = HedgeThrottle(Hedging(delay=0.05, max_ratio=0.05))
    bucket.tokens = tokens
    return bucket


def test_with_no_refusal_lately_any_request_takes_the_last_token() -> None:
    bucket = throttle(1.0)
    assert bucket.take(10.0)
    assert bucket.tokens == 0.0 and bucket.hedges == 1


def test_while_hedges_are_refused_the_last_token_waits_for_a_request_refused_before() -> None:
    bucket = throttle(0.5)
    assert not bucket.take(10.0)  # the bucket is dry: refused, and contended from now on
    bucket.tokens = 1.5
    assert not bucket.take(10.01)  # a newcomer: the last token is not for it
    assert bucket.take(10.05, again=True)  # the one refused before takes it
    assert bucket.tokens == 0.5


def test_a_newcomer_gets_a_token_above_the_last_one_and_after_the_contention() -> None:
    bucket = throttle(0.0)
    assert not bucket.take(10.0)
    bucket.tokens = 2.0
    assert bucket.take(10.1)  # a token beyond the last one: nobody waits for it
    bucket.tokens = 1.0
    assert not bucket.take(10.2)
    assert bucket.take(10.2 + CONTENTION)  # no refusal for CONTENTION seconds: any request


@given(st.lists(st.tuples(st.booleans(), st.booleans(), st.floats(0.0, 0.5)), max_size=300))
def test_hedges_stay_within_max_ratio_of_requests_whoever_asks(
    steps: list[tuple[bool, bool, float]],
) -> None:
    """Whatever the order of requests and asks (fresh or again), the bucket never lets
    through more than ``max_ratio`` of the requests it has seen (plus what it saves up)."""
    bucket = HedgeThrottle(Hedging(delay=0.05, max_ratio=0.1))
    now = 0.0
    for begins, again, later in steps:
        now += later
        if begins:
            bucket.earn()
        else:
            bucket.take(now, again=again)
        assert bucket.hedges <= 0.1 * bucket.requests + 1e-9
        assert 0.0 <= bucket.tokens <= HEDGE_BURST


def test_a_request_refused_before_wins_the_last_token_over_a_newer_one() -> None:
    """Through the plan: two requests on a slow primary; the older was refused a hedge
    once, the bucket then holds one token and a bit, and the older gets it, not the newer."""
    policy = Policy(hedging=Hedging(delay=0.05, max_ratio=0.05))
    core = FailoverCore([Pool("api", DOMAINS)], policy, random=random.Random(1).random)
    pool = core.pools["api"]

    def begin(now: float) -> RequestPlan:
        plan = core.begin(pool, "GET", httpx.Headers(), RequestOptions(), True, None, now)
        assert isinstance(plan.next(now), Attempt)
        return plan

    older = begin(0.0)
    assert isinstance(older.hedge(0.05), HedgeThrottled)  # a dry bucket: refused once
    assert pool.throttle is not None
    pool.throttle.tokens = 1.5
    newer = begin(0.06)
    assert isinstance(newer.hedge(0.10), HedgeThrottled)  # the last token waits for the older
    assert pool.throttle.hedges == 0
    hedge = older.hedge(0.11)
    assert isinstance(hedge, Attempt) and hedge.hedge
    assert pool.throttle.hedges == 1
