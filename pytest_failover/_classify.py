"""What an attempt's result means: one place maps exceptions and responses to outcomes.

An outcome says whether the domain failed (breaker and budget count it), whether
request bytes may have left (a re-send could duplicate a side effect), the
low-cardinality ``error.type`` reported in telemetry, and any ``Retry-After``.

Exceptions are told apart by the names of the HTTP library's classes along their MRO
(``ConnectTimeout``, ``ReadError``, ...): httpx and httpx2 name them alike, so one table
serves both, and neither library is imported here. What a class means is worked out
once per class and kept.
"""

from __future__ import annotations

import enum
import errno
import socket
import ssl
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING

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

if TYPE_CHECKING:
    from ._lib import Response

__all__ = ["Outcome", "OutcomeKind", "classify_exception", "classify_response", "classify_status", "dropped", "error_type_of"]


class OutcomeKind(str, enum.Enum):
    SUCCESS = "success"  # the domain answered with a success
    ANSWER = "answer"  # the domain answered (4xx, application error): final, domain healthy
    THROTTLED = "throttled"  # 429 with Retry-After: may retry, domain healthy
    FAILURE = "failure"  # the domain failed: counted against it, may retry
    # The connection closed before any byte of the answer (a keep-alive connection the
    # server closed as the request went out): no verdict on the domain; the plan sends
    # the request again there once, if it may (``RequestPlan.dropped``), else it is a FAILURE.
    DROPPED = "dropped"


# The kinds but a failure after which another attempt may follow.
_RETRYABLE = frozenset({OutcomeKind.THROTTLED, OutcomeKind.DROPPED})


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
    retryable: bool = field(init=False)  # may another attempt follow (failure, throttle, drop)?

    def __post_init__(self) -> None:
        failed = self.kind is OutcomeKind.FAILURE
        object.__setattr__(self, "failed", failed)
        object.__setattr__(self, "retryable", failed or self.kind in _RETRYABLE)


SUCCESS = Outcome(kind=OutcomeKind.SUCCESS)

# Exceptions raised before any request byte left: always safe to send elsewhere.
PRE_SEND = frozenset({"ConnectError", "ConnectTimeout", "PoolTimeout"})

# The timeouts: an attempt that ran out of time, whatever its cut left in the chain (the
# watchdog's shutdown reads as a connection closed unanswered), is never a drop.
_TIMEOUTS = frozenset({"ConnectTimeout", "ReadTimeout", "WriteTimeout", "PoolTimeout", "TimeoutException"})

# The ``error.type`` of each exception class of httpx and httpx2, by its name; the first
# name met along an exception's MRO (the most specific class) gives it.
ERROR_TYPES: dict[str, str] = {
    "ConnectTimeout": ERROR_CONNECT_TIMEOUT,
    "ReadTimeout": ERROR_READ_TIMEOUT,
    "WriteTimeout": ERROR_WRITE_TIMEOUT,
    "PoolTimeout": ERROR_POOL_TIMEOUT,
    "RemoteProtocolError": ERROR_REMOTE_PROTOCOL,
    "ConnectError": ERROR_CONNECT,
    "ReadError": ERROR_READ,
    "WriteError": ERROR_WRITE,
    "TimeoutException": ERROR_TIMEOUT,
}

# The classes whose cause chain may name a more precise ``error.type``.
_CAUSED = frozenset({"ConnectError", "ReadError", "WriteError", "RemoteProtocolError"})

# The packages whose classes the names above are read from.
LIBRARIES = frozenset({"httpx", "httpx2"})


@dataclass(frozen=True, slots=True)
class _Kind:
    """What an exception class means: its ``error.type`` (None: its qualified name), whether
    its causes may say more, whether it is raised before any request byte left."""

    error_type: str | None
    caused: bool
    pre_send: bool
    timeout: bool = False


_KINDS: dict[type[BaseException], _Kind] = {}


def _kind(cls: type[BaseException]) -> _Kind:
    """The meaning of ``cls``, worked out once: the nearest class of httpx or httpx2 along
    its MRO whose name the table knows."""
    kind = _KINDS.get(cls)
    if kind is None:
        name = next(
            (
                c.__name__
                for c in cls.__mro__
                if c.__name__ in ERROR_TYPES and c.__module__.partition(".")[0] in LIBRARIES
            ),
            None,
        )
        if name is None:
            kind = _Kind(None, caused=False, pre_send=False)
        else:
            kind = _Kind(ERROR_TYPES[name], caused=name in _CAUSED, pre_send=name in PRE_SEND, timeout=name in _TIMEOUTS)
        kind = _KINDS.setdefault(cls, kind)
    return kind


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
    """The low-cardinality ``error.type`` of an exception (of httpx, httpx2, or any)."""
    cls = type(exc)
    kind = _kind(cls)
    if kind.caused:
        precise = _cause_type(exc)
        if precise is not None:
            return precise
    if kind.error_type is not None:
        return kind.error_type
    return f"{cls.__module__}.{cls.__qualname__}"


def classify_exception(exc: BaseException, *, body_started: bool = False, head_came: bool = False) -> Outcome:
    """Every transport error is a failure of the domain, but a connection closed or reset
    before the answer's head came (:func:`dropped`; ``head_came``: it had come, and the
    body's read failed), which is left to the request's plan, unless the attempt ran out
    of its time (a timeout: the cut closed it); ``sent`` says whether a re-send could
    duplicate the request (``body_started``: its upload had begun)."""
    kind = _kind(type(exc))
    sent = body_started or not kind.pre_send
    drop = not (body_started or head_came or kind.timeout) and dropped(exc, connected=not kind.pre_send)
    return Outcome(kind=OutcomeKind.DROPPED if drop else OutcomeKind.FAILURE, error_type=error_type_of(exc), sent=sent)


# What the HTTP libraries raise when a connection closed before any byte of the answer
# came (RFC 9112, 9.3.1): http.client's class (requests, through urllib3), aiohttp's class
# (raised before a response exists: a body cut short is its ``ClientPayloadError``), and
# httpcore's (httpx's) ``RemoteProtocolError``, which says so only in its message. By
# package and class name, as the table above, so that none is imported here. And a reset
# (``ECONNRESET``) once connected: the server's close met the request's bytes, and its
# kernel answered them with a reset (the same race: aiohttp's own session sends an
# idempotent request again after either, once).
_DROPPED_CLASSES = frozenset({("http", "RemoteDisconnected"), ("aiohttp", "ServerDisconnectedError")})
_DROPPED_MESSAGE = "disconnected without sending a response"
_PROTOCOL_ERROR_PACKAGES = frozenset({"httpcore", "httpcore2", *LIBRARIES})


def dropped(exc: BaseException, *, connected: bool = True) -> bool:
    """Did the attempt that raised ``exc`` end as its connection closed, or was reset once
    ``connected``, before the answer came (the server's keep-alive timeout: the request
    went out on a connection it was closing)? Read along the exception's chain: the
    front-ends raise their library's error from the native one. A reset while connecting
    (a TLS handshake cut) is the domain's failure."""
    for cause in _chain(exc):
        if connected and isinstance(cause, OSError) and cause.errno == errno.ECONNRESET:
            return True  # ConnectionResetError, or aiohttp's ClientOSError of one
        cls = type(cause)
        package = cls.__module__.partition(".")[0]
        if (package, cls.__name__) in _DROPPED_CLASSES:
            return True
        if (
            cls.__name__ == "RemoteProtocolError"
            and package in _PROTOCOL_ERROR_PACKAGES
            and _DROPPED_MESSAGE in str(cause).lower()
        ):
            return True
    return False


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


def classify_response(response: Response, policy: Policy) -> Outcome:
    """A response is a success, an answer, a throttle or a failure of the domain."""
    status = response.status_code
    outcome = classify_status(status, policy)
    if outcome is not None:
        return outcome
    if status == 429:
        retry_after = parse_retry_after(response.headers.get("Retry-After"))
        if retry_after is None:
            return Outcome(kind=OutcomeKind.ANSWER, error_type="429", status=status)
        return Outcome(kind=OutcomeKind.THROTTLED, error_type="429", status=status, retry_after=retry_after)
    if status == 503:  # a retry status (classify_status said so): its Retry-After lengthens the wait
        retry_after = parse_retry_after(response.headers.get("Retry-After"))
        return Outcome(kind=OutcomeKind.FAILURE, error_type=str(status), status=status, retry_after=retry_after)
    assert policy.is_app_error is not None  # the one other case classify_status leaves
    if policy.is_app_error(response):
        return Outcome(kind=OutcomeKind.ANSWER, error_type=ERROR_APP, status=status)
    return _success(status)


def outcome_table(policy: Policy) -> Mapping[int, Outcome]:
    """:func:`classify_status` of every status from 100 to 599 that the status alone
    decides: a pool classifies most responses by one look-up in it (``PoolCore.outcomes``).
    What it holds depends only on the retry statuses and whether an app-error check is
    set, so pools alike share one table (read only): one per pool was 55 KB, 27 MiB of an
    agent's 500 pools (tracemalloc)."""
    key = _table_key(policy)
    table = _TABLES.get(key)
    if table is None:
        table = {}
        for status in range(100, 600):
            outcome = classify_status(status, policy)
            if outcome is not None:
                table[status] = outcome
        if len(_TABLES) < _MAX_TABLES:  # policies alike are the rule; a bound all the same
            _TABLES[key] = table
    return table


def success_table(policy: Policy) -> Mapping[int, Outcome]:
    """The successes of :func:`outcome_table`'s (shared alike): the lane looks a status up
    here (``Lane.ends``, ``PoolCore.successes``), with no check of the outcome's kind."""
    key = _table_key(policy)
    table = _SUCCESS_TABLES.get(key)
    if table is None:
        table = {s: o for s, o in outcome_table(policy).items() if o.kind is OutcomeKind.SUCCESS}
        if len(_SUCCESS_TABLES) < _MAX_TABLES:
            _SUCCESS_TABLES[key] = table
    return table


def _table_key(policy: Policy) -> tuple[frozenset[int], bool]:
    """What a policy's outcome table depends on: its retry statuses, and whether it has no app-error check."""
    return frozenset(policy.retry_statuses), policy.is_app_error is None


# The shared tables of :func:`outcome_table` and :func:`success_table`, by :func:`_table_key`.
_TABLES: dict[tuple[frozenset[int], bool], dict[int, Outcome]] = {}
_SUCCESS_TABLES: dict[tuple[frozenset[int], bool], dict[int, Outcome]] = {}
_MAX_TABLES = 64


def classify_status(status: int, policy: Policy) -> Outcome | None:
    """The outcome of a response with ``status`` when the status alone decides it, or None
    when its headers or body have a say: a ``Retry-After`` (429, and 503 among the retry
    statuses), the app-error check (``Policy.is_app_error``, for a status under 400). Pools
    keep it for every status (:func:`outcome_table`)."""
    if status in policy.retry_statuses:
        return None if status == 503 else Outcome(kind=OutcomeKind.FAILURE, error_type=str(status), status=status)
    if status == 429:
        return None
    if status >= 400:
        return Outcome(kind=OutcomeKind.ANSWER, error_type=str(status), status=status)
    return None if policy.is_app_error is not None else _success(status)


def _success(status: int) -> Outcome:
    outcome = _SUCCESSES.get(status)
    if outcome is None:
        outcome = _SUCCESSES[status] = Outcome(kind=OutcomeKind.SUCCESS, status=status)
    return outcome


# Outcomes are immutable values: one per success status serves every request.
_SUCCESSES: dict[int, Outcome] = {}
