"""Failover for the other Python HTTP clients, on the same loop and core as the transports.

- :mod:`pytest_failover.integrations.requests`: ``FailoverAdapter``, a
  ``requests.adapters.HTTPAdapter`` (extra ``pytest-failover[requests]``);
- :mod:`pytest_failover.integrations.aiohttp`: ``FailoverMiddleware``, an aiohttp
  client middleware (extra ``pytest-failover[aiohttp]``).

Each front-end turns its library's request into an ``httpx.Request`` and runs it through a
:class:`~pytest_failover.FailoverTransport` (or its async twin) whose inner transport
does the I/O with the library itself, mapping the library's errors onto the
``httpx.TransportError`` subclasses the classification knows. So there is one failover
loop and one set of decisions for every client; only the conversions live here.

Neither library has per-request extensions, so the transports' per-request options
(``{"enabled": False}``, ``{"domain": ...}``, ``{"pool": ...}``, ``{"idempotent": True}``)
are given to every request made inside a :func:`failover_options` block. It is a
context variable, so it follows the calling thread and asyncio task and nothing else.

Importing this package imports neither library.
"""

from __future__ import annotations

from ._options import failover_options

__all__ = ["failover_options"]
