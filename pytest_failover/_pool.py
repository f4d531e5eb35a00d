"""Pools: ordered lists of interchangeable domains for one business area.

A *domain* is a base URL (scheme, host and optional port). A request belongs to
a pool when its scheme, host and port equal those of any of the pool's domains
(the router in ``_core.py`` keeps that table); it is then rewritten onto the
chosen domain with its path and query kept.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import httpx

__all__ = ["Domain", "Pool"]

_DEFAULT_PORTS = {"http": 80, "https": 443}


@dataclass(frozen=True, slots=True)
class Domain:
    """One entry of a pool: a normalised base URL such as ``https://api.example.com``
    (``.url``: the base URL without a trailing slash)."""

    scheme: str
    host: str
    port: int | None = None
    _hash: int = field(init=False, repr=False, compare=False)
    url: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Domains key every breaker and routing table and name every attempt:
        # hash and format once, not per request.
        object.__setattr__(self, "_hash", hash((self.scheme, self.host, self.port)))
        object.__setattr__(self, "url", f"{self.scheme}://{self.netloc}")

    def __hash__(self) -> int:
        return self._hash

    @classmethod
    def parse(cls, url: str) -> Domain:
        """Parse a base URL; reject paths, queries, credentials and unknown schemes."""
        if not isinstance(url, str) or not url:
            raise ValueError(f"domain {url!r}: expected a base URL such as 'https://api.example.com'")
        try:
            parsed = httpx.URL(url)
        except httpx.InvalidURL as exc:
            raise ValueError(f"domain {url!r}: not a URL ({exc})") from None
        if parsed.scheme not in _DEFAULT_PORTS:
            raise ValueError(f"domain {url!r}: scheme must be http or https")
        if not parsed.host:
            raise ValueError(f"domain {url!r}: has no host")
        if parsed.userinfo:
            raise ValueError(f"domain {url!r}: credentials do not belong in a domain")
        if parsed.path not in ("", "/") or parsed.query or parsed.fragment:
            raise ValueError(f"domain {url!r}: only scheme, host and port are allowed")
        port = parsed.port
        if port == _DEFAULT_PORTS[parsed.scheme]:
            port = None
        return cls(parsed.scheme, parsed.host.lower().rstrip("."), port)

    @property
    def netloc(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port is None else f"{host}:{self.port}"

    @property
    def effective_port(self) -> int:
        return self.port if self.port is not None else _DEFAULT_PORTS[self.scheme]

    def rewrite(self, url: httpx.URL) -> httpx.URL:
        """``url`` moved onto this domain, path and query kept, never producing ``//``."""
        raw_path = url.raw_path.decode("ascii") if url.raw_path else "/"
        path, _, query = raw_path.partition("?")
        while path.startswith("//"):
            path = path[1:]
        if not path.startswith("/"):
            path = "/" + path
        return url.copy_with(
            scheme=self.scheme,
            host=self.host,
            port=self.port,
            raw_path=(path + ("?" + query if query else "")).encode("ascii"),
        )

    def __str__(self) -> str:
        return self.url


@dataclass(frozen=True, slots=True, init=False)
class Pool:
    """An ordered list of interchangeable domains.

    ``Pool("api", ["https://api.example.com", "https://api2.example.com"])`` sends
    every request to the first healthy domain (failover, not round-robin).
    ``region_order`` maps a region name to that region's own order, for example
    ``{"cn": ["https://api-cn.example.com", "https://api.example.com"]}``; a
    region order may list a subset, the other domains follow in pool order.
    """

    name: str
    domains: tuple[Domain, ...]
    region_order: Mapping[str, tuple[Domain, ...]] = field(default_factory=dict)

    def __init__(
        self,
        name: str,
        domains: Sequence[str],
        *,
        region_order: Mapping[str, Sequence[str]] | None = None,
    ) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError("pool name must be a non-empty string")
        if isinstance(domains, str) or not domains:
            raise ValueError(f"pool {name!r}: domains must be a non-empty list of base URLs")
        parsed = tuple(Domain.parse(d) for d in domains)
        if len(set(parsed)) != len(parsed):
            raise ValueError(f"pool {name!r}: a domain is listed twice")
        regions: dict[str, tuple[Domain, ...]] = {}
        for region, order in (region_order or {}).items():
            listed = tuple(Domain.parse(d) for d in order)
            unknown = [str(d) for d in listed if d not in parsed]
            if unknown:
                raise ValueError(
                    f"pool {name!r}: region {region!r} lists {', '.join(unknown)}, "
                    "which is not a domain of the pool"
                )
            if len(set(listed)) != len(listed):
                raise ValueError(f"pool {name!r}: region {region!r} lists a domain twice")
            regions[region] = listed + tuple(d for d in parsed if d not in listed)
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "domains", parsed)
        object.__setattr__(self, "region_order", regions)

    def order(self, region: str | None = None) -> tuple[Domain, ...]:
        """The domains in preference order for ``region`` (pool order if unknown or None)."""
        if region is None:
            return self.domains
        return self.region_order.get(region, self.domains)

    def __repr__(self) -> str:
        return f"Pool({self.name!r}, {[d.url for d in self.domains]!r})"
