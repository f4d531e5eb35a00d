"""A ``TusServer`` behind ``httpx.MockTransport``: the protocol's tests without sockets."""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx

from pytest_failover.faults import Healthy
from pytest_failover.simulator import RecordedRequest, TusServer
from pytest_failover.simulator._handlers import to_response

#: Decides, before the server sees it, whether a request fails: return a response or raise.
Interceptor = Callable[[httpx.Request], httpx.Response | None]


def recorded(request: httpx.Request) -> RecordedRequest:
    """The request as a fake domain would have recorded it."""
    target = request.url.raw_path.decode("ascii")
    return RecordedRequest(
        host=request.url.host,
        scheme="https" if request.url.scheme == "https" else "http",
        method=request.method,
        path=target,
        headers={k.lower(): v for k, v in request.headers.items()},
        body=request.read(),
        fault=Healthy(),
        time=time.time(),
    )


def transport(
    server: TusServer, intercept: Interceptor | None = None
) -> tuple[httpx.MockTransport, list[httpx.Request]]:
    """Answers every request with ``server``, unless ``intercept`` answers (or raises) first;
    the list fills with the requests sent."""
    seen: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if intercept is not None:
            early = intercept(request)
            if early is not None:
                return early
        status, headers, body = to_response(server(recorded(request)))
        return httpx.Response(status, headers=headers, content=body)

    return httpx.MockTransport(handle), seen
