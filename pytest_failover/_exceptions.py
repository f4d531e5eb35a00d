"""The failover client's exceptions.

Every exception the transports raise is a ``TransportError`` of the front-end's HTTP
library, so code that already catches ``httpx.HTTPError`` (``httpx2.HTTPError``) keeps
working. Each library has its own three classes, declared by its front-end module
(``pytest_failover`` for httpx, ``pytest_failover.httpx2`` for httpx2) over the
library-neutral ones here, which hold what they carry::

    httpx.TransportError / httpx2.TransportError
     └── FailoverError                 (carries .attempts, .pool; also a Failover)
          ├── AllDomainsFailed         every allowed attempt failed (.reason says why it stopped)
          └── CircuitOpenError         every domain's breaker is open: no network call was made

The exception of the last attempt is chained as ``__cause__``.

A remote control document that is refused raises an error of its own, outside the
transport errors (it is bad input, not a failed request)::

    ValueError
     └── ControlError                  a control document was rejected and nothing changed
                                       (.reason: a stable code such as "bad_signature")
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._values import AttemptRecord

__all__ = ["AllFailed", "CircuitOpen", "ControlError", "Failover"]


class Failover(Exception):
    """Base class: the failover client gave up on a logical request.

    Library-neutral: each front-end's ``FailoverError`` is this and its library's
    ``TransportError``, whose constructor takes the ``request``."""

    def __init__(
        self,
        message: str,
        *,
        pool: str,
        attempts: Sequence[AttemptRecord] = (),
        reason: str,
        request: Any = None,
    ) -> None:
        super().__init__(message, request=request)  # type: ignore[call-arg]  # the library's TransportError, next in the MRO, takes request=
        self.pool = pool
        self.attempts: tuple[AttemptRecord, ...] = tuple(attempts)
        self.reason = reason


class AllFailed(Failover):
    """Every attempt the policy allowed failed.

    ``reason`` is one of ``exhausted`` (the schedule ran out), ``deadline``,
    ``not_retryable`` (bytes left and the request is not idempotent, or its body
    cannot be replayed) and ``retry_budget`` (the pool's retry budget is spent).
    """


class CircuitOpen(Failover):
    """Every candidate domain is open (or disabled): the request was not sent."""


class ControlError(ValueError):
    """A control document was rejected; nothing was changed.

    ``reason`` is a short stable code (``malformed``, ``bad_signature``, ``expired``,
    ``stale_version``, ...; the table is in ``pytest_failover.control``), the message
    says which rule did not fit and what was found.
    """

    def __init__(self, message: str, *, reason: str) -> None:
        super().__init__(message)
        self.reason = reason
