"""Fixtures of the resolver tests: fake resolvers on fake domains, and one body for sync and async."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from pytest_failover.plugin import FakeDomainsFixture
from pytest_failover.resolve import Answer, DoHResolver, HTTPDNSResolver, Resolver
from pytest_failover.simulator import DoHServer, FakeDomain, HTTPDNSServer

DOH_HOST = "doh.test"
HTTPDNS_HOST = "httpdns.test"

#: ``ask(resolver, host) -> Answer``, through ``resolve`` or ``aresolve``.
Ask = Callable[[Resolver, str], Answer]


@pytest.fixture
def fd(fake_domains: FakeDomainsFixture) -> FakeDomainsFixture:
    """The plugin's fake domains, as a downstream suite gets them."""
    return fake_domains


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    """An event loop kept for the whole test, so async clients keep their connections."""
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


@pytest.fixture
def closing(loop: asyncio.AbstractEventLoop) -> Iterator[list[Resolver]]:
    """Resolvers closed (sync and async side) after the test."""
    made: list[Resolver] = []
    yield made
    for resolver in made:
        resolver.close()
        loop.run_until_complete(resolver.aclose())


@pytest.fixture(params=["sync", "async"])
def ask(request: pytest.FixtureRequest, loop: asyncio.AbstractEventLoop) -> Ask:
    """One test body for ``resolve`` and ``aresolve``."""
    if request.param == "sync":
        return lambda resolver, host: resolver.resolve(host)
    return lambda resolver, host: loop.run_until_complete(resolver.aresolve(host))


@pytest.fixture
def doh(fd: FakeDomainsFixture) -> tuple[DoHServer, FakeDomain]:
    """A fake DoH server at https://doh.test/dns-query."""
    server = DoHServer()
    return server, fd.add(DOH_HOST, server)


@pytest.fixture
def httpdns(fd: FakeDomainsFixture) -> tuple[HTTPDNSServer, FakeDomain]:
    """A fake HTTPDNS endpoint at https://httpdns.test/d?host=..."""
    server = HTTPDNSServer()
    return server, fd.add(HTTPDNS_HOST, server)


@pytest.fixture
def doh_resolver(fd: FakeDomainsFixture, doh: tuple[DoHServer, FakeDomain], closing: list[Resolver]) -> DoHResolver:
    """A DoHResolver of the fake DoH server, reached by its bootstrap IP."""
    resolver = DoHResolver(
        f"https://{DOH_HOST}/dns-query", bootstrap=doh[1].address, verify=fd.ssl_context(), timeout=2.0
    )
    closing.append(resolver)
    return resolver


@pytest.fixture
def make_doh(
    fd: FakeDomainsFixture, doh: tuple[DoHServer, FakeDomain], closing: list[Resolver]
) -> Callable[..., DoHResolver]:
    """``make_doh(**options)``: a DoHResolver of the fake server, reached by its bootstrap IP."""

    def make(**options: Any) -> DoHResolver:
        options.setdefault("timeout", 2.0)
        resolver = DoHResolver(
            f"https://{DOH_HOST}/dns-query", bootstrap=doh[1].address, verify=fd.ssl_context(), **options
        )
        closing.append(resolver)
        return resolver

    return make


@pytest.fixture
def make_httpdns(
    fd: FakeDomainsFixture, httpdns: tuple[HTTPDNSServer, FakeDomain], closing: list[Resolver]
) -> Callable[..., HTTPDNSResolver]:
    """``make_httpdns(**options)``: an HTTPDNSResolver of the fake endpoint."""

    def make(**options: Any) -> HTTPDNSResolver:
        options.setdefault("timeout", 2.0)
        resolver = HTTPDNSResolver(
            f"https://{HTTPDNS_HOST}/d?host={{host}}",
            bootstrap=httpdns[1].address,
            verify=fd.ssl_context(),
            **options,
        )
        closing.append(resolver)
        return resolver

    return make
