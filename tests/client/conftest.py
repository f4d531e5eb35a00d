from __future__ import annotations

import ssl
import threading
import time
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import httpx
import httpx2
import pytest
import trustme

from pytest_failover import Policy, Pool

from .frontends import KINDS, Harness
from .servers import Flapping, LoopbackServer, running


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


@pytest.fixture
def flapping(servers: dict[str, LoopbackServer]) -> Iterator[Flapping]:
    """Server a cycles healthy -> 503 -> reset -> cut mid-body; b stays healthy; bounded in
    time. A POST's body cut mid-way is read inside the transport (a declared length): its
    failure is the attempt's, raised as ``FailoverError``, and the POST is never sent again."""
    a, b = servers["a"], servers["b"]
    stop = threading.Event()

    def heal() -> None:
        stop.set()
        thread.join()
        a.set()

    def flip() -> None:
        states: list[dict[str, object]] = [{}, {"status": 503}, {"reset": True}, {"truncate": True}]
        i = 0
        deadline = time.monotonic() + 60
        while not stop.wait(0.01) and time.monotonic() < deadline:
            i += 1
            a.set(**states[i % len(states)])

    thread = threading.Thread(target=flip, daemon=True)
    thread.start()
    yield a, b, heal
    heal()


@pytest.fixture(params=KINDS)
def make_client(request: pytest.FixtureRequest) -> Iterator[Any]:
    """Build a failover client of the parametrised kind (httpx sync and async, requests,
    aiohttp); one test body for all four."""
    made: list[Harness] = []

    def make(pools: list[Pool], policy: Policy | None = None, **kwargs: Any) -> Harness:
        harness = Harness(request.param, pools, policy, **kwargs)
        made.append(harness)
        return harness

    yield make
    for harness in made:
        harness.close()


@pytest.fixture(params=[httpx, httpx2], ids=["httpx", "httpx2"])
def http(request: pytest.FixtureRequest) -> ModuleType:
    """The httpx-API library a test body runs against: httpx, then httpx2 (whose transports
    sit on httpcore2)."""
    module: ModuleType = request.param
    return module
