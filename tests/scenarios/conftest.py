"""Fixtures of the availability scenarios: fake domains per process, our client, small sizes."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from benchmarks.scenarios._clients import Client, clients
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


@pytest.fixture(scope="session")
def ours() -> Client:
    """Our transport with the default ``Policy()``, its breaker cooldown scaled to the small sizes."""
    return clients(cooldown=SMALL.cooldown)[0]


@pytest.fixture(scope="session")
def ours_with_deadline() -> Client:
    """Our transport with ``Policy(deadline=...)`` for the slow-drip primary."""
    return clients(cooldown=SMALL.cooldown, deadline=SMALL.trickle_deadline)[0]
