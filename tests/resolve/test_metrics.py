"""The resolution metrics of the transports, read with an in-memory metric reader: a DoH
answer, a cache hit, a stale answer and a failure each record what they should."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    HistogramDataPoint,
    InMemoryMetricReader,
    NumberDataPoint,
)

from pytest_failover import (
    AllDomainsFailed,
    AsyncFailoverTransport,
    ExponentialBackoff,
    FailoverTransport,
    Policy,
    Pool,
    faults,
    semconv,
)
from pytest_failover.plugin import FakeDomainsFixture
from pytest_failover.resolve import CachingResolver, DoHResolver, Resolver
from pytest_failover.simulator import DoHServer, FakeDomain

from .conftest import DOH_HOST

API = "api.test"

#: ``get(resolver, url)``: one GET through a new sync or async failover transport of pool
#: ``api`` (https://api.test only, one attempt) measured by the test's meter provider.
Get = Callable[[Resolver, str], httpx.Response]


@pytest.fixture
def reader() -> InMemoryMetricReader:
    return InMemoryMetricReader()


@pytest.fixture(params=["sync", "async"])
def get(
    request: pytest.FixtureRequest, loop: asyncio.AbstractEventLoop, reader: InMemoryMetricReader
) -> Iterator[Get]:
    provider = MeterProvider(metric_readers=[reader])
    pool = Pool("api", [f"https://{API}"])

    def policy(resolver: Resolver) -> Policy:
        return Policy(resolver=resolver, schedule=ExponentialBackoff(max_attempts=1), attempt_timeout=2.0)

    def get_sync(resolver: Resolver, url: str) -> httpx.Response:
        with httpx.Client(transport=FailoverTransport(pool, policy(resolver), meter_provider=provider)) as client:
            response = client.get(url)
            response.read()
            return response

    def get_async(resolver: Resolver, url: str) -> httpx.Response:
        async def go() -> httpx.Response:
            transport = AsyncFailoverTransport(pool, policy(resolver), meter_provider=provider)
            async with httpx.AsyncClient(transport=transport) as client:
                response = await client.get(url)
                await response.aread()
                return response

        return loop.run_until_complete(go())

    yield get_sync if request.param == "sync" else get_async
    provider.shutdown()


def points(reader: InMemoryMetricReader, name: str) -> list[tuple[Mapping[str, Any], float]]:
    """``(attributes, count or sum)`` of each point of metric ``name``: a histogram's count."""
    data = reader.get_metrics_data()
    found: list[tuple[Mapping[str, Any], float]] = []
    for resource in data.resource_metrics if data is not None else []:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name != name:
                    continue
                for point in metric.data.data_points:
                    if isinstance(point, HistogramDataPoint):
                        found.append((dict(point.attributes or {}), point.count))
                    elif isinstance(point, NumberDataPoint):
                        found.append((dict(point.attributes or {}), point.value))
    return found


def labels(source: str, resolver: str, **more: str) -> dict[str, str]:
    return {
        semconv.SERVER_ADDRESS: API,
        semconv.FAILOVER_RESOLVER: resolver,
        semconv.FAILOVER_RESOLVE_SOURCE: source,
        **more,
    }


def test_a_doh_answer_records_its_duration_and_no_failure(
    fd: FakeDomainsFixture, doh: tuple[DoHServer, FakeDomain], doh_resolver: DoHResolver,
    get: Get, reader: InMemoryMetricReader,
) -> None:
    """A connection resolved by DoH is one duration point, source doh, resolver DoHResolver."""
    api = fd.add(API)
    doh[0].answer(API, [api.address], ttl=60)
    assert get(doh_resolver, f"https://{API}/").status_code == 200
    assert points(reader, semconv.FAILOVER_RESOLVE_DURATION) == [(labels("doh", "DoHResolver"), 1)]
    assert points(reader, semconv.FAILOVER_RESOLVE_FAILURES) == []


@pytest.mark.parametrize("second", [semconv.RESOLVE_SOURCE_CACHE, semconv.RESOLVE_SOURCE_STALE])
def test_a_cache_hit_or_a_stale_answer_is_a_duration_point_of_its_source(
    fd: FakeDomainsFixture, doh: tuple[DoHServer, FakeDomain], doh_resolver: DoHResolver,
    get: Get, reader: InMemoryMetricReader, second: str,
) -> None:
    """The second connection is answered by the cache (``cache``), or, with DoH down after the
    answer expired, by the expired answer (``stale``, not a failure); DoH is asked once."""
    api = fd.add(API)
    doh[0].answer(API, [api.address], ttl=60)
    now = [0.0]
    resolver = CachingResolver(doh_resolver, clock=lambda: now[0])
    assert get(resolver, f"https://{API}/1").status_code == 200
    if second == semconv.RESOLVE_SOURCE_STALE:
        fd.fail(DOH_HOST, faults.refused())
        now[0] += 600.0
    assert get(resolver, f"https://{API}/2").status_code == 200
    assert sorted(points(reader, semconv.FAILOVER_RESOLVE_DURATION), key=lambda p: str(p[0])) == sorted(
        [(labels(semconv.RESOLVE_SOURCE_DOH, "CachingResolver"), 1), (labels(second, "CachingResolver"), 1)],
        key=lambda p: str(p[0]),
    )
    assert len(doh[0].queries(API)) == 2  # A and AAAA, once
    assert points(reader, semconv.FAILOVER_RESOLVE_FAILURES) == []


def test_a_failure_counts_with_its_error_type(
    fd: FakeDomainsFixture, doh_resolver: DoHResolver, get: Get, reader: InMemoryMetricReader
) -> None:
    """DoH down and nothing cached: one failure and one duration point, both with the error's class."""
    fd.add(API)
    fd.fail(DOH_HOST, faults.refused())
    with pytest.raises(AllDomainsFailed):
        get(doh_resolver, f"https://{API}/")
    failed = labels("doh", "DoHResolver", **{semconv.ERROR_TYPE: "ResolverUnavailable"})
    assert points(reader, semconv.FAILOVER_RESOLVE_FAILURES) == [(failed, 1)]
    assert points(reader, semconv.FAILOVER_RESOLVE_DURATION) == [(failed, 1)]
    assert fd.requests(API) == []
