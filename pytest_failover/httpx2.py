"""Failover for httpx2, Pydantic's maintained fork of httpx (``pip install 'pytest-failover[httpx2]'``).

``FailoverTransport`` and ``AsyncFailoverTransport`` take the same arguments and behave
as ``pytest_failover.FailoverTransport`` and ``AsyncFailoverTransport`` do, over the same
request path (exchange, plan, pools, telemetry, stale cache, sticky files, shared
health, hedging, resolvers); they are an ``httpx2.BaseTransport`` and an
``httpx2.AsyncBaseTransport``, and their errors are ``httpx2.TransportError`` s::

    import httpx2
    from pytest_failover import Pool
    from pytest_failover.httpx2 import FailoverTransport

    client = httpx2.Client(transport=FailoverTransport([Pool("api", [primary, backup])]))

This module imports httpx2 and never httpx (nor httpcore): a process with only httpx2
installed can use it. See ``docs/httpx2.md``, also for ``httpx2.alias_httpx()``.
"""

from __future__ import annotations

try:
    import httpx2
except ImportError as exc:  # pragma: no cover - exercised by an install without the extra
    raise ImportError(
        "pytest_failover.httpx2 needs httpx2: pip install 'pytest-failover[httpx2]'"
    ) from exc

from ._exceptions import AllFailed, CircuitOpen, Failover
from ._lib import HTTPLib
from ._transport import AsyncLoop, SyncLoop

__all__ = ["AllDomainsFailed", "AsyncFailoverTransport", "CircuitOpenError", "FailoverError", "FailoverTransport"]


class FailoverError(Failover, httpx2.TransportError):
    """Base class: the failover client gave up on a logical request (an ``httpx2.TransportError``)."""


class AllDomainsFailed(AllFailed, FailoverError):
    __doc__ = AllFailed.__doc__


class CircuitOpenError(CircuitOpen, FailoverError):
    __doc__ = CircuitOpen.__doc__


HTTPX2 = HTTPLib(httpx2, "httpcore2", (FailoverError, AllDomainsFailed, CircuitOpenError))


class FailoverTransport(SyncLoop[httpx2.Request, httpx2.Response, httpx2.BaseTransport], httpx2.BaseTransport):
    __doc__ = SyncLoop.__doc__
    _lib = HTTPX2


class AsyncFailoverTransport(
    AsyncLoop[httpx2.Request, httpx2.Response, httpx2.AsyncBaseTransport], httpx2.AsyncBaseTransport
):
    __doc__ = AsyncLoop.__doc__
    _lib = HTTPX2
