"""Testing mode (``pytest_failover.set_testing``, the plugin's ``failover_testing``): a retry
goes at once, decided as if it had waited: the same attempts, in the same order, the same
stop at the deadline."""

from __future__ import annotations

import asyncio
import time

import anyio
import httpx
import pytest

import pytest_failover
from pytest_failover import AsyncFailoverTransport, FailoverTransport, Pool

from .test_transport import fast

PRIMARY, BACKUP = "http://127.0.0.1:1", "http://127.0.0.2:1"  # answered in process: nothing is dialled
POOL = Pool("api", [PRIMARY, BACKUP])


def busy(request: httpx.Request, retry_after: str = "2") -> httpx.Response:
    """Both domains: 503, come back in ``retry_after`` seconds."""
    return httpx.Response(503, headers={"Retry-After": retry_after}, content=request.url.host.encode())


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The waits the loops ask for (sync and async), recorded instead of slept."""
    asked: list[float] = []

    async def asleep(delay: float) -> None:
        asked.append(delay)

    monkeypatch.setattr(time, "sleep", asked.append)
    monkeypatch.setattr(anyio, "sleep", asleep)
    return asked


def attempts(response: httpx.Response) -> list[tuple[int, str, int | None]]:
    return [(a.number, a.domain, a.status) for a in response.extensions["failover"].attempts]


@pytest.mark.parametrize("testing", [False, True], ids=["waits", "testing"])
def test_the_same_attempts_without_the_waits(sleeps: list[float], testing: bool) -> None:
    """503s with ``Retry-After: 2`` from both domains: the backup at once (failover), then
    the primary after Retry-After's 2 s, which testing mode skips; the attempts are the same."""
    with pytest_failover.set_testing(testing):
        transport = FailoverTransport([POOL], fast(deadline=10.0), transport=httpx.MockTransport(busy))
        with httpx.Client(transport=transport) as client:
            response = client.get(PRIMARY + "/x")
    assert attempts(response) == [(1, PRIMARY, 503), (2, BACKUP, 503), (3, PRIMARY, 503)]
    assert sleeps == ([] if testing else [2.0])


@pytest.mark.parametrize("testing", [False, True], ids=["waits", "testing"])
def test_a_wait_past_the_deadline_still_stops(sleeps: list[float], testing: bool) -> None:
    """A ``Retry-After`` that would take the retry past the deadline ends the request in
    testing mode too, after the same two attempts: the retry is judged as if it waited."""
    with pytest_failover.set_testing(testing):
        transport = FailoverTransport(
            [POOL], fast(deadline=5.0), transport=httpx.MockTransport(lambda r: busy(r, retry_after="8"))
        )
        with httpx.Client(transport=transport) as client:
            response = client.get(PRIMARY + "/x")
    assert attempts(response) == [(1, PRIMARY, 503), (2, BACKUP, 503)]
    assert sleeps == []


@pytest.mark.parametrize("testing", [False, True], ids=["waits", "testing"])
def test_an_async_client_retries_at_once_too(sleeps: list[float], testing: bool) -> None:
    async def get() -> httpx.Response:
        transport = AsyncFailoverTransport([POOL], fast(deadline=10.0), transport=httpx.MockTransport(busy))
        async with httpx.AsyncClient(transport=transport) as client:
            return await client.get(PRIMARY + "/x")

    with pytest_failover.set_testing(testing):
        response = asyncio.run(get())
    assert attempts(response) == [(1, PRIMARY, 503), (2, BACKUP, 503), (3, PRIMARY, 503)]
    assert sleeps == ([] if testing else [2.0])


def test_the_mode_comes_back_after_the_block() -> None:
    """``set_testing`` acts at once; used as a context manager it restores the mode it found."""
    assert not pytest_failover.is_testing()
    with pytest_failover.set_testing(True):
        assert pytest_failover.is_testing()
        with pytest_failover.set_testing(False):
            assert not pytest_failover.is_testing()
        assert pytest_failover.is_testing()
    assert not pytest_failover.is_testing()
    pytest_failover.set_testing(True)  # without a block: on until turned off
    try:
        assert pytest_failover.is_testing()
    finally:
        pytest_failover.set_testing(False)
