"""The httpx front-end: ``FailoverTransport`` and ``AsyncFailoverTransport`` for httpx
(``pytest_failover.FailoverTransport``), and their errors.

Thin declarations over the library-neutral loops of :mod:`._transport`; the httpx2 twin
is :mod:`pytest_failover.httpx2`. The requests and aiohttp front-ends speak httpx inside,
over these.
"""

from __future__ import annotations

try:
    import httpx
except ImportError as exc:  # tested in a process without httpx (tests/client/test_without_httpx.py)
    raise ImportError(
        "pytest_failover.FailoverTransport needs httpx: pip install 'pytest-failover[httpx]' "
        "(with httpx2: from pytest_failover.httpx2 import FailoverTransport)"
    ) from exc

from ._exceptions import AllFailed, CircuitOpen, Failover
from ._lib import HTTPLib
from ._transport import AsyncLoop, SyncLoop

__all__ = ["HTTPX", "AllDomainsFailed", "AsyncFailoverTransport", "CircuitOpenError", "FailoverError", "FailoverTransport"]


class FailoverError(Failover, httpx.TransportError):
    """Base class: the failover client gave up on a logical request (an ``httpx.TransportError``)."""


class AllDomainsFailed(AllFailed, FailoverError):
    __doc__ = AllFailed.__doc__


class CircuitOpenError(CircuitOpen, FailoverError):
    __doc__ = CircuitOpen.__doc__


HTTPX = HTTPLib(httpx, "httpcore", (FailoverError, AllDomainsFailed, CircuitOpenError))


class FailoverTransport(SyncLoop[httpx.Request, httpx.Response, httpx.BaseTransport], httpx.BaseTransport):
    __doc__ = SyncLoop.__doc__
    _lib = HTTPX


class AsyncFailoverTransport(
    AsyncLoop[httpx.Request, httpx.Response, httpx.AsyncBaseTransport], httpx.AsyncBaseTransport
):
    __doc__ = AsyncLoop.__doc__
    _lib = HTTPX
