"""Real worker processes share one real redis-server (benchmarks/fleet.py's fleet, made small):
the dead primary costs the fleet about one threshold, one probe per cooldown, one at failback;
and Redis killed mid-run loses no request."""

from __future__ import annotations

import itertools
import statistics

import pytest

from benchmarks._redis_server import RedisServer
from benchmarks.fleet import THRESHOLD, fleet

pytestmark = pytest.mark.alone  # see tests/conftest.py: run by themselves, after the rest

COOLDOWN = 0.5


def test_the_fleet_pays_one_threshold_and_probes_once_per_cooldown(redis_server: RedisServer) -> None:
    """4 processes: at most threshold + 4 attempts on the dead primary in its first cooldown
    (the median of three fleets: one fleet pays 4 to 7 on a quiet machine, and a loaded one
    once made it 8, as every worker's second request can go out before the others' first
    failures reach it), then probes one cooldown apart fleet-wide, and exactly one probe of
    the recovered primary, in every fleet."""
    workers = 4
    runs = [
        fleet(workers=workers, redis_url=redis_server.url, cooldown=COOLDOWN, die_at=0.4, back_at=1.8, end_at=2.6)
        for _ in range(3)
    ]
    for out in runs:
        assert out.errors == 0 and out.requests > 100
        assert all(states == ["connected"] for states in out.states), out.states
        assert out.discovery > 0, out.attempts
        probes = out.outage_probes
        assert probes, out.attempts
        assert all(b - a >= 0.8 * COOLDOWN for a, b in itertools.pairwise(probes)), probes
        assert out.failback_probes == 1, out.attempts
    discoveries = [out.discovery for out in runs]
    assert statistics.median(discoveries) <= THRESHOLD + workers, discoveries


def test_redis_killed_mid_run_loses_no_request(own_redis: RedisServer) -> None:
    """Redis dies while 2 processes are failing over, and comes back: every request is
    answered, and both went local-only and then shared again."""
    out = fleet(
        workers=2, redis_url=own_redis.url, cooldown=COOLDOWN, die_at=0.3, back_at=1.6, end_at=2.4,
        redis_down=(0.6, 1.2), on_redis_down=own_redis.stop, on_redis_up=own_redis.start,
    )
    assert out.errors == 0 and out.requests > 50
    assert all(states == ["connected", "disconnected", "connected"] for states in out.states), out.states
