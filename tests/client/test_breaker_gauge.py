"""``failover.breaker.state``: every domain's breaker, read at each collection.

A gauge set only at a transition goes unreported once a collection passes without one:
under delta temporality in every SDK, and under cumulative temporality (Prometheus) in every
SDK before 1.45 (opentelemetry-python #4512). A dashboard's series and an alert on an open
breaker then ended one scrape after the breaker opened. The gauge is observed instead, and
these tests read it as exporters do, with both temporalities.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, precondition, rule
from opentelemetry.sdk.metrics import (
    Counter,
    Histogram,
    MeterProvider,
    ObservableCounter,
    ObservableGauge,
    ObservableUpDownCounter,
    UpDownCounter,
)
from opentelemetry.sdk.metrics import _Gauge as SyncGauge  # the SDK exports it only privately
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    InMemoryMetricReader,
    NumberDataPoint,
)

from pytest_failover import FailoverTransport, Policy, Pool

PRIMARY, BACKUP = "http://127.0.0.1:1", "http://127.0.0.2:1"  # answered in process: nothing is dialled
# Every kind of instrument delta, whichever kind the gauge is.
_DELTA: dict[type, AggregationTemporality] = dict.fromkeys(
    (Counter, UpDownCounter, Histogram, SyncGauge, ObservableCounter, ObservableUpDownCounter, ObservableGauge),
    AggregationTemporality.DELTA,
)


def _primary_refuses(request: httpx.Request) -> httpx.Response:
    if request.url.host == "127.0.0.1":
        raise httpx.ConnectError("refused", request=request)
    return httpx.Response(200, request=request)


def _transport(provider: MeterProvider, pool: str = "api") -> FailoverTransport:
    return FailoverTransport(
        [Pool(pool, [PRIMARY, BACKUP])],
        Policy(breaker_threshold=1, breaker_cooldown=60.0),
        transport=httpx.MockTransport(_primary_refuses),
        meter_provider=provider,
    )


def _states(reader: InMemoryMetricReader) -> dict[tuple[str, str], float]:
    """One collection's breaker states, by pool and domain."""
    data = reader.get_metrics_data()
    return {
        (str(attributes["failover.pool"]), str(attributes["failover.domain"])): point.value
        for rm in (data.resource_metrics if data else [])
        for sm in rm.scope_metrics
        for metric in sm.metrics
        if metric.name == "failover.breaker.state"
        for point in metric.data.data_points
        if isinstance(point, NumberDataPoint) and (attributes := point.attributes or {})
    }


@pytest.fixture(params=["cumulative", "delta"])
def reader(request: pytest.FixtureRequest) -> InMemoryMetricReader:
    return InMemoryMetricReader(preferred_temporality=_DELTA if request.param == "delta" else None)


def test_every_collection_reads_every_domain_s_breaker(reader: InMemoryMetricReader) -> None:
    transport = _transport(MeterProvider(metric_readers=[reader]))
    assert _states(reader) == {("api", PRIMARY): 0, ("api", BACKUP): 0}  # as built: closed
    client = httpx.Client(transport=transport)
    assert client.get(PRIMARY + "/x").extensions["failover"].domain == BACKUP
    for _ in range(3):  # the collection after the opening, and every one after it
        assert _states(reader) == {("api", PRIMARY): 2, ("api", BACKUP): 0}
    client.close()


def test_every_transport_on_a_provider_is_read(reader: InMemoryMetricReader) -> None:
    """The SDK keeps the callbacks of a gauge's first creator only, and hands later creators
    that instrument: the one callback reads every transport (a sharer's state once)."""
    provider = MeterProvider(metric_readers=[reader])
    first, second = _transport(provider, "api"), _transport(provider, "eu")
    sharer = FailoverTransport.sharing(second, httpx.MockTransport(_primary_refuses))
    httpx.Client(transport=sharer).get(PRIMARY + "/x")  # the eu pool's primary opens
    expected = {("api", PRIMARY): 0, ("api", BACKUP): 0, ("eu", PRIMARY): 2, ("eu", BACKUP): 0}
    assert _states(reader) == expected
    assert _states(reader) == expected
    for transport in (first, second, sharer):
        transport.close()


def test_a_closed_state_s_series_end_with_their_last_reading(reader: InMemoryMetricReader) -> None:
    """Read while any front-end of the state is open; once the last closes, its states are
    read once more (a test reads the gauge after its client closed; an exporter sends the last
    reading), then never."""
    transport = _transport(MeterProvider(metric_readers=[reader]))
    sharer = FailoverTransport.sharing(transport, httpx.MockTransport(_primary_refuses))
    httpx.Client(transport=transport).get(PRIMARY + "/x")
    opened = {("api", PRIMARY): 2, ("api", BACKUP): 0}
    transport.close()
    assert _states(reader) == opened  # the sharer still serves from the state
    assert _states(reader) == opened
    sharer.close()
    sharer.close()  # (closing twice changes nothing)
    assert _states(reader) == opened  # the last reading
    assert _states(reader) == {}


def test_a_transport_dropped_unclosed_leaves_the_gauge(reader: InMemoryMetricReader) -> None:
    transport = _transport(MeterProvider(metric_readers=[reader]))
    assert len(_states(reader)) == 2
    del transport
    gc.collect()
    assert _states(reader) == {}


def test_two_states_that_name_one_domain_alike_report_the_worse(reader: InMemoryMetricReader) -> None:
    """A sync and an async client built apart (no ``sharing``) with one pool's name: one
    series for each of its domains, open while either's breaker is open, whichever was built
    first, and whether the other's closed state is read live or in its last reading."""
    provider = MeterProvider(metric_readers=[reader])
    opened = {("api", PRIMARY): 2, ("api", BACKUP): 0}
    for older_opens in (True, False):
        older, newer = _transport(provider), _transport(provider)
        opener, other = (older, newer) if older_opens else (newer, older)
        httpx.Client(transport=opener).get(PRIMARY + "/x")
        assert _states(reader) == opened
        other.close()
        assert _states(reader) == opened  # beside the other's last reading
        assert _states(reader) == opened
        opener.close()
        assert _states(reader) == opened  # its own last reading
        assert _states(reader) == {}


def test_collections_while_a_dozen_threads_build_use_and_drop_transports(
    reader: InMemoryMetricReader, caplog: pytest.LogCaptureFixture
) -> None:
    """An exporter's thread collects while a dozen threads each build transports on one
    provider, open a primary's breaker, and close or drop them (a weak reference's callback
    leaves the registry as the collection reads it): no callback fails (the SDK would log it
    and report nothing), every collection reads whole states (both domains of a pool), the
    open primary of a transport that lives through it all among them, and once all are gone,
    nothing."""
    provider = MeterProvider(metric_readers=[reader])
    steady = _transport(provider, "steady")
    httpx.Client(transport=steady).get(PRIMARY + "/x")
    done = threading.Event()
    readings: list[dict[tuple[str, str], float]] = []

    def collect() -> None:
        for _ in range(5_000):  # bounded: the workers end long before
            readings.append(_states(reader))
            if done.is_set():
                return

    def work(n: int) -> None:
        for round_ in range(20):
            transport = _transport(provider, f"pool{n}")
            client = httpx.Client(transport=transport)
            assert client.get(PRIMARY + "/x").extensions["failover"].domain == BACKUP
            if round_ % 2:
                client.close()  # (else dropped unclosed)
            del transport, client
            gc.collect(0)

    collector = threading.Thread(target=collect)
    collector.start()
    with ThreadPoolExecutor(max_workers=12) as workers:
        list(workers.map(work, range(12)))
    done.set()
    collector.join(timeout=60)
    steady.close()
    assert not collector.is_alive()
    assert not [record for record in caplog.records if record.name.startswith("opentelemetry")]
    assert readings
    for reading in readings:
        assert {(pool, BACKUP) for pool, _ in reading} | {(pool, PRIMARY) for pool, _ in reading} == set(reading)
        assert {value for (_, domain), value in reading.items() if domain == BACKUP} <= {0}
        assert {value for (_, domain), value in reading.items() if domain == PRIMARY} <= {0, 2}  # (built; opened)
        assert (reading[("steady", PRIMARY)], reading[("steady", BACKUP)]) == (2, 0)
    gc.collect()  # the dropped ones a young collection left
    _states(reader)  # the last readings
    assert _states(reader) == {}


def test_a_state_whose_last_open_front_end_was_dropped_leaves_the_gauge(reader: InMemoryMetricReader) -> None:
    """The transport that built a state is closed but still referenced; the one sharing it
    was dropped unclosed (an aiohttp session never closes its middleware) in a reference
    cycle. Once collected, no front-end serves from the state: its series end, though no
    close said so."""
    owner = _transport(MeterProvider(metric_readers=[reader]))
    sharer = FailoverTransport.sharing(owner, httpx.MockTransport(_primary_refuses))
    httpx.Client(transport=sharer).get(PRIMARY + "/x")
    owner.close()
    opened = {("api", PRIMARY): 2, ("api", BACKUP): 0}
    assert _states(reader) == opened  # the sharer serves from it
    cycle: list[object] = [sharer]
    cycle.append(cycle)
    del sharer, cycle
    assert _states(reader) == opened  # not collected yet
    gc.collect()
    assert _states(reader) == {}
    assert owner.state().pools["api"].domain(PRIMARY).breaker == "open"  # (the state lives)


def test_each_provider_reads_its_own_transports() -> None:
    ours, theirs = InMemoryMetricReader(), InMemoryMetricReader()
    first = _transport(MeterProvider(metric_readers=[ours]), "api")
    second = _transport(MeterProvider(metric_readers=[theirs]), "eu")
    assert set(_states(ours)) == {("api", PRIMARY), ("api", BACKUP)}
    assert set(_states(theirs)) == {("eu", PRIMARY), ("eu", BACKUP)}
    first.close()
    second.close()


def test_a_front_end_sharing_a_closed_state_reports_it_again(reader: InMemoryMetricReader) -> None:
    transport = _transport(MeterProvider(metric_readers=[reader]))
    transport.close()
    assert len(_states(reader)) == 2  # the last reading
    assert _states(reader) == {}
    sharer = FailoverTransport.sharing(transport, httpx.MockTransport(_primary_refuses))
    assert _states(reader) == {("api", PRIMARY): 0, ("api", BACKUP): 0}
    assert _states(reader) == {("api", PRIMARY): 0, ("api", BACKUP): 0}
    sharer.close()


_GLOBAL_LATER = """
import httpx
from opentelemetry import metrics
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from pytest_failover import FailoverTransport, Policy, Pool

def refuses(request):
    if request.url.host == "127.0.0.1":
        raise httpx.ConnectError("refused", request=request)
    return httpx.Response(200, request=request)

transport = FailoverTransport([Pool("api", ["http://127.0.0.1:1", "http://127.0.0.2:1"])],
                              Policy(breaker_threshold=1), transport=httpx.MockTransport(refuses))
reader = InMemoryMetricReader()
metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))  # after the transport
httpx.Client(transport=transport).get("http://127.0.0.1:1/x")
for _ in range(2):
    data = reader.get_metrics_data()
    print(sorted((p.attributes["failover.domain"], p.value) for rm in data.resource_metrics
                 for sm in rm.scope_metrics for m in sm.metrics if m.name == "failover.breaker.state"
                 for p in m.data.data_points))
"""


def test_a_transport_built_before_the_global_provider_is_read_through_it() -> None:
    """An application builds its clients at import and sets up OpenTelemetry later: the
    API's proxy meter hands the gauge over to the provider once it is set (a process of its
    own: a global provider is set once)."""
    ran = subprocess.run([sys.executable, "-c", _GLOBAL_LATER], capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stderr
    reading = str([(PRIMARY, 2), (BACKUP, 0)])
    assert ran.stdout.splitlines() == [reading, reading]


class FrontEndsComeAndGo(RuleBasedStateMachine):
    """Transports built, shared, closed and dropped in any order, each state with a pool of
    its own, read by one exporter. The model: a state's series are read while one of its
    front-ends is open and referenced; once the last of them closes, once more (the last
    reading), unless a front-end sharing it joins first or every front-end of it is dropped
    (the state is collected); once the last open one is dropped unclosed, never again."""

    def __init__(self) -> None:
        super().__init__()
        self.reader = InMemoryMetricReader()
        self.provider = MeterProvider(metric_readers=[self.reader])
        self.front_ends: list[tuple[int, FailoverTransport]] = []  # (its state's number, it), referenced
        self.open: set[int] = set()  # id() of the open ones among them
        self.last_pending: set[int] = set()  # the states whose last reading is due
        self.states = 0

    def _open_in(self, state: int) -> bool:
        return any(n == state and id(front_end) in self.open for n, front_end in self.front_ends)

    @precondition(lambda self: self.states < 3)
    @rule()
    def build(self) -> None:
        transport = _transport(self.provider, f"state{self.states}")
        self.front_ends.append((self.states, transport))
        self.open.add(id(transport))
        self.states += 1

    @precondition(lambda self: bool(self.front_ends) and len(self.front_ends) < 8)
    @rule(pick=st.integers(0, 7))
    def share(self, pick: int) -> None:
        """A front-end sharing another's state, open or closed (it joins it again)."""
        state, other = self.front_ends[pick % len(self.front_ends)]
        sharer = FailoverTransport.sharing(other, httpx.MockTransport(_primary_refuses))
        self.front_ends.append((state, sharer))
        self.open.add(id(sharer))
        self.last_pending.discard(state)  # read live again: its last reading is moot

    @precondition(lambda self: bool(self.front_ends))
    @rule(pick=st.integers(0, 7))
    def close(self, pick: int) -> None:
        state, front_end = self.front_ends[pick % len(self.front_ends)]
        was_open = id(front_end) in self.open
        front_end.close()
        self.open.discard(id(front_end))
        if was_open and not self._open_in(state):
            self.last_pending.add(state)

    @precondition(lambda self: bool(self.front_ends))
    @rule(pick=st.integers(0, 7), in_a_cycle=st.booleans())
    def drop(self, pick: int, in_a_cycle: bool) -> None:
        """Drop a front-end, open or closed, and collect it."""
        state, front_end = self.front_ends.pop(pick % len(self.front_ends))
        self.open.discard(id(front_end))
        collecting = gc.isenabled()
        gc.disable()  # (no automatic collection may move the cycle past the youngest generation)
        try:
            if in_a_cycle:
                cycle: list[object] = [front_end]
                cycle.append(cycle)
                del cycle
            del front_end
            gc.collect(0)  # the cycle is new: the front-end goes with it
        finally:
            if collecting:
                gc.enable()
        if not any(n == state for n, _ in self.front_ends):
            self.last_pending.discard(state)  # the state itself is collected

    @rule()
    def collect(self) -> None:
        expected = {
            key
            for state in range(self.states)
            if self._open_in(state) or state in self.last_pending
            for key in ((f"state{state}", PRIMARY), (f"state{state}", BACKUP))
        }
        assert set(_states(self.reader)) == expected
        self.last_pending.clear()

    def teardown(self) -> None:
        for _, front_end in self.front_ends:
            front_end.close()


FrontEndsComeAndGo.TestCase.settings = settings(
    max_examples=int(os.environ.get("HYPOTHESIS_EXAMPLES", 300)), stateful_step_count=30, deadline=None
)
TestFrontEndsComeAndGo = FrontEndsComeAndGo.TestCase
