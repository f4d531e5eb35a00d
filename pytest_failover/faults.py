"""The outages a fake domain can suffer, as plain values.

A fault is a frozen dataclass that only *describes* an outage; the simulator
(``pytest_failover.simulator``) decides in one place what each one does to a
lookup, a connection, a TLS handshake or a request. Build faults with the
functions below (``faults.refused()``, ``faults.status(503, headers={...})``)
or by name (``faults.by_name("status", 503)``), which is what the pytest marker
uses.

Where each fault strikes::

    name resolution   dns_nxdomain, dns_timeout, dns_poisoned
    TCP connect       refused, connect_timeout, address_down
    TLS handshake     tls_expired, tls_wrong_host, tls_untrusted   (https only),
                      address_down(stage="handshake")
    HTTP request      read_timeout, slow, reset, status, latency, trickle, healthy,
                      keep_alive_close (a request on a kept-alive connection)
    any of the above  flapping (the first N fail, then recover), rate (a seeded share fails)
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ._suggest import did_you_mean

__all__ = [
    "AddressDown",
    "ConnectTimeout",
    "DnsNxdomain",
    "DnsPoisoned",
    "DnsTimeout",
    "Fault",
    "Flapping",
    "Healthy",
    "KeepAliveClose",
    "Latency",
    "Rate",
    "ReadTimeout",
    "Refused",
    "Reset",
    "Slow",
    "Status",
    "TlsExpired",
    "TlsUntrusted",
    "TlsWrongHost",
    "Trickle",
    "UnknownFaultError",
    "address_down",
    "by_name",
    "connect_timeout",
    "dns_nxdomain",
    "dns_poisoned",
    "dns_timeout",
    "flapping",
    "healthy",
    "keep_alive_close",
    "latency",
    "names",
    "rate",
    "read_timeout",
    "refused",
    "reset",
    "slow",
    "status",
    "tls_expired",
    "tls_untrusted",
    "tls_wrong_host",
    "trickle",
]


class UnknownFaultError(ValueError):
    """``by_name`` was given a name that is not a fault."""


@dataclass(frozen=True, slots=True)
class Fault:
    """Base class of every fault. ``name`` is what ``by_name`` accepts."""

    name: ClassVar[str] = "fault"

    def __str__(self) -> str:
        return self.name


def _check_seconds(what: str, value: float) -> None:
    if not value >= 0:  # also rejects NaN
        raise ValueError(f"{what} must be a number of seconds >= 0, got {value!r}")


@dataclass(frozen=True, slots=True)
class Healthy(Fault):
    """No fault: the domain answers with its handler (200 and a small JSON body by default)."""

    name: ClassVar[str] = "healthy"


@dataclass(frozen=True, slots=True)
class DnsNxdomain(Fault):
    """The name does not resolve (``socket.gaierror`` EAI_NONAME)."""

    name: ClassVar[str] = "dns_nxdomain"


@dataclass(frozen=True, slots=True)
class DnsTimeout(Fault):
    """Resolution hangs for ``seconds``, then fails like a resolver timeout (EAI_AGAIN)."""

    name: ClassVar[str] = "dns_timeout"
    seconds: float = 5.0

    def __post_init__(self) -> None:
        _check_seconds("dns_timeout(seconds=)", self.seconds)


@dataclass(frozen=True, slots=True)
class DnsPoisoned(Fault):
    """The system's lookup of the name answers a wrong ``address``: by default one of the
    simulator's where every connect is refused (a black hole would cost a connect
    timeout); another fake domain's address sends the client to that server, whose
    certificate is for another name. Resolvers that do not ask the system (DoH,
    HTTPDNS) are not fooled: the domain's own addresses still serve."""

    name: ClassVar[str] = "dns_poisoned"
    address: str | None = None

    def __post_init__(self) -> None:
        if self.address is not None:
            _check_address("dns_poisoned(address=)", self.address)


#: Where an address that is down fails a connection (``address_down(stage=)``).
ADDRESS_DOWN_STAGES = ("connect", "handshake")


@dataclass(frozen=True, slots=True)
class AddressDown(Fault):
    """One of the domain's addresses (``FakeDomain.addresses``) is down; the others serve.
    ``stage="connect"`` (the default): it refuses connections; ``stage="handshake"``: it
    accepts them and resets each at once, so a TLS handshake meets a reset (a broken TLS
    terminator at that address). The system's lookup answers the first address only: a
    resolver that knows them all (DoH, HTTPDNS) fails over between them."""

    name: ClassVar[str] = "address_down"
    address: str
    stage: str = "connect"

    def __post_init__(self) -> None:
        _check_address("address_down(address=)", self.address)
        if self.stage not in ADDRESS_DOWN_STAGES:
            raise ValueError(f"address_down(stage=) is one of {ADDRESS_DOWN_STAGES}, got {self.stage!r}")



def _check_address(what: str, value: object) -> None:
    import ipaddress

    try:
        ipaddress.ip_address(value)  # type: ignore[arg-type]  # checked here: anything may come by name
    except ValueError:
        raise ValueError(f"{what} must be an IP address, got {value!r}") from None


@dataclass(frozen=True, slots=True)
class Refused(Fault):
    """Nothing listens: the connect is refused (RST, ECONNREFUSED)."""

    name: ClassVar[str] = "refused"


@dataclass(frozen=True, slots=True)
class ConnectTimeout(Fault):
    """The TCP handshake never completes, so the client's connect timeout fires."""

    name: ClassVar[str] = "connect_timeout"


@dataclass(frozen=True, slots=True)
class ReadTimeout(Fault):
    """The request is read but never answered, so the client's read timeout fires."""

    name: ClassVar[str] = "read_timeout"


@dataclass(frozen=True, slots=True)
class Slow(Fault):
    """The answer comes after ``seconds`` (a read timeout for clients that wait less)."""

    name: ClassVar[str] = "slow"
    seconds: float

    def __post_init__(self) -> None:
        _check_seconds("slow(seconds)", self.seconds)


@dataclass(frozen=True, slots=True)
class Reset(Fault):
    """The response starts, then the connection is reset (TCP RST) mid-body."""

    name: ClassVar[str] = "reset"


@dataclass(frozen=True, slots=True)
class KeepAliveClose(Fault):
    """A request that comes on a kept-alive connection (one that answered before) gets no
    answer: the server closes the connection as it comes, as a server does whose keep-alive
    timeout ran out as the client sent (an end of file before any byte of an answer; with
    ``reset``, a TCP reset). A request on a new connection is answered. A client that
    sends an idempotent request again on another connection (RFC 9112, 9.3.1) recovers;
    one that does not raises its own error for a connection closed unanswered."""

    name: ClassVar[str] = "keep_alive_close"
    reset: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.reset, bool):
            raise TypeError(f"keep_alive_close(reset=) is True or False, got {self.reset!r}")


@dataclass(frozen=True, slots=True)
class TlsExpired(Fault):
    """The server presents a certificate for the right name, from the trusted CA, that has expired."""

    name: ClassVar[str] = "tls_expired"


@dataclass(frozen=True, slots=True)
class TlsWrongHost(Fault):
    """The server presents a valid certificate from the trusted CA for another name."""

    name: ClassVar[str] = "tls_wrong_host"


@dataclass(frozen=True, slots=True)
class TlsUntrusted(Fault):
    """The server presents a certificate for the right name from a CA nobody trusts."""

    name: ClassVar[str] = "tls_untrusted"


@dataclass(frozen=True, slots=True)
class Status(Fault):
    """The domain answers ``code`` with ``body`` and ``headers`` (e.g. 429 with Retry-After)."""

    name: ClassVar[str] = "status"
    code: int
    body: bytes = b""
    headers: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if not (isinstance(self.code, int) and 100 <= self.code <= 599):
            raise ValueError(
                f"status(code) must be an HTTP status code 100..599, got {self.code!r}"
            )


@dataclass(frozen=True, slots=True)
class Latency(Fault):
    """A healthy answer, delayed by ``seconds`` +/- a uniform ``jitter`` (never below 0)."""

    name: ClassVar[str] = "latency"
    seconds: float
    jitter: float = 0.0

    def __post_init__(self) -> None:
        _check_seconds("latency(seconds)", self.seconds)
        _check_seconds("latency(jitter=)", self.jitter)


@dataclass(frozen=True, slots=True)
class Flapping(Fault):
    """The first ``fail`` attempts suffer ``fault``; every later one gets ``then``.

    An attempt is counted where ``fault`` strikes: a lookup for DNS faults, a
    connection for connect and TLS faults, a request for HTTP faults.
    """

    name: ClassVar[str] = "flapping"
    fail: int
    then: Fault = field(default_factory=Healthy)
    fault: Fault = field(default_factory=lambda: Status(503))

    def __post_init__(self) -> None:
        if not (isinstance(self.fail, int) and self.fail >= 0):
            raise ValueError(f"flapping(fail=) must be an int >= 0, got {self.fail!r}")
        _check_fault("flapping(then=)", self.then)
        _check_fault("flapping(fault=)", self.fault)


@dataclass(frozen=True, slots=True)
class Rate(Fault):
    """Each attempt suffers ``fault`` with probability ``p``, else is healthy.

    With a ``seed`` the sequence of outcomes is the same on every run.
    """

    name: ClassVar[str] = "rate"
    p: float
    fault: Fault
    seed: int | None = None

    def __post_init__(self) -> None:
        if not 0.0 <= self.p <= 1.0:
            raise ValueError(f"rate(p) must be a probability in [0, 1], got {self.p!r}")
        _check_fault("rate(fault)", self.fault)


@dataclass(frozen=True, slots=True)
class Trickle(Fault):
    """The status line and headers go out at once, then the body one byte every ``interval`` s.

    ``body`` replaces the handler's answer (a 200) when given. Every read gets a byte
    well within a per-read timeout, so only an overall deadline bounds the request.
    """

    name: ClassVar[str] = "trickle"
    interval: float = 0.4
    body: bytes | None = None

    def __post_init__(self) -> None:
        _check_seconds("trickle(interval)", self.interval)
        if self.body is not None and not isinstance(self.body, bytes):
            raise TypeError(f"trickle(body=) must be bytes, str or None, got {self.body!r}")


def _check_fault(what: str, value: object) -> None:
    if not isinstance(value, Fault):
        raise TypeError(f"{what} must be a fault such as faults.refused(), got {value!r}")


# -- constructors (the public spelling) ---------------------------------------------------------


def healthy() -> Healthy:
    """No fault."""
    return Healthy()


def dns_nxdomain() -> DnsNxdomain:
    """The name does not resolve."""
    return DnsNxdomain()


def dns_timeout(seconds: float = 5.0) -> DnsTimeout:
    """Resolution hangs ``seconds`` (5 s like a stock resolver), then fails with EAI_AGAIN."""
    return DnsTimeout(seconds)


def dns_poisoned(address: str | None = None) -> DnsPoisoned:
    """The system's lookup answers ``address`` (default: one that refuses), not the domain's."""
    return DnsPoisoned(address)


def address_down(address: str, *, stage: str = "connect") -> AddressDown:
    """Connects to ``address``, one of the domain's addresses, are refused (``stage="connect"``)
    or reset during the TLS handshake (``stage="handshake"``); the others serve."""
    return AddressDown(address, stage)


def refused() -> Refused:
    """Connections are refused."""
    return Refused()


def connect_timeout() -> ConnectTimeout:
    """Connections never complete."""
    return ConnectTimeout()


def read_timeout() -> ReadTimeout:
    """Requests are never answered."""
    return ReadTimeout()


def slow(seconds: float) -> Slow:
    """Answers come after ``seconds``."""
    return Slow(seconds)


def reset() -> Reset:
    """Responses are cut by a TCP reset."""
    return Reset()


def keep_alive_close(*, reset: bool = False) -> KeepAliveClose:
    """Requests on kept-alive connections are met with the connection's close (``reset``:
    a TCP reset), unanswered; those on new connections are answered."""
    return KeepAliveClose(reset)


def tls_expired() -> TlsExpired:
    """An expired certificate."""
    return TlsExpired()


def tls_wrong_host() -> TlsWrongHost:
    """A certificate for another host name."""
    return TlsWrongHost()


def tls_untrusted() -> TlsUntrusted:
    """A certificate from an unknown CA."""
    return TlsUntrusted()


def status(
    code: int,
    body: bytes | str = b"",
    headers: Mapping[str, str] | None = None,
) -> Status:
    """Answer ``code`` with ``body`` and ``headers``, e.g. ``status(429, headers={"Retry-After": "1"})``."""
    raw = body.encode() if isinstance(body, str) else bytes(body)
    return Status(code, raw, tuple((str(k), str(v)) for k, v in (headers or {}).items()))


def flapping(fail: int, then: Fault | None = None, fault: Fault | None = None) -> Flapping:
    """The first ``fail`` attempts get ``fault`` (503 by default), the rest ``then`` (healthy)."""
    return Flapping(
        fail, then if then is not None else Healthy(), fault if fault is not None else Status(503)
    )


def rate(p: float, fault: Fault, seed: int | None = None) -> Rate:
    """A share ``p`` of attempts gets ``fault``; pass ``seed`` for a reproducible sequence."""
    return Rate(p, fault, seed)


def latency(seconds: float, jitter: float = 0.0) -> Latency:
    """Healthy answers delayed by ``seconds`` +/- ``jitter``."""
    return Latency(seconds, jitter)


def trickle(interval: float = 0.4, body: bytes | str | None = None) -> Trickle:
    """Headers at once, then the body (the handler's, or ``body`` as a 200) a byte per ``interval``."""
    raw = body.encode() if isinstance(body, str) else body
    return Trickle(interval, raw)


_BY_NAME: dict[str, Callable[..., Fault]] = {
    f.__name__: f
    for f in (
        healthy,
        dns_nxdomain,
        dns_timeout,
        dns_poisoned,
        refused,
        address_down,
        connect_timeout,
        read_timeout,
        slow,
        reset,
        keep_alive_close,
        tls_expired,
        tls_wrong_host,
        tls_untrusted,
        status,
        flapping,
        rate,
        latency,
        trickle,
    )
}


def names() -> tuple[str, ...]:
    """Every name ``by_name`` accepts."""
    return tuple(_BY_NAME)


def by_name(name: str, *args: Any, **kwargs: Any) -> Fault:
    """Build a fault from its name: ``by_name("status", 503, headers={"Retry-After": "2"})``.

    Raises ``UnknownFaultError`` for an unknown name (with a suggestion) and
    ``TypeError`` naming the fault's signature for wrong arguments.
    """
    try:
        make = _BY_NAME[name]
    except (KeyError, TypeError):
        close = did_you_mean(name, _BY_NAME)
        hint = f" Did you mean {close!r}?" if close else ""
        raise UnknownFaultError(
            f"unknown fault {name!r}.{hint} Known faults: {', '.join(_BY_NAME)}."
        ) from None
    signature = inspect.signature(make)
    try:
        signature.bind(*args, **kwargs)
    except TypeError as exc:
        plain = signature.replace(
            parameters=[p.replace(annotation=p.empty) for p in signature.parameters.values()],
            return_annotation=signature.empty,
        )
        raise TypeError(f"faults.{name}{plain}: {exc}") from None
    return make(*args, **kwargs)
