"""Resolvers: where a domain's addresses come from (system DNS, DNS over HTTPS, HTTPDNS).

    from pytest_failover.resolve import CachingResolver, ChainResolver, DoHResolver, SystemResolver

    resolver = ChainResolver([
        CachingResolver(DoHResolver("https://dns.example/dns-query", bootstrap="192.0.2.53")),
        SystemResolver(),
    ])
    answer = resolver.resolve("api.example.com")   # or: await resolver.aresolve(...)
    answer.addresses, answer.ttl, answer.source

Every resolver has ``resolve`` and ``aresolve`` (asyncio or trio), ``close`` and ``aclose``.
``DoHResolver`` needs dnspython: ``pip install 'pytest-failover[resolve]'`` (imported when
one is made, never by ``import pytest_failover``). See docs/resolve.md.

The errors::

    Exception
     └── ResolveError                  (.host, .source)
          ├── ResolveTimeout           the resolver did not answer within its time
          ├── ResolverUnavailable      it could not be reached or would not answer
          ├── NoAddresses              the name has no address (a cache keeps it as negative)
          ├── BadAnswer                malformed message, wrong JSON shape, absurd TTL, not an IP
          │    └── ForbiddenAddress    an address ``allow`` refuses (.address)
          └── AllResolversFailed       every resolver of a chain failed (.errors)
"""

from ._base import (
    AddressFilter,
    AllResolversFailed,
    Answer,
    BadAnswer,
    ForbiddenAddress,
    NoAddresses,
    ResolveError,
    Resolver,
    ResolverUnavailable,
    ResolveTimeout,
    interleave,
    public_or_loopback,
)
from ._cache import CachingResolver
from ._chain import ChainResolver
from ._doh import DoHResolver
from ._httpdns import HTTPDNSResolver, Parse, parse_dns_json, parse_json, parse_text
from ._system import SystemResolver

__all__ = [
    "AddressFilter",
    "AllResolversFailed",
    "Answer",
    "BadAnswer",
    "CachingResolver",
    "ChainResolver",
    "DoHResolver",
    "ForbiddenAddress",
    "HTTPDNSResolver",
    "NoAddresses",
    "Parse",
    "ResolveError",
    "ResolveTimeout",
    "Resolver",
    "ResolverUnavailable",
    "SystemResolver",
    "interleave",
    "parse_dns_json",
    "parse_json",
    "parse_text",
    "public_or_loopback",
]
