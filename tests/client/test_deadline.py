"""The deadline bounds each whole attempt, under asyncio, trio and threads alike."""

from __future__ import annotations

import time
from collections.abc import Iterator

import anyio
import httpx
import pytest

from pytest_failover import (
    AsyncFailoverTransport,
    FailoverError,
    FailoverTransport,
    Policy,
    Pool,
    faults,
)
from pytest_failover.simulator import FakeDomains

HOST = "trickle.deadline.test"
POLICY = Policy(deadline=0.6, attempt_timeout=0.6)


@pytest.fixture(scope="module")
def trickling() -> Iterator[str]:
    """A fake domain that sends its headers at once, then the body a byte every 0.2 s."""
    with FakeDomains() as fake:
        fake.add(HOST)
        fake.fail(HOST, faults.trickle(0.2, b"0123456789"))
        yield f"http://{HOST}"


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_an_async_attempt_is_cut_at_its_deadline(trickling: str, backend: str) -> None:
    """A body trickled a byte at a time cannot hold an async call past its deadline."""

    async def main() -> float:
        transport = AsyncFailoverTransport([Pool("api", [trickling])], POLICY)
        async with httpx.AsyncClient(transport=transport) as client:
            started = time.monotonic()
            with pytest.raises(FailoverError) as caught:
                await client.get(trickling + "/slow")
            assert caught.value.attempts[0].error_type == "read_timeout"
            return time.monotonic() - started

    elapsed = anyio.run(main, backend=backend)
    assert 0.55 <= elapsed <= 0.6 + 0.1


def test_a_sync_attempt_is_cut_at_its_deadline(trickling: str) -> None:
    """The watchdog cuts a sync call's socket at the deadline, while it waits on the trickle."""
    transport = FailoverTransport([Pool("api", [trickling])], POLICY)
    with httpx.Client(transport=transport) as client:
        started = time.monotonic()
        with pytest.raises(FailoverError) as caught:
            client.get(trickling + "/slow")
        elapsed = time.monotonic() - started
    assert caught.value.attempts[0].error_type == "read_timeout"
    assert 0.55 <= elapsed <= 0.6 + 0.1
