"""What a pool's state costs: an agent keeps hundreds of pools in one process."""

from __future__ import annotations

import gc
import tracemalloc

import pytest_failover as pf
from pytest_failover._classify import OutcomeKind

POOLS = 200
#: Bytes of the library's state per pool of two domains (tracemalloc, CPython 3.11: 5.5 KB
#: measured). A table of outcomes per pool made it 62 KB, 30 MiB of an agent's 1,000 domains.
CEILING = 8_000


def _transport(pools: int, policy: pf.Policy | None = None) -> pf.FailoverTransport:
    return pf.FailoverTransport(
        [pf.Pool(f"p{i}", [f"http://127.0.0.1:{8000 + i}", f"http://127.0.0.2:{8000 + i}"]) for i in range(pools)],
        policy,
    )


def test_a_pool_of_two_domains_costs_a_few_kilobytes() -> None:
    _transport(2).close()  # imports and shared tables: not the pools' own
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        transport = _transport(POOLS)
        gc.collect()
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    per_pool = sum(stat.size_diff for stat in after.compare_to(before, "filename")) / POOLS
    transport.close()
    assert per_pool <= CEILING, f"{per_pool:,.0f} bytes a pool (ceiling {CEILING:,})"


def test_pools_alike_share_one_table_of_outcomes_and_others_have_theirs() -> None:
    cores = _transport(3)._state.core.pools
    assert cores["p0"].outcomes is cores["p1"].outcomes is cores["p2"].outcomes
    strict = _transport(1, pf.Policy(retry_statuses=frozenset({500})))._state.core.pools["p0"].outcomes
    assert strict is not cores["p0"].outcomes
    assert strict[500].kind is OutcomeKind.FAILURE and strict[502].kind is OutcomeKind.ANSWER
    assert cores["p0"].outcomes[502].kind is OutcomeKind.FAILURE  # the default retry statuses
