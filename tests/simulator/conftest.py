from __future__ import annotations

from collections.abc import Iterator

import pytest

from pytest_failover.simulator import FakeDomains


@pytest.fixture(scope="session")
def servers() -> Iterator[FakeDomains]:
    """One set of fake servers for the whole session, as the pytest plugin keeps them."""
    fake = FakeDomains().start()
    yield fake
    fake.close()


@pytest.fixture
def fd(servers: FakeDomains) -> Iterator[FakeDomains]:
    """The session's servers, intercepting for this test only and reset afterwards."""
    with servers.intercept():
        yield servers
    servers.reset()
