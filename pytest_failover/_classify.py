"""What an attempt's result means: one place maps exceptions and responses to outcomes.

An outcome says whether the domain failed (breaker and budget count it), whether
request bytes may have left (a re-send could duplicate a side effect), the
low-cardinality ``error.type`` reported in telemetry, and any ``Retry-After``.
"""

from __future__ import annotations

import enum
import socket
import ssl
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime

import httpx

from ._policy import Policy
from .semconv import (
    ERROR_APP,
    ERROR_CONNECT,
    ERROR_CONNECT_TIMEOUT,
    ERROR_CONNECTION_REFUSED,
    ERROR_CONNECTION_RESET,
    ERROR_DNS,
    ERROR_POOL_TIMEOUT,
    ERROR_READ,
    ERROR_READ_TIMEOUT,
    ERROR_REMOTE_PROTOCOL,
    ERROR_SERVER_CERTIFICATE_INVALID,
    ERROR_TIMEOUT,
    ERROR_TLS,
    ERROR_WRITE,
    ERROR_WRITE_TIMEOUT,
)

__all__ = ["Outcome", "OutcomeKind", "classify_exception", "classify_response", "error_type_of"]


class OutcomeKind(str, enum.Enum):
    SUCCESS = "success"  # the domain answered with a success
    ANSWER = "answer"  # the domain answered (4xx, application error): final, domain healthy
    THROTTLED = "throttled"  # 429 with Retry-After: may retry, domain healthy
    FAILURE = "failure"  # the domain failed: counted against it, may retry


@dataclass(frozen=True, slots=True, kw_only=True)
class Outcome:
    kind: OutcomeKind
    error_type: str | None = None
    status: int | None = None
    sent: bool = True  # request bytes may have reached the server
    retry_after: float | None = None
    # Derived once, when the outcome is built, and read by every request (an enum
    # member read through its class costs 170 ns on CPython 3.11: see _breaker.py).
    failed: bool = field(init=False)  # the domain failed: its breaker and the budget count it
    retryable: bool = field(init=False)  # may another attempt follow (failure or throttle)?

    def __post_init__(self) -> None:
        failed = self.kind is OutcomeKind.FAILURE
        object.__setattr__(self, "failed", failed)
        object.__setattr__(self, "retryable", failed or self.kind is OutcomeKind.THROTTLED)


SUCCESS = Outcome(kind=OutcomeKind.SUCCESS)

# Exceptions raised before any request byte left: always safe to send elsewhere.
_PRE_SEND = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)

# The ``error.type`` of each httpx exception, most specific first.
_ERROR_TYPES: tuple[tuple[type[BaseException], str], ...] = (
    (httpx.ConnectTimeout, ERROR_CONNECT_TIMEOUT),
    (httpx.ReadTimeout, ERROR_READ_TIMEOUT),
    (httpx.WriteTimeout, ERROR_WRITE_TIMEOUT),
    (httpx.PoolTimeout, ERROR_POOL_TIMEOUT),
    (httpx.RemoteProtocolError, ERROR_REMOTE_PROTOCOL),
    (httpx.ConnectError, ERROR_CONNECT),
    (httpx.ReadError, ERROR_READ),
    (httpx.WriteError, ERROR_WRITE),
    (httpx.TimeoutException, ERROR_TIMEOUT),
)

# The more precise ``error.type`` a cause in an exception's chain gives, most specific first
# (a certificate error is an SSLError; a refused or reset connection an OSError).
_CAUSES: tuple[tuple[type[BaseException], str], ...] = (
    (socket.gaierror, ERROR_DNS),
    (ssl.SSLCertVerificationError, ERROR_SERVER_CERTIFICATE_INVALID),
    (ssl.SSLError, ERROR_TLS),
    (ConnectionRefusedError, ERROR_CONNECTION_REFUSED),
    (ConnectionResetError, ERROR_CONNECTION_RESET),
)


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _cause_type(exc: BaseException) -> str | None:
    """A more precise error type from the exception's cause chain, if there is one."""
    for cause in _chain(exc):
        for kind, name in _CAUSES:
            if isinstance(cause, kind):
                return name
    # anyio and httpcore flatten some causes into the message only.
    text = str(exc).lower()
    for needle, name in _MESSAGE_HINTS:
        if needle in text:
            return name
    return None


_MESSAGE_HINTS = (
    ("name or service not known", ERROR_DNS),
    ("nodename nor servname", ERROR_DNS),
    ("temporary failure in name resolution", ERROR_DNS),
    ("no address associated", ERROR_DNS),
    ("certificate verify failed", ERROR_SERVER_CERTIFICATE_INVALID),
    ("[ssl", ERROR_TLS),
    ("connection refused", ERROR_CONNECTION_REFUSED),
    ("all connection attempts failed", ERROR_CONNECTION_REFUSED),
    ("connection reset", ERROR_CONNECTION_RESET),
)


def error_type_of(exc: BaseException) -> str:
    """The low-cardinality ``error.type`` of an exception."""
    if isinstance(exc, (httpx.ConnectError, httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError)):
        precise = _cause_type(exc)
        if precise is not None:
            return precise
    for kind, name in _ERROR_TYPES:
        if isinstance(exc, kind):
            return name
    cls = type(exc)
    return f"{cls.__module__}.{cls.__qualname__}"


def classify_exception(exc: httpx.TransportError, *, body_started: bool = False) -> Outcome:
    """Every transport error is a failure of the domain; ``sent`` says whether a
    re-send could duplicate the request."""
    sent = body_started or not isinstance(exc, _PRE_SEND)
    return Outcome(kind=OutcomeKind.FAILURE, error_type=error_type_of(exc), sent=sent)


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """Seconds from a ``Retry-After`` header (delta-seconds or HTTP date), or None."""
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    wall = time.time() if now is None else now
    return max(0.0, when.timestamp() - wall)


def classify_response(response: httpx.Response, policy: Policy) -> Outcome:
    """A response is a success, an answer, a throttle or a failure of the domain."""
    status = response.status_code
    if status in policy.retry_statuses:
        retry_after = parse_retry_after(response.headers.get("Retry-After")) if status == 503 else None
        return Outcome(kind=OutcomeKind.FAILURE, error_type=str(status), status=status, retry_after=retry_after)
    if status == 429:
        retry_after = parse_retry_after(response.headers.get("Retry-After"))
        if retry_after is None:
            return Outcome(kind=OutcomeKind.ANSWER, error_type="429", status=status)
        return Outcome(kind=OutcomeKind.THROTTLED, error_type="429", status=status, retry_after=retry_after)
    if status >= 400:
        return Outcome(kind=OutcomeKind.ANSWER, error_type=str(status), status=status)
    if policy.is_app_error is not None and policy.is_app_error(response):
        return Outcome(kind=OutcomeKind.ANSWER, error_type=ERROR_APP, status=status)
    outcome = _SUCCESSES.get(status)
    if outcome is None:
        outcome = _SUCCESSES[status] = Outcome(kind=OutcomeKind.SUCCESS, status=status)
    return outcome


# Outcomes are immutable values: one per success status serves every request.
_SUCCESSES: dict[int, Outcome] = {}
