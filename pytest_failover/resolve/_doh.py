"""DNS over HTTPS (RFC 8484): A and AAAA queries in DNS wire format, made and read by dnspython.

A lookup is two exchanges (AAAA and A; concurrent in ``aresolve``). Their outcomes combine
(``combine``) by these rules:

* a bad answer in either (malformed message, absurd TTL, forbidden address) fails the lookup:
  bad input is never half-used;
* otherwise the addresses of both, IPv6 first, with the smaller TTL (a TTL above 2**31 - 1
  on the wire reads as 0, as RFC 2181 says and dnspython does);
* no address in either: the first error that is not "no address" (timeout, unreachable),
  else ``NoAddresses``.
"""

from __future__ import annotations

import base64
import ssl
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

from .. import semconv
from ._aio import both
from ._base import (
    AddressFilter,
    Answer,
    BadAnswer,
    NoAddresses,
    ResolveError,
    ResolverUnavailable,
    answered,
    make_answer,
    normalize_host,
)
from ._http import Endpoint, Reply

if TYPE_CHECKING:
    import httpx

__all__ = ["DoHResolver", "import_dns", "parse_reply"]

DNS_MESSAGE = "application/dns-message"
SOURCE = semconv.RESOLVE_SOURCE_DOH
#: What one exchange gives: the addresses and TTL of one record type, or its error.
Outcome = tuple[list[str], int] | ResolveError


def import_dns() -> Any:
    """dnspython's ``dns`` package, imported on first use, with how to install it."""
    try:
        import dns.exception
        import dns.message
        import dns.rcode
        import dns.rdatatype
        import dns.rrset
    except ImportError as exc:
        raise ImportError(
            "DNS over HTTPS needs dnspython: pip install 'pytest-failover[resolve]'"
        ) from exc
    return dns


class DoHResolver:
    """Resolve through a DNS-over-HTTPS server (RFC 8484).

    ``url`` is the server's endpoint (``https://dns.example/dns-query``; a ``{?dns}``
    template suffix is dropped). ``bootstrap``: the server's IP address(es), connected to
    directly while SNI, the certificate check and ``Host`` use the URL's name, so finding
    the resolver needs no DNS. ``method``: ``GET`` (``?dns=``, base64url, cache-friendly,
    the default) or ``POST``. ``timeout``: seconds for each exchange. ``verify``: as
    httpx's (an ``ssl.SSLContext``, a CA bundle path, ``True``). ``allow``: a predicate
    every address must pass, such as ``public_or_loopback``.
    """

    def __init__(
        self,
        url: str,
        *,
        bootstrap: str | Sequence[str] | None = None,
        method: Literal["GET", "POST"] = "GET",
        timeout: float = 2.0,
        verify: ssl.SSLContext | str | bool = True,
        allow: AddressFilter | None = None,
    ) -> None:
        self._dns = import_dns()  # at construction, not at the first lookup
        if method not in ("GET", "POST"):
            raise ValueError(f"DoHResolver(method=...) is 'GET' or 'POST', got {method!r}")
        self.method = method
        self.allow = allow
        self.endpoint = Endpoint(
            url.removesuffix("{?dns}"), bootstrap=bootstrap, timeout=timeout, verify=verify, source=SOURCE, label="DoH server"
        )

    def __repr__(self) -> str:
        return f"DoHResolver({self.endpoint!r})"

    # The exchanges' errors are returned, not raised, and handed on without a local that
    # holds them: each one's traceback holds the frame that made the exchange, and a frame
    # holding the errors would keep them, and the frames above, for the cyclic collector.

    def resolve(self, host: str) -> Answer:
        name = normalize_host(host)
        return answered(combine(name, [self._exchange(name, rdtype) for rdtype in ("AAAA", "A")], self.allow))

    async def aresolve(self, host: str) -> Answer:
        name = normalize_host(host)
        return answered(combine(name, await both(self._aexchange(name, "AAAA"), self._aexchange(name, "A")), self.allow))

    def close(self) -> None:
        self.endpoint.close()

    async def aclose(self) -> None:
        await self.endpoint.aclose()

    # -- one exchange: the query is built and the reply read here, for both

    def _query(self, name: str, rdtype: str) -> tuple[Any, str, httpx.URL, dict[str, str], bytes | None]:
        dns = self._dns
        try:
            query = dns.message.make_query(name, dns.rdatatype.from_text(rdtype))
        except dns.exception.DNSException as exc:
            raise ValueError(f"{name!r} is not a domain name: {exc}") from exc
        query.id = 0  # RFC 8484, section 4.1: cache-friendly
        wire = query.to_wire()
        headers = {"Accept": DNS_MESSAGE}
        if self.method == "POST":
            return query, "POST", self.endpoint.url, {**headers, "Content-Type": DNS_MESSAGE}, wire
        encoded = base64.urlsafe_b64encode(wire).rstrip(b"=").decode("ascii")
        return query, "GET", self.endpoint.url.copy_merge_params({"dns": encoded}), headers, None

    def _exchange(self, name: str, rdtype: str) -> Outcome:
        query, method, url, headers, content = self._query(name, rdtype)
        try:
            return parse_reply(self._dns, name, query, self.endpoint.send(method, url, headers, content, host=name))
        except ResolveError as exc:
            return exc

    async def _aexchange(self, name: str, rdtype: str) -> Outcome:
        query, method, url, headers, content = self._query(name, rdtype)
        try:
            reply = await self.endpoint.asend(method, url, headers, content, host=name)
            return parse_reply(self._dns, name, query, reply)
        except ResolveError as exc:
            return exc


def parse_reply(dns: Any, name: str, query: Any, reply: Reply) -> tuple[list[str], int]:
    """The addresses and TTL of one DoH reply to ``query``; ``ResolveError`` for the rest."""
    status, media, body = reply
    if status != 200:
        raise ResolverUnavailable(
            f"DoH server answered HTTP {status} for {name!r}", host=name, source=SOURCE
        )
    if media != DNS_MESSAGE:
        raise BadAnswer(
            f"DoH server answered {name!r} with content type {media!r}, not {DNS_MESSAGE!r}",
            host=name,
            source=SOURCE,
        )
    try:
        message = dns.message.from_wire(body)
    except Exception as exc:  # any failure to read untrusted bytes is a bad answer
        raise BadAnswer(
            f"DoH server answered {name!r} with a malformed DNS message "
            f"({len(body)} bytes): {type(exc).__name__}: {exc}",
            host=name,
            source=SOURCE,
        ) from exc
    if not query.is_response(message):
        raise BadAnswer(
            f"DoH server answered {name!r} with a DNS message that does not answer the question",
            host=name,
            source=SOURCE,
        )
    rcode = message.rcode()
    if rcode == dns.rcode.NXDOMAIN:
        raise NoAddresses(f"DoH server: {name!r} does not exist (NXDOMAIN)", host=name, source=SOURCE)
    if rcode != dns.rcode.NOERROR:
        raise ResolverUnavailable(
            f"DoH server answered {name!r} with {dns.rcode.to_text(rcode)}", host=name, source=SOURCE
        )
    try:
        chain = message.resolve_chaining()
    except Exception as exc:  # a CNAME loop or chain too long: dnspython's own errors
        raise BadAnswer(
            f"DoH server answered {name!r} with a broken CNAME chain: {exc}", host=name, source=SOURCE
        ) from exc
    if chain.answer is None:
        return [], 0
    return [rdata.address for rdata in chain.answer], int(chain.minimum_ttl)


def combine(name: str, outcomes: Sequence[Outcome], allow: AddressFilter | None) -> Answer | ResolveError:
    """One answer from the AAAA and A exchanges (the rules of the module docstring), or
    the error to raise (:func:`answered` raises it)."""
    addresses: list[str] = []
    ttls: list[int] = []
    errors: list[ResolveError] = []
    for outcome in outcomes:
        if isinstance(outcome, BadAnswer):
            return outcome
        if isinstance(outcome, ResolveError):
            errors.append(outcome)
        elif outcome[0]:
            addresses.extend(outcome[0])
            ttls.append(outcome[1])
    if addresses:
        return make_answer(name, addresses, min(ttls), source=SOURCE, allow=allow)
    for error in errors:
        if not isinstance(error, NoAddresses):
            return error
    return NoAddresses(f"DoH server has no A or AAAA record for {name!r}", host=name, source=SOURCE)

