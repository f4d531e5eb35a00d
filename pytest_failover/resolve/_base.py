"""What every resolver shares: the answer, the errors, and the checks an answer passes.

Rules and theory of operation
-----------------------------
A resolver turns a host name into an :class:`Answer` or raises a :class:`ResolveError`.
Whatever the source of the addresses (a DNS message, a JSON document, ``getaddrinfo``),
they reach an ``Answer`` through :func:`make_answer`, the one place that checks them:

* every address is an IP address (``ipaddress.ip_address`` accepts it), else ``BadAnswer``;
* every address passes the resolver's ``allow`` predicate, else ``ForbiddenAddress`` (the
  whole answer is refused: a resolver that answers one forbidden address is not trusted for
  the others);
* the TTL is a number of seconds from 0 to 2**31 - 1 (RFC 2181, section 8), else ``BadAnswer``;
* no address at all is ``NoAddresses``, the one error a cache keeps as a negative answer;
* duplicates are dropped and the families interleaved (RFC 8305, section 4).
"""

from __future__ import annotations

import ipaddress
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol, Self, TypeAlias

from .. import semconv

__all__ = [
    "MAX_TTL",
    "AddressFilter",
    "AllResolversFailed",
    "Answer",
    "BadAnswer",
    "ForbiddenAddress",
    "IPAddress",
    "NoAddresses",
    "ResolveError",
    "ResolveTimeout",
    "Resolver",
    "ResolverUnavailable",
    "answered",
    "check_ttl",
    "interleave",
    "make_answer",
    "normalize_host",
    "public_or_loopback",
]

IPAddress: TypeAlias = ipaddress.IPv4Address | ipaddress.IPv6Address
#: Whether an address may be used: ``allow(address) -> bool``.
AddressFilter: TypeAlias = Callable[[IPAddress], bool]

#: The largest TTL a DNS answer may carry (RFC 2181, section 8: the top bit is never set).
MAX_TTL = 2**31 - 1


# --------------------------------------------------------------------------- errors


class ResolveError(Exception):
    """A name could not be resolved; ``host`` is the name, ``source`` who was asked."""

    def __init__(self, message: str, *, host: str, source: str | None = None) -> None:
        super().__init__(message)
        self.host = host
        self.source = source

    def again(self) -> Self:
        """A new error that says what this one says: its class, message, attributes and
        cause. What a cache raises for an error it keeps: one object raised again and again
        keeps the traceback of every raise (each adds its frames to those before), and every
        frame it holds with what their locals hold, for as long as the cache keeps it."""
        twin = type(self).__new__(type(self), *self.args)  # (no __init__: its fields are copied)
        twin.__dict__.update(self.__dict__)
        if "__notes__" in self.__dict__:
            twin.__notes__ = list(self.__notes__)
        twin.__cause__ = self.__cause__
        twin.__suppress_context__ = self.__suppress_context__
        return twin


class ResolveTimeout(ResolveError):
    """The resolver did not answer within its time."""


class ResolverUnavailable(ResolveError):
    """The resolver could not be reached, or would not answer (connection refused, TLS
    failure, an HTTP error status, DNS ``SERVFAIL`` or ``REFUSED``)."""


class NoAddresses(ResolveError):
    """The name has no address (NXDOMAIN, no A or AAAA record, an empty list).

    The one error a cache keeps as a negative answer.
    """


class BadAnswer(ResolveError):
    """The resolver answered, but not with something usable: a malformed DNS message, JSON
    of the wrong shape, an absurd TTL, a string that is not an IP address."""


class ForbiddenAddress(BadAnswer):
    """The answer holds an address the configuration forbids (``allow``); ``address`` is it."""

    def __init__(self, message: str, *, host: str, source: str | None, address: str) -> None:
        super().__init__(message, host=host, source=source)
        self.address = address


class AllResolversFailed(ResolveError):
    """Every resolver of a chain failed; ``errors`` holds each one's error, in order."""

    def __init__(self, message: str, *, host: str, errors: Sequence[ResolveError]) -> None:
        super().__init__(message, host=host, source=None)
        self.errors: tuple[ResolveError, ...] = tuple(errors)


# --------------------------------------------------------------------------- the answer


@dataclass(frozen=True, slots=True, kw_only=True)
class Answer:
    """The addresses of ``host``, in the order to try them, for ``ttl`` seconds.

    ``source`` says how they were found: one of ``semconv.RESOLVE_SOURCES`` (``system``,
    ``doh``, ``httpdns``, ``cache``, ``stale``).
    """

    host: str
    addresses: tuple[str, ...]
    ttl: float
    source: str

    def __post_init__(self) -> None:
        if not self.addresses:
            raise ValueError(f"an Answer for {self.host!r} needs at least one address")
        for address in self.addresses:
            if not isinstance(address, str) or str(ipaddress.ip_address(address)) != address:
                raise ValueError(
                    f"an Answer's addresses are IP addresses in their canonical form, got {address!r}"
                )
        if not math.isfinite(self.ttl) or self.ttl < 0:
            raise ValueError(f"an Answer's ttl is a finite number of seconds >= 0, got {self.ttl!r}")
        if self.source not in semconv.RESOLVE_SOURCES:
            raise ValueError(
                f"an Answer's source is one of {semconv.RESOLVE_SOURCES}, got {self.source!r}"
            )


class Resolver(Protocol):
    """Turns a host name into an :class:`Answer`; sync and async share the logic."""

    def resolve(self, host: str) -> Answer:
        """The addresses of ``host``; raises a ``ResolveError`` subclass."""
        ...

    async def aresolve(self, host: str) -> Answer:
        """The same, without blocking the event loop."""
        ...

    def close(self) -> None:
        """Release what the resolver holds (connections, threads)."""
        ...

    async def aclose(self) -> None:
        """The same, for what the async side holds."""
        ...


# --------------------------------------------------------------------------- checks


def normalize_host(host: str) -> str:
    """``host`` in lower case without the root dot; ``ValueError`` for what is not a name."""
    if not isinstance(host, str):
        raise TypeError(f"a host name is a str, got {host!r}")
    name = host.strip().rstrip(".").lower()
    if not name or any(c in name for c in "/:@ \t\r\n") or len(name) > 253:
        raise ValueError(f"{host!r} is not a host name (such as 'api.example.com')")
    return name


def public_or_loopback(address: IPAddress) -> bool:
    """An ``allow`` predicate: global unicast and loopback addresses pass; private,
    link-local, shared (100.64/10), unspecified, reserved and multicast ones do not."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback or (address.is_global and not address.is_multicast)


_WHO = {
    semconv.RESOLVE_SOURCE_SYSTEM: "the system resolver",
    semconv.RESOLVE_SOURCE_DOH: "the DoH server",
    semconv.RESOLVE_SOURCE_HTTPDNS: "the HTTPDNS endpoint",
}


def check_ttl(ttl: object, *, host: str, source: str) -> float:
    """``ttl`` as seconds, or ``BadAnswer`` naming it."""
    if (
        isinstance(ttl, bool)
        or not isinstance(ttl, int | float)
        or not math.isfinite(ttl)
        or not 0 <= ttl <= MAX_TTL
    ):
        raise BadAnswer(
            f"{_WHO.get(source, source)} answered {host!r} with the TTL {ttl!r}; a TTL is a number of seconds "
            f"from 0 to {MAX_TTL} (RFC 2181)",
            host=host,
            source=source,
        )
    return float(ttl)


def interleave(addresses: Iterable[str]) -> tuple[str, ...]:
    """The addresses with the families alternating, the first address's family first
    (RFC 8305, section 4: one address of the preferred family, then the other, and so on);
    each family keeps its own order."""
    ordered = list(dict.fromkeys(addresses))
    if not ordered:
        return ()
    first_v6 = ":" in ordered[0]
    same = [a for a in ordered if (":" in a) == first_v6]
    other = [a for a in ordered if (":" in a) != first_v6]
    mixed: list[str] = []
    for i in range(max(len(same), len(other))):
        mixed.extend(family[i] for family in (same, other) if i < len(family))
    return tuple(mixed)


def make_answer(
    host: str,
    addresses: Iterable[object],
    ttl: object,
    *,
    source: str,
    allow: AddressFilter | None,
) -> Answer:
    """An ``Answer`` from what a resolver read, every check of the module docstring passed."""
    seconds = check_ttl(ttl, host=host, source=source)
    checked: list[str] = []
    for raw in addresses:
        try:
            if not isinstance(raw, str):
                raise ValueError(raw)
            address = ipaddress.ip_address(raw.strip())
        except ValueError:
            raise BadAnswer(
                f"{_WHO.get(source, source)} answered {host!r} with {raw!r}, which is not an IP address",
                host=host,
                source=source,
            ) from None
        if allow is not None and not allow(address):
            raise ForbiddenAddress(
                f"{_WHO.get(source, source)} answered {host!r} with {address}, an address the resolver's "
                "'allow' refuses",
                host=host,
                source=source,
                address=str(address),
            )
        checked.append(str(address))
    if not checked:
        raise NoAddresses(f"{_WHO.get(source, source)} has no address for {host!r}", host=host, source=source)
    return Answer(host=host, addresses=interleave(checked), ttl=seconds, source=source)


def answered(found: Answer | BaseException) -> Answer:
    """``found``, an answer; or raise it, an error, with no local of this frame (which its
    traceback holds) holding it. A resolver hands a settled error here rather than raise it
    where a local holds it: the error's traceback would hold that frame, the frame the error,
    and both would wait for the cyclic collector."""
    if isinstance(found, BaseException):
        try:
            raise found
        finally:
            del found
    return found
