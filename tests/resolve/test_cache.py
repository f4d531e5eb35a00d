"""The cache's rules, driven with a scripted resolver and a clock the test moves (no sockets)."""

from __future__ import annotations

import asyncio
import threading
import traceback
from collections import OrderedDict
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_failover import semconv
from pytest_failover.resolve import (
    Answer,
    BadAnswer,
    CachingResolver,
    ForbiddenAddress,
    NoAddresses,
    ResolveError,
    ResolverUnavailable,
    ResolveTimeout,
)

from .conftest import Ask


class Clock:
    """A monotonic clock moved by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Scripted:
    """A resolver whose next outcome per name the test sets; it counts the questions."""

    def __init__(self) -> None:
        self.outcomes: dict[str, Answer | ResolveError] = {}
        self.asked: list[str] = []
        self.gate: threading.Event | None = None  # when set: every question waits for it

    def set(self, host: str, *addresses: str, ttl: float = 60.0) -> None:
        self.outcomes[host] = Answer(host=host, addresses=addresses, ttl=ttl, source=semconv.RESOLVE_SOURCE_DOH)

    def fail(self, host: str, error: type[ResolveError]) -> None:
        self.outcomes[host] = error(f"scripted {error.__name__}", host=host, source=semconv.RESOLVE_SOURCE_DOH)

    def _outcome(self, host: str) -> Answer:
        self.asked.append(host)
        outcome = self.outcomes.get(host) or NoAddresses("not scripted", host=host)
        if isinstance(outcome, ResolveError):
            raise outcome
        return outcome

    def resolve(self, host: str) -> Answer:
        if self.gate is not None:
            assert self.gate.wait(10.0)
        return self._outcome(host)

    async def aresolve(self, host: str) -> Answer:
        if self.gate is not None:
            for _ in range(1000):  # bounded: 10 s
                if self.gate.is_set():
                    break
                await asyncio.sleep(0.01)
        return self._outcome(host)

    def close(self) -> None:
        pass

    async def aclose(self) -> None:
        pass


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def inner() -> Scripted:
    return Scripted()


@pytest.fixture
def cache(inner: Scripted, clock: Clock) -> CachingResolver:
    return CachingResolver(
        inner, min_ttl=10, max_ttl=100, negative_ttl=5, serve_stale=1000, stale_ttl=30, max_entries=3, clock=clock
    )


def test_a_fresh_answer_comes_from_the_cache_with_the_ttl_left(
    ask: Ask, cache: CachingResolver, inner: Scripted, clock: Clock
) -> None:
    """Within its TTL an answer is served from the cache, marked `cache`, without asking again."""
    inner.set("a.test", "127.0.0.5", ttl=60)
    first = ask(cache, "a.test")
    assert (first.addresses, first.ttl, first.source) == (("127.0.0.5",), 60.0, semconv.RESOLVE_SOURCE_DOH)
    clock.now += 45
    again = ask(cache, "A.test.")
    assert (again.addresses, again.ttl, again.source) == (("127.0.0.5",), 15.0, semconv.RESOLVE_SOURCE_CACHE)
    assert inner.asked == ["a.test"]
    clock.now += 15
    ask(cache, "a.test")
    assert inner.asked == ["a.test", "a.test"]


@pytest.mark.parametrize(("ttl", "kept"), [(0, 10.0), (3, 10.0), (50, 50.0), (100, 100.0), (86400, 100.0)])
def test_the_ttl_is_clamped_to_the_bounds(
    ask: Ask, cache: CachingResolver, inner: Scripted, clock: Clock, ttl: float, kept: float
) -> None:
    """An answer is kept between min_ttl and max_ttl seconds, whatever TTL it came with."""
    inner.set("a.test", "127.0.0.5", ttl=ttl)
    assert ask(cache, "a.test").ttl == kept
    clock.now += kept - 0.001
    assert ask(cache, "a.test").source == semconv.RESOLVE_SOURCE_CACHE
    clock.now += 0.001
    assert ask(cache, "a.test").source == semconv.RESOLVE_SOURCE_DOH


def test_the_least_recently_used_name_is_evicted(ask: Ask, cache: CachingResolver, inner: Scripted) -> None:
    """With max_entries names kept, a new one evicts the one used longest ago."""
    for name in ("a.test", "b.test", "c.test", "d.test"):
        inner.set(name, "127.0.0.5")
    for name in ("a.test", "b.test", "c.test"):
        ask(cache, name)
    ask(cache, "a.test")  # a is now the most recent
    ask(cache, "d.test")
    assert cache.names() == ["c.test", "a.test", "d.test"]
    ask(cache, "b.test")
    assert inner.asked.count("b.test") == 2


def test_no_address_is_cached_briefly(ask: Ask, cache: CachingResolver, inner: Scripted, clock: Clock) -> None:
    """NoAddresses is kept negative_ttl seconds, raised again without asking."""
    inner.fail("gone.test", NoAddresses)
    for _ in range(3):
        with pytest.raises(NoAddresses):
            ask(cache, "gone.test")
    assert inner.asked == ["gone.test"]
    clock.now += 5
    inner.set("gone.test", "127.0.0.5")
    assert ask(cache, "gone.test").addresses == ("127.0.0.5",)


@pytest.mark.parametrize("error", [NoAddresses, ResolveTimeout, BadAnswer])
def test_an_error_held_is_a_new_one_at_each_look_up(ask: Ask, cache: CachingResolver, inner: Scripted, error: type[ResolveError]) -> None:
    """Each look-up of a name whose error the cache holds raises an error of its own that
    says the same: the held one, raised again and again, kept every raise's traceback (each
    adds its frames to those before, and the frames hold what their locals hold) for as
    long as it was held: in an outage, one traceback longer at every request."""
    inner.fail("gone.test", error)
    with pytest.raises(error) as first:
        ask(cache, "gone.test")
    raised: list[ResolveError] = []
    for _ in range(5):
        with pytest.raises(error) as again:
            ask(cache, "gone.test")
        raised.append(again.value)
    assert inner.asked == ["gone.test"]
    assert len({id(e) for e in [first.value, *raised]}) == 6
    assert {(type(e), str(e), e.host, e.source) for e in raised} == {(error, f"scripted {error.__name__}", "gone.test", semconv.RESOLVE_SOURCE_DOH)}
    depths = {len(list(traceback.walk_tb(e.__traceback__))) for e in raised}
    assert len(depths) == 1, depths  # no raise carries the ones before


def test_again_is_the_same_error_with_no_traceback() -> None:
    """``ResolveError.again``: the class, message, every attribute and the cause, and no
    traceback of its own; its notes are its own list."""
    try:
        raise ForbiddenAddress("10.0.0.1 is not allowed", host="a.test", source="doh", address="10.0.0.1") from OSError("x")
    except ForbiddenAddress as exc:
        held = exc
    held.add_note("held")
    twin = held.again()
    assert type(twin) is ForbiddenAddress and twin is not held
    assert (str(twin), twin.host, twin.source, twin.address) == ("10.0.0.1 is not allowed", "a.test", "doh", "10.0.0.1")
    assert twin.__cause__ is held.__cause__ and twin.__suppress_context__ and twin.__traceback__ is None
    twin.add_note("raised")
    assert held.__notes__ == ["held"] and twin.__notes__ == ["held", "raised"]


@pytest.mark.parametrize("error", [ResolveTimeout, ResolverUnavailable, BadAnswer, ForbiddenAddress])
def test_a_failed_refresh_serves_the_last_answer_as_stale(
    ask: Ask, cache: CachingResolver, inner: Scripted, clock: Clock, error: type[ResolveError]
) -> None:
    """When the resolver fails (or answers badly), the expired answer is served, marked stale,
    for stale_ttl seconds before it is asked again; bad input never replaces it."""
    inner.set("a.test", "127.0.0.5", ttl=60)
    ask(cache, "a.test")
    clock.now += 61
    if error is ForbiddenAddress:
        inner.outcomes["a.test"] = ForbiddenAddress("no", host="a.test", source=None, address="10.0.0.1")
    else:
        inner.fail("a.test", error)
    stale = ask(cache, "a.test")
    assert (stale.addresses, stale.ttl, stale.source) == (("127.0.0.5",), 30.0, semconv.RESOLVE_SOURCE_STALE)
    clock.now += 29
    assert ask(cache, "a.test").source == semconv.RESOLVE_SOURCE_STALE
    assert inner.asked == ["a.test", "a.test"]  # the recheck timer holds
    clock.now += 1
    assert ask(cache, "a.test").source == semconv.RESOLVE_SOURCE_STALE
    assert len(inner.asked) == 3
    inner.set("a.test", "127.0.0.6")
    clock.now += 30
    assert ask(cache, "a.test").addresses == ("127.0.0.6",)


def test_stale_answers_stop_after_serve_stale(ask: Ask, cache: CachingResolver, inner: Scripted, clock: Clock) -> None:
    """Past serve_stale seconds after its TTL, an answer is not served any more: the error is."""
    inner.set("a.test", "127.0.0.5", ttl=60)
    ask(cache, "a.test")
    inner.fail("a.test", ResolverUnavailable)
    clock.now += 60 + 1000
    with pytest.raises(ResolverUnavailable):
        ask(cache, "a.test")


def test_a_failure_without_a_stale_answer_is_cached_briefly(
    ask: Ask, cache: CachingResolver, inner: Scripted, clock: Clock
) -> None:
    """A cold name whose resolver fails raises, and the failure is kept negative_ttl seconds (RFC 9520)."""
    inner.fail("a.test", ResolveTimeout)
    for _ in range(2):
        with pytest.raises(ResolveTimeout):
            ask(cache, "a.test")
    assert inner.asked == ["a.test"]
    clock.now += 5
    with pytest.raises(ResolveTimeout):
        ask(cache, "a.test")
    assert inner.asked == ["a.test", "a.test"]


def test_no_address_replaces_a_good_answer(ask: Ask, cache: CachingResolver, inner: Scripted, clock: Clock) -> None:
    """NXDOMAIN is the name's own answer: the old addresses are not served stale over it."""
    inner.set("a.test", "127.0.0.5", ttl=10)
    ask(cache, "a.test")
    clock.now += 10
    inner.fail("a.test", NoAddresses)
    with pytest.raises(NoAddresses):
        ask(cache, "a.test")


@pytest.mark.parametrize(
    ("option", "value"),
    [("min_ttl", -1), ("max_ttl", float("inf")), ("negative_ttl", float("nan")), ("max_entries", 0), ("min_ttl", 5000)],
)
def test_bad_bounds_are_refused(inner: Scripted, option: str, value: float) -> None:
    """A bound that makes no sense is refused when the cache is made, naming it."""
    with pytest.raises(ValueError, match=option):
        CachingResolver(inner, **{option: value})  # type: ignore[arg-type]  # floats and ints alike


def _line_up(inner: Scripted, look_up: Callable[[], None]) -> None:
    """Run ``look_up`` in a dozen threads that line up behind the first one's query, held
    until they have (``inner.gate``), and wait for them."""
    inner.gate = threading.Event()
    threads = [threading.Thread(target=look_up) for _ in range(12)]
    for thread in threads:
        thread.start()
    threading.Event().wait(0.2)
    inner.gate.set()
    for thread in threads:
        thread.join(10.0)


def test_concurrent_threads_make_one_query(cache: CachingResolver, inner: Scripted) -> None:
    """A dozen threads missing one name at once make one query and all get its answer."""
    inner.set("a.test", "127.0.0.5")
    results: list[Answer] = []
    _line_up(inner, lambda: results.append(cache.resolve("a.test")))
    assert inner.asked == ["a.test"]
    assert [r.addresses for r in results] == [("127.0.0.5",)] * 12


def test_threads_waiting_on_a_failed_query_each_raise_an_error_of_their_own(cache: CachingResolver, inner: Scripted) -> None:
    """A dozen threads line up behind one query that fails: each raises an error of its own
    that says the same, its traceback its own thread's. One object raised in every thread
    took each thread's frames into the traceback the others raised."""
    inner.fail("a.test", ResolverUnavailable)
    raised: list[ResolveError] = []

    def look_up() -> None:
        try:
            cache.resolve("a.test")
        except ResolveError as exc:
            raised.append(exc)

    _line_up(inner, look_up)
    assert inner.asked == ["a.test"] and len(raised) == 12
    assert {(type(e), str(e), e.host) for e in raised} == {(ResolverUnavailable, "scripted ResolverUnavailable", "a.test")}
    waiters = [e for e in raised if e is not inner.outcomes["a.test"]]  # (the first thread raises the resolver's own)
    assert len(waiters) == 11 and len({id(e) for e in waiters}) == 11
    for error in waiters:
        frames = [frame.f_code.co_name for frame, _ in traceback.walk_tb(error.__traceback__)]
        assert frames == ["look_up", "resolve"], frames  # its own thread's, raised once


async def test_tasks_waiting_on_a_failed_query_each_raise_an_error_of_their_own(inner: Scripted, clock: Clock) -> None:
    """As threads do (above): a dozen tasks behind one query that fails each raise an error
    of their own that says the same."""
    cache = CachingResolver(inner, clock=clock)
    inner.fail("a.test", ResolverUnavailable)
    inner.gate = threading.Event()
    tasks = [asyncio.create_task(cache.aresolve("a.test")) for _ in range(12)]
    await asyncio.sleep(0.1)  # they line up behind the first one's query
    inner.gate.set()
    raised = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 10.0)
    assert inner.asked == ["a.test"]
    assert {(type(e), str(e)) for e in raised} == {(ResolverUnavailable, "scripted ResolverUnavailable")}
    assert len({id(e) for e in raised}) == 12


async def test_a_cancelled_leader_hands_over(inner: Scripted, clock: Clock) -> None:
    """When the task making the query is cancelled, a waiting task makes it instead."""
    cache = CachingResolver(inner, clock=clock)
    inner.set("a.test", "127.0.0.5")
    inner.gate = threading.Event()
    leader = asyncio.create_task(cache.aresolve("a.test"))
    await asyncio.sleep(0.05)
    waiter = asyncio.create_task(cache.aresolve("a.test"))
    await asyncio.sleep(0.05)
    leader.cancel()
    await asyncio.sleep(0.05)
    inner.gate.set()
    answer = await asyncio.wait_for(waiter, 5.0)
    assert answer.addresses == ("127.0.0.5",)
    assert leader.cancelled()
    assert inner.asked == ["a.test"]  # the leader never got to ask; the waiter did


# --------------------------------------------------------------------------- properties

Op = tuple[str, int, float]  # name index, ttl, seconds to wait after


@settings(max_examples=150, deadline=None)
@given(
    ops=st.lists(
        st.tuples(st.integers(0, 6), st.integers(0, 500), st.floats(0, 200, allow_nan=False)),
        min_size=1,
        max_size=40,
    ),
    bounds=st.tuples(st.integers(0, 60), st.integers(0, 300)).map(lambda b: (b[0], b[0] + b[1])),
    max_entries=st.integers(1, 5),
)
def test_the_cache_keeps_what_a_model_of_ttl_and_lru_says(
    ops: list[Op], bounds: tuple[int, int], max_entries: int
) -> None:
    """Against a plain model (clamped TTLs, an LRU order): each lookup is a hit exactly when the
    model says so, with the TTL left, and the cache never holds more than max_entries names."""
    clock = Clock()
    inner = Scripted()
    cache = CachingResolver(
        inner, min_ttl=bounds[0], max_ttl=bounds[1], serve_stale=0, max_entries=max_entries, clock=clock
    )
    model: OrderedDict[str, float] = OrderedDict()  # name -> fresh until
    clamp: Callable[[float], float] = lambda ttl: min(max(ttl, bounds[0]), bounds[1])  # noqa: E731  # the model's one rule
    for index, ttl, wait in ops:
        name = f"n{index}.test"
        inner.set(name, "127.0.0.5", ttl=ttl)
        answer = cache.resolve(name)
        if name in model and clock.now < model[name]:
            assert answer.source == semconv.RESOLVE_SOURCE_CACHE
            assert answer.ttl == pytest.approx(model[name] - clock.now)
            model.move_to_end(name)
        else:
            assert answer.source == semconv.RESOLVE_SOURCE_DOH
            assert answer.ttl == clamp(ttl)
            model[name] = clock.now + clamp(ttl)
            model.move_to_end(name)
            while len(model) > max_entries:
                model.popitem(last=False)
        assert cache.names() == list(model)
        clock.now += wait
