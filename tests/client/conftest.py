from __future__ import annotations

import asyncio
import ssl
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import trustme

from pytest_failover import AsyncFailoverTransport, FailoverTransport, Policy, Pool

from .servers import LoopbackServer, running


@pytest.fixture(scope="session")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="session")
def _servers(ca: trustme.CA) -> Iterator[dict[str, LoopbackServer]]:
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("localhost", "127.0.0.1").configure_cert(tls)
    rogue = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    trustme.CA().issue_cert("localhost", "127.0.0.1").configure_cert(rogue)
    with running("a") as a, running("b") as b, running("c") as c, running(
        "tls", tls
    ) as secure, running("rogue", rogue) as untrusted:
        yield {"a": a, "b": b, "c": c, "tls": secure, "rogue": untrusted}


@pytest.fixture
def servers(_servers: dict[str, LoopbackServer]) -> dict[str, LoopbackServer]:
    for server in _servers.values():
        server.set()
        server.reset_records()
    return _servers


class Harness:
    """One failover client, sync or async, with the same blocking call surface."""

    def __init__(self, kind: str, pools: list[Pool], policy: Policy | None, **kwargs: Any) -> None:
        self.kind = kind
        verify = kwargs.pop("verify", True)
        if kind == "sync":
            self.transport: FailoverTransport | AsyncFailoverTransport = FailoverTransport(
                pools, policy, httpx.HTTPTransport(verify=verify), **kwargs
            )
            self._client: httpx.Client | httpx.AsyncClient = httpx.Client(transport=self.transport)
        else:
            self.loop = asyncio.new_event_loop()
            self.transport = AsyncFailoverTransport(
                pools, policy, httpx.AsyncHTTPTransport(verify=verify), **kwargs
            )
            self._client = httpx.AsyncClient(transport=self.transport)

    def request(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        if isinstance(self._client, httpx.Client):
            return self._client.request(method, url, **kwargs)
        return self.loop.run_until_complete(self._client.request(method, url, **kwargs))

    def close(self) -> None:
        if isinstance(self._client, httpx.Client):
            self._client.close()
        else:
            self.loop.run_until_complete(self._client.aclose())
            self.loop.close()


@pytest.fixture(params=["sync", "async"])
def make_client(request: pytest.FixtureRequest) -> Iterator[Any]:
    """Build a failover client of the parametrised kind; one test body for both."""
    made: list[Harness] = []

    def make(pools: list[Pool], policy: Policy | None = None, **kwargs: Any) -> Harness:
        harness = Harness(request.param, pools, policy, **kwargs)
        made.append(harness)
        return harness

    yield make
    for harness in made:
        harness.close()
