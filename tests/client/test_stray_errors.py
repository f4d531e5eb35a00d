"""A raw ``OSError`` from the inner transport (httpcore's anyio backend lets an
``ssl.SSLError`` out of a read) is the attempt's read error in the caller's library (its
``error.type`` is ``tls_error``, from the cause): a request that may be re-sent moves to
the next domain; one that may not fails with the transport's ``AllDomainsFailed``, never
with the raw error."""

from __future__ import annotations

import asyncio
import ssl
from types import ModuleType
from typing import Any

import httpx
import httpx2
import pytest

import pytest_failover
from pytest_failover import Pool, semconv
from pytest_failover import httpx2 as pf2

PRIMARY, BACKUP = "https://primary.stray.test", "https://backup.stray.test"
LIBRARIES = {"httpx": (httpx, pytest_failover), "httpx2": (httpx2, pf2)}


def _handler(http: ModuleType) -> Any:
    def answer(request: Any) -> Any:
        if request.url.host == "primary.stray.test":
            raise ssl.SSLError(1, "[SSL: TLSV1_ALERT_PROTOCOL_VERSION] tlsv1 alert protocol version")
        return http.Response(200, text="backup")

    return answer


def _send(name: str, asynchronous: bool, method: str, headers: dict[str, str] | None = None) -> Any:
    http, front = LIBRARIES[name]
    pool = Pool("api", [PRIMARY, BACKUP])
    if not asynchronous:
        inner = http.MockTransport(_handler(http))
        with http.Client(transport=front.FailoverTransport(pool, transport=inner)) as client:
            return client.request(method, PRIMARY + "/x", headers=headers)

    async def send() -> Any:
        handler = _handler(http)

        async def answer(request: Any) -> Any:
            return handler(request)

        inner = http.MockTransport(answer)
        async with http.AsyncClient(transport=front.AsyncFailoverTransport(pool, transport=inner)) as client:
            return await client.request(method, PRIMARY + "/x", headers=headers)

    return asyncio.run(send())


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("name", list(LIBRARIES))
def test_a_raw_oserror_moves_a_get_to_the_backup(name: str, asynchronous: bool) -> None:
    response = _send(name, asynchronous, "GET")
    assert response.text == "backup"
    first, second = response.extensions["failover"].attempts
    assert first.domain == PRIMARY and first.error_type == semconv.ERROR_TLS and first.sent
    assert second.domain == BACKUP and second.error_type is None


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("name", list(LIBRARIES))
def test_a_raw_oserror_on_a_post_is_the_transports_error_not_the_raw_one(name: str, asynchronous: bool) -> None:
    http, front = LIBRARIES[name]
    with pytest.raises(front.AllDomainsFailed) as caught:
        _send(name, asynchronous, "POST")
    assert isinstance(caught.value, http.TransportError) and caught.value.reason == "not_retryable"
    [attempt] = caught.value.attempts
    assert attempt.domain == PRIMARY and attempt.error_type == semconv.ERROR_TLS
    cause = caught.value.__cause__
    assert isinstance(cause, http.ReadError) and isinstance(cause.__cause__, ssl.SSLError)
