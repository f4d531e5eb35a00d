"""The front-ends' errors: each library's own connection error that also is the failover error.

``FailoverAdapter`` raises ``requests.exceptions.ConnectionError`` subclasses and
``FailoverMiddleware`` ``aiohttp.ClientConnectionError`` subclasses; both are also the
matching :class:`~pytest_failover.AllDomainsFailed` / :class:`~pytest_failover.CircuitOpenError`,
with the same ``.attempts``, ``.pool`` and ``.reason``, so ``except requests.ConnectionError``,
``except aiohttp.ClientError`` and ``except pytest_failover.FailoverError`` all catch them::

    requests.exceptions.ConnectionError      pytest_failover.FailoverError
     └── requests AllDomainsFailed ───────────┤ AllDomainsFailed
     └── requests CircuitOpenError ───────────┘ CircuitOpenError

The exception of the last attempt, as the library raised it, is chained as ``__cause__``.

Each front-end maps its library's exceptions onto the httpx errors the classification
knows through one table of :data:`Row` s (:func:`row_of` reads it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

import httpx

from .._httpx import FailoverError

__all__ = ["Row", "carried", "last_cause", "row_of", "target_of"]

Row = tuple[type[BaseException], type[object], type[httpx.TransportError] | None]
"""A row of a front-end's error table: the class of what the library raised, the class of
what it says happened (the exception it wraps; ``object``: whatever), and the httpx error
that classifies the same way (``None``: it says nothing about the domain and propagates
unchanged)."""

E = TypeVar("E", bound=FailoverError)


def carried(kinds: tuple[type[E], type[E]], error: FailoverError, request: object) -> E:
    """``error`` (raised by the transport) as the front-end's class: ``kinds`` is the
    (all domains failed, circuit open) pair, ``request`` the library's own request,
    which ``.request`` then returns. Raise it ``from last_cause(error)``."""
    from .._httpx import CircuitOpenError

    cls = kinds[1] if isinstance(error, CircuitOpenError) else kinds[0]
    mine = cls.__new__(cls, str(error))
    FailoverError.__init__(
        mine, str(error), pool=error.pool, attempts=error.attempts, reason=error.reason
    )
    mine._request = request  # type: ignore[assignment]  # the library's request, as its own errors carry
    return mine


def last_cause(error: FailoverError) -> BaseException | None:
    """The exception of ``error``'s last attempt as the library raised it (the cause of
    the httpx error it was mapped to), or that httpx error when there is no other."""
    cause = error.__cause__
    return cause.__cause__ if cause is not None and cause.__cause__ is not None else cause


def row_of(table: Sequence[Row], raised: type[BaseException], said: type[object]) -> int | None:
    """The first row of ``table`` for an exception of class ``raised`` that says ``said``
    happened (None: no row, it propagates unchanged). Rows go from the most specific."""
    for row, (source, reason, _) in enumerate(table):
        if issubclass(raised, source) and issubclass(said, reason):
            return row
    return None


def target_of(table: Sequence[Row], raised: type[BaseException], said: type[object]) -> type[httpx.TransportError] | None:
    """The httpx class :func:`row_of`'s row names (None: propagate unchanged)."""
    row = row_of(table, raised, said)
    return None if row is None else table[row][2]
