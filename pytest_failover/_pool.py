"""Pools: ordered lists of interchangeable domains for one business area.

A *domain* is a base URL (scheme, host and optional port). A request belongs to
a pool when its scheme, host and port equal those of any of the pool's domains
(the router in ``_core.py`` keeps that table); it is then rewritten onto the
chosen domain with its path and query kept.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from ._steering import TimeOrder, windows_overlap

if TYPE_CHECKING:
    from ._lib import URL

__all__ = ["Domain", "Pool"]

_DEFAULT_PORTS = {"http": 80, "https": 443}
_REWRITES_KEPT = 256  # URLs each domain remembers moving; its table starts afresh when full


@dataclass(frozen=True, slots=True)
class Domain:
    """One entry of a pool: a normalised base URL such as ``https://api.example.com``
    (``.url``: the base URL without a trailing slash)."""

    scheme: str
    host: str
    port: int | None = None
    _hash: int = field(init=False, repr=False, compare=False)
    url: str = field(init=False, repr=False, compare=False)
    _rewrites: dict[tuple[type[Any], str], Any] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Domains key every breaker and routing table and name every attempt:
        # hash and format once, not per request.
        object.__setattr__(self, "_hash", hash((self.scheme, self.host, self.port)))
        object.__setattr__(self, "url", f"{self.scheme}://{self.netloc}")
        object.__setattr__(self, "_rewrites", {})

    def __hash__(self) -> int:
        return self._hash

    @classmethod
    def parse(cls, url: str) -> Domain:
        """Parse a base URL; reject paths, queries, credentials and unknown schemes."""
        if not isinstance(url, str) or not url:
            raise ValueError(f"domain {url!r}: expected a base URL such as 'https://api.example.com'")
        # The standard library's parser: a domain is parsed alike whichever HTTP library
        # the front-end speaks (and parsing one imports none).
        try:
            parsed = urlsplit(url.strip())
            host = parsed.hostname
        except ValueError as exc:
            raise ValueError(f"domain {url!r}: not a URL ({exc})") from None
        try:
            port = parsed.port
        except ValueError:
            raw = parsed.netloc.rpartition(":")[2]
            if raw.isdigit():
                raise ValueError(f"domain {url!r}: port {int(raw)} out of range (0 to 65535)") from None
            raise ValueError(f"domain {url!r}: not a URL (invalid port {raw!r})") from None
        scheme = parsed.scheme.lower()
        if scheme not in _DEFAULT_PORTS:
            raise ValueError(f"domain {url!r}: scheme must be http or https")
        if "@" in parsed.netloc:
            raise ValueError(f"domain {url!r}: credentials do not belong in a domain")
        if not host:
            raise ValueError(f"domain {url!r}: has no host")
        if parsed.path not in ("", "/") or parsed.query or parsed.fragment:
            raise ValueError(f"domain {url!r}: only scheme, host and port are allowed")
        if any(c.isspace() or c in _NOT_IN_HOSTS for c in host):
            raise ValueError(f"domain {url!r}: not a URL (invalid host {host!r})")
        if port == _DEFAULT_PORTS[scheme]:
            port = None
        return cls(scheme, _unicode_host(host.lower().rstrip(".")), port)

    @property
    def netloc(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port is None else f"{host}:{self.port}"

    @property
    def effective_port(self) -> int:
        return self.port if self.port is not None else _DEFAULT_PORTS[self.scheme]

    def rewrite(self, url: URL) -> Any:
        """``url`` moved onto this domain, path and query kept, never producing ``//``:
        a URL of the same library (httpx's or httpx2's, moved with its own methods).

        Remembered (the URLs are immutable): httpx parses the moved URL anew, 40 µs,
        where the lookup is 1.5 µs, and once a pool has failed over, every request
        its clients send is moved, mostly to the same few URLs again and again. Kept
        per URL class: a ``sharing`` group may mix httpx and httpx2 front-ends."""
        key = (type(url), str(url))
        moved = self._rewrites.get(key)
        if moved is None:
            moved = self._moved(url)
            if len(self._rewrites) >= _REWRITES_KEPT:
                self._rewrites.clear()
            self._rewrites[key] = moved
        return moved

    def _moved(self, url: URL) -> Any:
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


_NOT_IN_HOSTS = frozenset('"<>\\^`{|}%')


def _unicode_host(host: str) -> str:
    """``host`` with IDNA labels (``xn--``) decoded, as httpx's and httpx2's ``URL.host``
    give it: the form requests are routed on."""
    if "xn--" not in host:
        return host
    import idna  # a dependency of httpx and httpx2 alike

    try:
        return str(idna.decode(host))
    except idna.IDNAError as exc:
        raise ValueError(f"domain host {host!r}: not a valid internationalised name ({exc})") from None


@dataclass(frozen=True, slots=True, init=False)
class Pool:
    """An ordered list of interchangeable domains.

    ``Pool("api", ["https://api.example.com", "https://api2.example.com"])`` sends
    every request to the first healthy domain (failover, not round-robin).
    ``region_order`` maps a name to its own order, for example
    ``{"cn": ["https://api-cn.example.com", "https://api.example.com"]}``; an order
    may list a subset, the other domains follow in pool order. The transport's
    ``region=`` picks one for every request; a request's
    ``extensions={"failover": {"order": "cn"}}`` picks one for that request.

    Traffic steering (see ``docs/client.md``): ``weights`` sends a share (in %) of
    first attempts to a domain (gray release); ``affinity_domains`` are the domains a
    request's ``"affinity"`` key is hashed onto (rendezvous hashing); ``time_orders``
    replace the pool order during daily windows.
    """

    name: str
    domains: tuple[Domain, ...]
    region_order: Mapping[str, tuple[Domain, ...]] = field(default_factory=dict)
    weights: tuple[tuple[Domain, float], ...] = ()
    affinity_domains: tuple[Domain, ...] = ()
    time_orders: tuple[tuple[TimeOrder, tuple[Domain, ...]], ...] = ()

    def __init__(
        self,
        name: str,
        domains: Sequence[str],
        *,
        region_order: Mapping[str, Sequence[str]] | None = None,
        weights: Mapping[str, float] | None = None,
        affinity_domains: Sequence[str] | None = None,
        time_orders: Sequence[TimeOrder] | None = None,
    ) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError("pool name must be a non-empty string")
        if isinstance(domains, str) or not domains:
            raise ValueError(f"pool {name!r}: domains must be a non-empty list of base URLs")
        parsed = tuple(Domain.parse(d) for d in domains)
        if len(set(parsed)) != len(parsed):
            raise ValueError(f"pool {name!r}: a domain is listed twice")
        regions = {
            region: _full_order(name, f"region {region!r}", order, parsed)
            for region, order in (region_order or {}).items()
        }
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "domains", parsed)
        object.__setattr__(self, "region_order", regions)
        object.__setattr__(self, "weights", _weights(name, weights, parsed))
        object.__setattr__(self, "affinity_domains", _affinity(name, affinity_domains, parsed))
        object.__setattr__(self, "time_orders", _time_orders(name, time_orders, parsed))

    def order(self, region: str | None = None) -> tuple[Domain, ...]:
        """The domains in preference order for ``region`` (pool order if unknown or None)."""
        if region is None:
            return self.domains
        return self.region_order.get(region, self.domains)

    def __repr__(self) -> str:
        return f"Pool({self.name!r}, {[d.url for d in self.domains]!r})"


def _listed(pool: str, what: str, urls: object, domains: tuple[Domain, ...]) -> tuple[Domain, ...]:
    """``urls`` parsed: each a domain of the pool, none twice."""
    if isinstance(urls, str) or not isinstance(urls, Sequence):
        raise ValueError(f"pool {pool!r}: {what} must be a list of base URLs, got {urls!r}")
    listed = tuple(Domain.parse(d) for d in urls)
    unknown = [str(d) for d in listed if d not in domains]
    if unknown:
        raise ValueError(f"pool {pool!r}: {what} lists {', '.join(unknown)}, which is not a domain of the pool")
    if len(set(listed)) != len(listed):
        raise ValueError(f"pool {pool!r}: {what} lists a domain twice")
    return listed


def _full_order(pool: str, what: str, urls: object, domains: tuple[Domain, ...]) -> tuple[Domain, ...]:
    """The order ``urls`` names, the pool's other domains after it in pool order."""
    listed = _listed(pool, what, urls, domains)
    return listed + tuple(d for d in domains if d not in listed)


def _weights(pool: str, weights: Mapping[str, float] | None, domains: tuple[Domain, ...]) -> tuple[tuple[Domain, float], ...]:
    if weights is None:
        return ()
    if not isinstance(weights, Mapping):
        raise ValueError(f"pool {pool!r}: weights must map base URLs to percentages, got {weights!r}")
    listed = _listed(pool, "weights", list(weights), domains)
    shares: list[tuple[Domain, float]] = []
    for domain, share in zip(listed, weights.values(), strict=True):
        if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 <= share <= 100:
            raise ValueError(f"pool {pool!r}: weights[{domain.url!r}] is {share!r}; expected a percentage from 0 to 100")
        shares.append((domain, float(share)))
    total = sum(share for _, share in shares)
    if total > 100:
        raise ValueError(f"pool {pool!r}: weights add up to {total:g}%; at most 100% of requests can be steered")
    return tuple((d, share) for d, share in shares if share > 0)


def _affinity(pool: str, urls: Sequence[str] | None, domains: tuple[Domain, ...]) -> tuple[Domain, ...]:
    if urls is None:
        return ()
    listed = _listed(pool, "affinity_domains", urls, domains)
    if not listed:
        raise ValueError(f"pool {pool!r}: affinity_domains is empty; list the domains keys are hashed onto")
    return listed


def _time_orders(
    pool: str, windows: Sequence[TimeOrder] | None, domains: tuple[Domain, ...]
) -> tuple[tuple[TimeOrder, tuple[Domain, ...]], ...]:
    if windows is None:
        return ()
    if isinstance(windows, TimeOrder) or not isinstance(windows, Sequence):
        raise ValueError(f"pool {pool!r}: time_orders must be a list of TimeOrder")
    for window in windows:
        if not isinstance(window, TimeOrder):
            raise ValueError(f"pool {pool!r}: time_orders holds {window!r}, which is not a TimeOrder")
    zones = sorted({w.tz for w in windows})
    if len(zones) > 1:
        raise ValueError(
            f"pool {pool!r}: time_orders use the time zones {zones}; "
            "a pool's windows share one time zone, so that overlaps are well defined"
        )
    overlap = windows_overlap(windows)
    if overlap is not None:
        first, second = overlap
        raise ValueError(f"pool {pool!r}: time_orders overlap: {first!r} and {second!r}")
    return tuple(
        (w, _full_order(pool, f"time_orders {w.start}-{w.end}", w.order, domains)) for w in windows
    )
