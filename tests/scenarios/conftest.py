"""Fixtures of the availability scenarios: fake domains per process, the targeted clients, small sizes.

Every scenario test runs once per client the targets are for (``TARGETED``): our httpx
transports, the same with hedging and slow calls on, and the default policy through the
requests adapter (threads) and the aiohttp middleware (tasks). The fake servers are
shared by all of them.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from benchmarks.scenarios._clients import TARGETED, Client, clients
from benchmarks.scenarios._run import Env, fake_domains
from benchmarks.scenarios._scenarios import SMALL
from pytest_failover.simulator import FakeDomains


@pytest.fixture(scope="session")
def _domains() -> Iterator[FakeDomains]:
    """One set of fake servers per test process (they start once, a run only flips states)."""
    fd = fake_domains()
    yield fd
    fd.close()


@pytest.fixture
def env(_domains: FakeDomains) -> Iterator[Env]:
    """The fake domains, intercepting (loopback only) for this test alone."""
    with _domains.intercept():
        yield Env(_domains)
    _domains.reset()


@pytest.fixture(scope="session", params=TARGETED)
def key(request: pytest.FixtureRequest) -> str:
    """The key of the client under test (``ours``, ``ours+hedging``, ``requests+aiohttp``)."""
    value: str = request.param
    return value


def _pick(key: str, deadline: float | None = None) -> Client:
    (client,) = [c for c in clients(cooldown=SMALL.cooldown, deadline=deadline) if c.key == key]
    return client


@pytest.fixture(scope="session")
def client(key: str) -> Client:
    """The client under test with the default ``Policy()``, its breaker cooldown scaled to the small sizes."""
    return _pick(key)


@pytest.fixture(scope="session")
def client_with_deadline(key: str) -> Client:
    """The client under test with ``Policy(deadline=...)`` for the slow-drip primary."""
    return _pick(key, SMALL.trickle_deadline)
