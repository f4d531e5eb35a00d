"""Traffic steering: weights, affinity, named orders and time windows, on the core and over sockets."""

from __future__ import annotations

import asyncio
import math
import os
import random
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_failover import (
    AsyncFailoverTransport,
    ExponentialBackoff,
    FailoverTransport,
    Policy,
    Pool,
    ScheduleTable,
    Step,
    TimeOrder,
)
from pytest_failover._classify import Outcome, OutcomeKind
from pytest_failover._core import FailoverCore
from pytest_failover._plan import RequestPlan
from pytest_failover._pool import Domain
from pytest_failover._steering import key_unit, rendezvous_rank
from pytest_failover._values import Attempt, RequestOptions, Stop, Switch
from pytest_failover.integrations import failover_options
from pytest_failover.integrations._options import current_extensions

from .servers import LoopbackServer

A, B, C, D = "https://a.example", "https://b.example", "https://c.example", "https://d.example"
OK = Outcome(kind=OutcomeKind.SUCCESS, status=200)
UNAVAILABLE = Outcome(kind=OutcomeKind.FAILURE, error_type="503", status=503)
REFUSED = Outcome(kind=OutcomeKind.FAILURE, error_type="connection_refused", sent=False)
SHANGHAI = ZoneInfo("Asia/Shanghai")


def fast(**overrides: Any) -> Policy:
    values: dict[str, Any] = {"schedule": ExponentialBackoff(base=0.01, cap=0.1, max_attempts=4)}
    values.update(overrides)
    return Policy(**values)


def make_core(pool: Pool, *, draw: Callable[[], float] | None = None, **policy: Any) -> FailoverCore:
    return FailoverCore([pool], fast(**policy), random=draw or random.Random(7).random)


def begin(core: FailoverCore, now: float = 0.0, wall: float | None = None, **options: Any) -> RequestPlan:
    return core.begin(
        core.pools["api"], "GET", httpx.Headers(), RequestOptions(**options), True, None, now, wall=wall
    )


def attempt(plan: RequestPlan, now: float = 0.0) -> Attempt:
    step = plan.next(now)
    assert isinstance(step, Attempt), step
    return step


def hosts(plan: RequestPlan, outcomes: list[Outcome], now: float = 0.0) -> list[str]:
    """Feed outcomes until the plan stops; the hosts it tried, in order."""
    tried: list[str] = []
    for outcome in outcomes:
        step = plan.next(now)
        if isinstance(step, Stop):
            break
        assert isinstance(step, Attempt), step
        tried.append(step.domain.host)
        now += step.delay
        plan.record(outcome, now, duration=0.0)
    return tried


def first_host(core: FailoverCore, now: float = 0.0, wall: float | None = None, **options: Any) -> str:
    plan = begin(core, now, wall, **options)
    host = attempt(plan, now).domain.host
    plan.record(OK, now, duration=0.0)
    return host


def within(count: int, n: int, p: float, sigmas: float = 5.0) -> bool:
    """Is ``count`` of ``n`` draws within ``sigmas`` standard deviations of share ``p``?"""
    return abs(count - n * p) <= sigmas * math.sqrt(n * p * (1 - p))


# -- weights ---------------------------------------------------------------------------------


def test_weights_send_their_share_of_first_attempts_and_the_rest_follow_pool_order() -> None:
    """Over 10,000 decisions with a seeded random source, 5% and 15% go to the weighted
    domains (within five standard deviations) and everything else to the primary."""
    pool = Pool("api", [A, B, C, D], weights={D: 5, C: 15})
    core = make_core(pool, draw=random.Random(2024).random)
    counts = Counter(first_host(core, now=i * 0.001) for i in range(10_000))
    assert set(counts) == {"a.example", "c.example", "d.example"}
    assert within(counts["d.example"], 10_000, 0.05)
    assert within(counts["c.example"], 10_000, 0.15)
    assert counts["a.example"] == 10_000 - counts["c.example"] - counts["d.example"]


def test_weight_draws_come_from_the_random_source() -> None:
    """The draw is the core's random source: 0.04 lands on a 5% canary, 0.05 does not."""
    pool = Pool("api", [A, B, C], weights={C: 5})
    assert first_host(make_core(pool, draw=lambda: 0.04)) == "c.example"
    assert first_host(make_core(pool, draw=lambda: 0.05)) == "a.example"


def test_with_an_affinity_key_the_weighted_choice_is_stable_per_key() -> None:
    """A user does not bounce between canary and stable: each key's side is fixed
    whatever the random source says, and about the weight's share of keys is on the canary."""
    pool = Pool("api", [A, B, C], weights={C: 20})
    sides: dict[str, set[str]] = {}
    for round_ in range(3):
        core = make_core(pool, draw=random.Random(round_).random)
        for user in range(2_000):
            sides.setdefault(f"user-{user}", set()).add(first_host(core, affinity=f"user-{user}"))
    assert all(len(side) == 1 for side in sides.values())
    canary = sum(side == {"c.example"} for side in sides.values())
    assert within(canary, 2_000, 0.20)


@pytest.mark.parametrize("sticky", [True, False])
def test_a_failing_canary_is_left_and_traffic_returns_once_it_recovers(sticky: bool) -> None:
    """A canary that fails moves its request on in pool order. Then it is left: at once
    with a sticky policy (a domain that just failed is suspect), else once its breaker
    opens; the weighted requests go to the primary with no attempt on it. After the
    cooldown one request probes it, and weighted traffic is back on it."""
    pool = Pool("api", [A, B, C], weights={C: 50})
    core = make_core(pool, draw=lambda: 0.0, breaker_threshold=2, breaker_cooldown=10.0, sticky=sticky)
    failing = 1 if sticky else 2
    for i in range(failing):
        assert hosts(begin(core, now=i), [UNAVAILABLE, OK], now=i) == ["c.example", "a.example"]
    assert core.state(2.0).pools["api"].domains[2].breaker == ("closed" if sticky else "open")
    assert [first_host(core, now=2.0 + i) for i in range(3)] == ["a.example"] * 3
    probe = begin(core, now=13.0)
    step = attempt(probe, 13.0)
    assert step.domain.host == "c.example" and step.probe
    probe.record(OK, 13.0, duration=0.0)
    assert [first_host(core, now=14.0 + i) for i in range(3)] == ["c.example"] * 3


def test_a_weighted_request_does_not_move_the_serving_domain() -> None:
    """The canary's answers are steered traffic: no switch, the pool still serves on the primary."""
    pool = Pool("api", [A, B], weights={B: 50})
    draws = iter([0.9, 0.1, 0.9])
    core = make_core(pool, draw=lambda: next(draws))
    for now in (0.0, 1.0, 2.0):
        plan = begin(core, now)
        attempt(plan, now)
        assert not any(isinstance(e, Switch) for e in plan.record(OK, now, duration=0.0))
    assert core.pools["api"].serving == Domain.parse(A)


def test_a_weight_on_the_primary_changes_nothing() -> None:
    """A request whose draw picks the pool's own first domain walks the pool order, unsteered."""
    plan = begin(make_core(Pool("api", [A, B], weights={A: 50}), draw=lambda: 0.1))
    assert plan.steering is None and plan.first_order == tuple(map(Domain.parse, [A, B]))


# -- affinity --------------------------------------------------------------------------------


def test_affinity_spreads_keys_over_the_affinity_domains_and_keeps_each_key_on_one() -> None:
    """Each key always reaches the same gateway; 3,000 keys spread evenly over three."""
    pool = Pool("api", [A, B, C, D], affinity_domains=[B, C, D])
    core = make_core(pool)
    first = {f"user-{i}": first_host(core, affinity=f"user-{i}") for i in range(3_000)}
    assert all(first_host(core, affinity=key) == host for key, host in list(first.items())[:300])
    counts = Counter(first.values())
    assert set(counts) == {"b.example", "c.example", "d.example"}
    assert all(within(n, 3_000, 1 / 3) for n in counts.values()), counts


def test_a_request_without_a_key_follows_pool_order() -> None:
    pool = Pool("api", [A, B, C], affinity_domains=[B, C])
    plan = begin(make_core(pool))
    assert plan.steering is None and attempt(plan).domain.host == "a.example"


def test_after_the_affinity_domain_the_failover_order_is_the_pools() -> None:
    """The key's gateway first; when it fails the request moves on in pool order."""
    pool = Pool("api", [A, B, C, D], affinity_domains=[B, C, D])
    core = make_core(pool)
    key = next(k for k in (f"user-{i}" for i in range(100)) if first_host(core, affinity=k) == "d.example")
    plan = begin(core, affinity=key)
    assert plan.steering == "affinity"
    assert hosts(plan, [REFUSED, REFUSED, OK]) == ["d.example", "a.example", "b.example"]


@settings(max_examples=60, deadline=None)
@given(
    keys=st.lists(st.text(min_size=1, max_size=12), min_size=1, max_size=40, unique=True),
    gone=st.integers(0, 3),
    how=st.sampled_from(["removed", "opened", "disabled"]),
)
def test_hrw_moves_only_the_keys_of_a_domain_that_leaves(keys: list[str], gone: int, how: str) -> None:
    """Removing an affinity domain, opening its breaker, or disabling it by control moves
    exactly the keys that were on it; every other key stays where it was."""
    gateways = [A, B, C, D]
    pool = Pool("api", gateways, affinity_domains=gateways)
    before = {k: first_host(make_core(pool), affinity=k) for k in keys}
    left = Domain.parse(gateways[gone])
    if how == "removed":
        after_core = make_core(Pool("api", gateways, affinity_domains=[g for g in gateways if g != gateways[gone]]))
    else:
        after_core = make_core(pool, breaker_threshold=1)
        pool_core = after_core.pools["api"]
        if how == "opened":
            pool_core.breakers[left].failure(0.0, started=0.0, probe=False)
        else:
            pool_core.disabled = frozenset({left})
    for key, host in before.items():
        now_on = first_host(after_core, affinity=key)
        if host == left.host:
            assert now_on != left.host
        else:
            assert now_on == host, (key, host, now_on)


def test_rendezvous_rank_is_stable_across_processes() -> None:
    """The hashes are BLAKE2b, not Python's salted hash(): another process with another
    hash seed ranks every key the same, and so do other versions (the pinned values)."""
    names = ["https://a.example", "https://b.example", "https://c.example"]
    tops = [rendezvous_rank(f"user-{i}", names)[0] for i in range(200)]
    assert tops[:12] == [2, 2, 2, 1, 0, 0, 1, 0, 1, 1, 1, 0]
    assert round(key_unit("user-42"), 6) == 0.811101
    code = (
        "from pytest_failover._steering import rendezvous_rank as r;"
        f"print([r(f'user-{{i}}', {names!r})[0] for i in range(200)])"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert other.stdout.strip() == str(tops)


# -- named orders ------------------------------------------------------------------------


def channels() -> Pool:
    return Pool("api", [A, B, C], region_order={"wechat": [C], "douyin": [B, C]})


def test_a_named_order_replaces_the_pool_order_for_the_request() -> None:
    """``order`` picks one of the pool's region orders; its failover follows that order."""
    core = make_core(channels())
    plan = begin(core, order="wechat")
    assert plan.steering == "order" and plan.first_order == tuple(map(Domain.parse, [C, A, B]))
    assert first_host(core, order="douyin") == "b.example"
    assert first_host(core) == "a.example"
    assert hosts(plan, [REFUSED, REFUSED, OK]) == ["c.example", "a.example", "b.example"]


def test_an_unknown_order_name_is_a_clear_value_error() -> None:
    with pytest.raises(ValueError, match=r"pool 'api' has no order 'tiktok'.*\['douyin', 'wechat'\]"):
        begin(make_core(channels()), order="tiktok")


def test_a_named_order_beats_the_time_window() -> None:
    window = TimeOrder(start="00:00", end="12:00", tz="UTC", order=[B])
    pool = Pool("api", [A, B, C], region_order={"wechat": [C]}, time_orders=[window])
    morning = datetime(2024, 5, 1, 9, 0, tzinfo=ZoneInfo("UTC")).timestamp()
    core = make_core(pool)
    assert first_host(core, wall=morning) == "b.example"
    assert first_host(core, wall=morning, order="wechat") == "c.example"


@pytest.mark.parametrize(
    ("raw", "error", "message"),
    [
        ({"affinity": 42}, TypeError, r'\["affinity"\] must be a str'),
        ({"order": ["wechat"]}, TypeError, r'\["order"\] must be a str'),
        ({"orders": "wechat"}, ValueError, r"unknown option\(s\) \['orders'\]; did you mean 'order'\? expected .*affinity, order or hedge$"),
        ({"orders": "a", "pinned": "b"}, ValueError, r"unknown option\(s\) \['orders', 'pinned'\]; expected enabled"),
        ({"zzz": 1}, ValueError, r"unknown option\(s\) \['zzz'\]; expected enabled"),
    ],
)
def test_steering_options_are_validated(raw: dict[str, object], error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        RequestOptions.from_extensions({"failover": raw})


def test_failover_options_carry_the_steering_keys() -> None:
    """requests and aiohttp users steer through ``failover_options``, checked on entry."""
    with failover_options({"affinity": "user-42", "order": "wechat"}):
        assert RequestOptions.from_extensions(current_extensions()) == RequestOptions(
            affinity="user-42", order="wechat"
        )
    with pytest.raises(TypeError, match="affinity"), failover_options({"affinity": 42}):
        pass


# -- time windows ------------------------------------------------------------------------


def at(hour: int, minute: int, zone: ZoneInfo = SHANGHAI, day: int = 15, month: int = 1) -> float:
    return datetime(2024, month, day, hour, minute, tzinfo=zone).timestamp()


def night_pool() -> Pool:
    return Pool(
        "api",
        [A, B, C],
        time_orders=[
            TimeOrder(start="22:00", end="06:00", tz="Asia/Shanghai", order=[C, B]),
            TimeOrder(start="12:00", end="13:30", tz="Asia/Shanghai", order=[B]),
        ],
    )


@pytest.mark.parametrize(
    ("hour", "minute", "host"),
    [
        (21, 59, "a.example"),
        (22, 0, "c.example"),
        (23, 59, "c.example"),
        (0, 0, "c.example"),
        (5, 59, "c.example"),
        (6, 0, "a.example"),
        (12, 0, "b.example"),
        (13, 29, "b.example"),
        (13, 30, "a.example"),
    ],
)
def test_a_window_across_midnight_in_another_time_zone(hour: int, minute: int, host: str) -> None:
    """The window is read in its own zone (Shanghai, UTC+8), whatever the machine's, with
    the time passed in: start inside, end outside, midnight crossed."""
    assert first_host(make_core(night_pool()), wall=at(hour, minute)) == host


def test_the_window_order_is_the_whole_requests_failover_order() -> None:
    plan = begin(make_core(night_pool()), wall=at(23, 0))
    assert plan.steering == "time_order"
    assert hosts(plan, [REFUSED, REFUSED, OK]) == ["c.example", "b.example", "a.example"]


def test_windows_follow_daylight_saving_time() -> None:
    """A 23:00-02:00 window in Los Angeles is 07:00-10:00 UTC in winter, 06:00-09:00 in summer."""
    window = TimeOrder(start="23:00", end="02:00", tz="America/Los_Angeles", order=[B])
    core = make_core(Pool("api", [A, B], time_orders=[window]))
    utc = ZoneInfo("UTC")
    assert first_host(core, wall=at(6, 30, utc, month=1)) == "a.example"
    assert first_host(core, wall=at(7, 30, utc, month=1)) == "b.example"
    assert first_host(core, wall=at(6, 30, utc, month=7)) == "b.example"
    assert first_host(core, wall=at(9, 30, utc, month=7)) == "a.example"


def test_the_wall_clock_is_the_cores_input_and_read_only_for_time_windows() -> None:
    """Without an explicit ``wall`` the core asks its injected wall clock, and only for a
    pool with time windows."""
    def no_clock() -> float:
        raise AssertionError("the wall clock was read for a pool without time windows")

    plain = FailoverCore([Pool("api", [A, B], weights={B: 10})], fast(), random=lambda: 0.5, wall_clock=no_clock)
    assert first_host(plain) == "a.example"
    night = FailoverCore([night_pool()], fast(), wall_clock=lambda: at(23, 0))
    assert first_host(night) == "c.example"


def test_a_table_schedule_counts_ranks_in_the_requests_order() -> None:
    """With a ScheduleTable, rank 0 is the steered first domain, then the request's order."""
    table = ScheduleTable([Step(0, 0), Step(0, 1), Step(0, 2)])
    core = make_core(Pool("api", [A, B, C], region_order={"wechat": [C]}), schedule=table)
    assert hosts(begin(core, order="wechat"), [UNAVAILABLE, UNAVAILABLE, OK]) == [
        "c.example",
        "a.example",
        "b.example",
    ]


# -- validation --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"weights": {C: 101}}, r"weights\['https://c.example'\] is 101; expected a percentage from 0 to 100"),
        ({"weights": {C: -1}}, "expected a percentage from 0 to 100"),
        ({"weights": {C: True}}, "expected a percentage"),
        ({"weights": {C: "5"}}, "expected a percentage"),
        ({"weights": {B: 60, C: 50}}, "weights add up to 110%"),
        ({"weights": {D: 5}}, "weights lists https://d.example, which is not a domain of the pool"),
        ({"weights": [C]}, "weights must map base URLs to percentages"),
        ({"affinity_domains": [D]}, "affinity_domains lists https://d.example, which is not a domain"),
        ({"affinity_domains": []}, "affinity_domains is empty"),
        ({"affinity_domains": [B, "https://B.example/"]}, "affinity_domains lists a domain twice"),
        ({"affinity_domains": B}, "affinity_domains must be a list of base URLs"),
        (
            {"time_orders": [TimeOrder(start="22:00", end="06:00", tz="UTC", order=[D])]},
            "time_orders 22:00-06:00 lists https://d.example, which is not a domain",
        ),
        (
            {
                "time_orders": [
                    TimeOrder(start="22:00", end="06:00", tz="UTC", order=[B]),
                    TimeOrder(start="05:00", end="07:00", tz="UTC", order=[C]),
                ]
            },
            r"time_orders overlap: TimeOrder\(start='22:00'.*TimeOrder\(start='05:00'",
        ),
        (
            {
                "time_orders": [
                    TimeOrder(start="08:00", end="18:00", tz="UTC", order=[B]),
                    TimeOrder(start="23:00", end="09:00", tz="UTC", order=[C]),
                ]
            },
            "time_orders overlap",
        ),
        (
            {
                "time_orders": [
                    TimeOrder(start="08:00", end="12:00", tz="UTC", order=[B]),
                    TimeOrder(start="13:00", end="14:00", tz="Asia/Shanghai", order=[C]),
                ]
            },
            r"time zones \['Asia/Shanghai', 'UTC'\]; a pool's windows share one time zone",
        ),
        ({"time_orders": ["22:00-06:00"]}, "time_orders holds '22:00-06:00', which is not a TimeOrder"),
    ],
)
def test_pool_steering_is_validated_with_errors_naming_the_field(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Pool("api", [A, B, C], **kwargs)


def test_adjacent_windows_do_not_overlap_and_zero_weights_are_allowed() -> None:
    pool = Pool(
        "api",
        [A, B, C],
        weights={B: 0, C: 100},
        time_orders=[
            TimeOrder(start="22:00", end="06:00", tz="UTC", order=[B]),
            TimeOrder(start="06:00", end="22:00", tz="UTC", order=[C]),
        ],
    )
    assert pool.weights == ((Domain.parse(C), 100.0),)
    assert [w.start for w, _ in pool.time_orders] == ["22:00", "06:00"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"start": "24:00"}, r"TimeOrder start '24:00': expected a local time 'HH:MM' from 00:00 to 23:59"),
        ({"start": "9:00"}, "TimeOrder start '9:00'"),
        ({"end": 6}, "TimeOrder end 6: expected a local time"),
        ({"end": "22:00"}, "start and end are both '22:00'"),
        ({"tz": "Mars/Olympus_Mons"}, "TimeOrder tz 'Mars/Olympus_Mons': not a time zone zoneinfo knows"),
        ({"tz": "../etc/passwd"}, "TimeOrder tz '../etc/passwd': not a time zone"),
        ({"tz": ""}, "TimeOrder tz '': expected an IANA time zone"),
        ({"order": []}, "TimeOrder order .*: expected a non-empty list of base URLs"),
        ({"order": B}, "TimeOrder order .*: expected a non-empty list"),
    ],
)
def test_time_order_is_validated_when_built(kwargs: Mapping[str, Any], message: str) -> None:
    values: dict[str, Any] = {"start": "22:00", "end": "06:00", "tz": "Asia/Shanghai", "order": [B]}
    values.update(kwargs)
    with pytest.raises(ValueError, match=message):
        TimeOrder(**values)


# -- over real sockets -------------------------------------------------------------------


def test_weights_and_affinity_over_real_sockets(make_client: Any, servers: dict[str, LoopbackServer]) -> None:
    """Through every front-end: each user stays on one server, the canary gets its share
    of users, the gateways split the rest, and a failing canary's users move to the primary."""
    a, b, c = servers["a"], servers["b"], servers["c"]
    pool = Pool("api", [a.url(), b.url(), c.url()], weights={c.url(): 25}, affinity_domains=[a.url(), b.url()])
    client = make_client([pool], fast(breaker_threshold=1))

    def served(user: str) -> str:
        response = client.request("GET", a.url() + "/v1/me", extensions={"failover": {"affinity": user}})
        assert response.status_code == 200
        return str(response.headers["x-served-by"])

    users = [f"user-{i}" for i in range(40)]
    first = {user: served(user) for user in users}
    assert [served(user) for user in users] == [first[user] for user in users]
    counts = Counter(first.values())
    assert set(counts) == {"a", "b", "c"}, counts
    expected = {u: rendezvous_rank(u, [a.url(), b.url()])[0] for u in users if first[u] != "c"}
    assert all(first[u] == "ab"[i] for u, i in expected.items())
    c.set(status=503)
    canary_users = [u for u in users if first[u] == "c"]
    assert len(canary_users) >= 2
    # the first finds the canary failing and moves on in pool order, to the primary;
    # then its breaker is open, and canary users go to their own gateways
    assert served(canary_users[0]) == "a"
    gateways = {u: "ab"[rendezvous_rank(u, [a.url(), b.url()])[0]] for u in canary_users[1:]}
    assert {u: served(u) for u in canary_users[1:]} == gateways
    assert [served(u) for u in users if first[u] != "c"] == [first[u] for u in users if first[u] != "c"]


def test_the_transports_take_the_cores_wall_clock_and_random_source(servers: dict[str, LoopbackServer]) -> None:
    """Time windows and weight draws through both httpx transports over loopback, with
    the Unix time and the draw injected as for the core (a night at 23:00 Shanghai)."""
    a, b, c = servers["a"], servers["b"], servers["c"]
    windows = [TimeOrder(start="22:00", end="06:00", tz="Asia/Shanghai", order=[c.url()])]
    night = Pool("api", [a.url(), b.url(), c.url()], time_orders=windows)
    canary = Pool("api", [a.url(), b.url(), c.url()], weights={b.url(): 5})

    Clock = Callable[[], float]

    def served_sync(pool: Pool, wall_clock: Clock, draw: Clock) -> set[str]:
        transport = FailoverTransport([pool], fast(), wall_clock=wall_clock, random=draw)
        with httpx.Client(transport=transport) as client:
            return {str(client.get(a.url() + "/v1/me").headers["x-served-by"]) for _ in range(5)}

    async def served_async(pool: Pool, wall_clock: Clock, draw: Clock) -> set[str]:
        transport = AsyncFailoverTransport([pool], fast(), wall_clock=wall_clock, random=draw)
        async with httpx.AsyncClient(transport=transport) as client:
            return {str((await client.get(a.url() + "/v1/me")).headers["x-served-by"]) for _ in range(5)}

    def noon() -> float:
        return at(12, 0)

    def middle() -> float:
        return 0.5

    cases: list[tuple[Pool, Clock, Clock, set[str]]] = [
        (night, lambda: at(23, 0), middle, {"c"}),
        (night, lambda: at(10, 0), middle, {"a"}),
        (canary, noon, lambda: 0.01, {"b"}),  # a draw under 5 %: the canary
        (canary, noon, lambda: 0.99, {"a"}),
    ]
    for pool, wall_clock, draw, expected in cases:
        assert served_sync(pool, wall_clock, draw) == expected, (pool, expected)
        assert asyncio.run(served_async(pool, wall_clock, draw)) == expected, (pool, expected)
