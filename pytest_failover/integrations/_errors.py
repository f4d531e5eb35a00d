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
"""

from __future__ import annotations

from typing import TypeVar

from .._httpx import FailoverError

__all__ = ["carried", "last_cause"]

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
