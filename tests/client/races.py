"""A hedged request's exchange, set up by hand: its first attempt and its hedge in flight."""

from __future__ import annotations

import httpx

from pytest_failover import FailoverTransport
from pytest_failover._exchange import Exchange
from pytest_failover._values import Attempt


def first_and_hedge(transport: FailoverTransport, url: str) -> tuple[Exchange, Attempt, Attempt]:
    """The exchange of a GET of ``url`` through ``transport`` (a pool that hedges, with
    ``max_ratio=1.0``), its first attempt and its hedge both handed out."""
    exchange = transport._begin(httpx.Request("GET", url))
    assert isinstance(exchange, Exchange)  # a hedging pool's request: no lane
    step = exchange.next_step()
    assert isinstance(step, Attempt)
    first = exchange.prepare(step)
    exchange.core.throttle.earn()  # type: ignore[union-attr]  # the pool hedges: it has a throttle
    due = exchange.hedge_now()
    assert due is not None
    return exchange, first, exchange.prepare(due)
