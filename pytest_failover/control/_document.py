"""The control document's rules: what it says, and when it may be applied.

Rules and theory of operation
-----------------------------
A document is the complete desired state of the pools it names: in each named pool,
the listed domains are disabled and every other domain is enabled. Pools it does not
name are left as they are. Its payload (the JWT claims set; ``_jws`` signs it) is a
JSON object with exactly these members::

    {"exp": 1795963600, "iat": 1795960000, "version": 7,
     "pools": {"api": {"disabled": ["https://api.example.com"]}}}

A document decided by a quorum of monitoring locations (the agent's ``failover-agent
control quorum``) has one more member, ``quorum``: the rule it was decided by and, per
pool, the locations that agreed each listed domain is down (see ``Quorum``)::

    "quorum": {"for_seconds": 60, "min_locations": 2,
               "agreed": {"api": {"https://api.example.com": ["eu-west", "us-east"]}}}

Readers that predate ``quorum`` refuse such a document (``extra_field``): a reader never
applies a document with a member it does not know. Readers that know it accept documents
with and without it; it changes nothing a client applies.

Every number is an integer in a stated range (a boolean or a fraction never passes for
one), so no value can overflow, lose precision or cost time to convert:

=========== ======================== ============================================
member      range                    meaning
=========== ======================== ============================================
``version`` 0 to 2**63 - 1           must grow with every document published
``iat``     0 to ``MAX_TIME``        issued at, unix seconds (RFC 7519 NumericDate)
``exp``     ``iat`` + 1 to MAX_TIME  refused from this second on
=========== ======================== ============================================

Checked here, in this order, each failure a ``ControlError`` whose ``reason`` names the
rule, and nothing changed:

1. the payload's shape (``ControlDocument.from_claims``): ``wrong_type``,
   ``missing_field``, ``extra_field``, ``out_of_range``;
2. the validity window against the reader's clock (``check_time``): ``future``
   (``iat`` more than ``max_skew`` ahead), ``expired`` (``exp`` now or past);
3. the fit with the local pools and the version in force (``check``, which the
   transport calls before applying): ``stale_version``, then ``check_disabled``, the one
   home of the pool rules that whoever *writes* a document uses too: ``unknown_pool``,
   ``unknown_domain``, ``all_disabled`` (never every domain of a pool).

``exp`` bounds how long a signed document may be *accepted* (an old one cannot be
replayed for ever); once applied, a document stays in force until a newer one is.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from .._exceptions import ControlError
from .._pool import Domain, Pool
from ._json import HugeInt, json_type, short
from ._keys import ControlKey, signing_key, verifying_keys

__all__ = [
    "MAX_LOCATIONS",
    "MAX_TIME",
    "MAX_VERSION",
    "ControlDocument",
    "Quorum",
    "check_disabled",
]

MAX_VERSION = 2**63 - 1
"""The largest ``version`` (a signed 64-bit integer, what other languages hold)."""

MAX_TIME = 253_402_300_799
"""The largest ``iat``/``exp``: 9999-12-31T23:59:59Z, the last second datetimes can name."""

MAX_LOCATIONS = 1000
"""The largest ``quorum.min_locations`` (and the most locations one domain may list)."""

_PAYLOAD_FIELDS = ("exp", "iat", "pools", "version")
_OPTIONAL_PAYLOAD_FIELDS = ("quorum",)
_POOL_FIELDS = ("disabled",)
_QUORUM_FIELDS = ("agreed", "for_seconds", "min_locations")
_MAX_FOR_SECONDS = 86_400


def _integer(value: Any, what: str, low: int, high: int, high_text: str) -> int:
    if isinstance(value, HugeInt):
        raise ControlError(
            f"out of range: {what} has {value.digits} digits; it must be from {low} to {high_text}",
            reason="out_of_range",
        )
    if isinstance(value, bool) or not isinstance(value, int):
        raise ControlError(
            f"wrong type: {what} must be an integer, got {json_type(value)} ({short(value)})",
            reason="wrong_type",
        )
    if not low <= value <= high:
        raise ControlError(
            f"out of range: {what} must be from {low} to {high_text}, got {value}",
            reason="out_of_range",
        )
    return value


def _members(
    value: Any, what: str, fields: tuple[str, ...], optional: tuple[str, ...] = ()
) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ControlError(
            f"wrong type: {what} must be a JSON object, got {json_type(value)}",
            reason="wrong_type",
        )
    missing = [f for f in fields if f not in value]
    if missing:
        raise ControlError(
            f"missing field: {what} has no {', '.join(map(repr, missing))}",
            reason="missing_field",
        )
    extra = sorted(set(value) - set(fields) - set(optional))
    if extra:
        raise ControlError(
            f"extra field: {what} has unknown {', '.join(map(repr, extra))}",
            reason="extra_field",
        )
    return value


def _normalise_disabled(disabled: object) -> Mapping[str, frozenset[str]]:
    if not isinstance(disabled, Mapping):
        raise ControlError(
            f"wrong type: pools must be a mapping of pool name to domains, got {json_type(disabled)}",
            reason="wrong_type",
        )
    result: dict[str, frozenset[str]] = {}
    for pool, urls in disabled.items():
        if not isinstance(pool, str) or not pool:
            raise ControlError(
                f"wrong type: pool name {short(pool)} must be a non-empty string", reason="wrong_type"
            )
        if isinstance(urls, str | bytes) or not isinstance(urls, Iterable):
            raise ControlError(
                f"wrong type: pool {short(pool)}: disabled must be a list of base URLs, got {json_type(urls)}",
                reason="wrong_type",
            )
        seen: set[str] = set()
        for url in urls:
            if not isinstance(url, str):
                raise ControlError(
                    f"wrong type: pool {short(pool)}: disabled domain {short(url)} is not a string",
                    reason="wrong_type",
                )
            try:
                normal = Domain.parse(url).url
            except ValueError as exc:
                raise ControlError(f"wrong type: pool {short(pool)}: {exc}", reason="wrong_type") from None
            if normal in seen:
                raise ControlError(
                    f"wrong type: pool {short(pool)} disables {normal} twice", reason="wrong_type"
                )
            seen.add(normal)
        result[pool] = frozenset(seen)
    return MappingProxyType(result)


def _object(value: object, what: str) -> Mapping[Any, Any]:
    if not isinstance(value, Mapping):
        raise ControlError(
            f"wrong type: {what} must be a JSON object, got {json_type(value)}", reason="wrong_type"
        )
    return value


def _locations(value: object, what: str, at_least: int) -> tuple[str, ...]:
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise ControlError(
            f"wrong type: {what} must be an array of location names, got {json_type(value)}",
            reason="wrong_type",
        )
    names = list(value)
    for name in names:
        if not isinstance(name, str) or not name:
            raise ControlError(
                f"wrong type: {what}: location {short(name)} is not a non-empty string", reason="wrong_type"
            )
    if len(set(names)) != len(names):
        raise ControlError(f"wrong type: {what} names a location twice", reason="wrong_type")
    if not at_least <= len(names) <= MAX_LOCATIONS:
        raise ControlError(
            f"out of range: {what} lists {len(names)} location(s); a quorum needs "
            f"{at_least} to {MAX_LOCATIONS}",
            reason="out_of_range",
        )
    return tuple(sorted(names))


@dataclass(frozen=True, slots=True, init=False)
class Quorum:
    """How a quorum of monitoring locations decided a document: its ``quorum`` member.

    ``agreed`` maps a pool to its domains (normalised base URLs) that at least
    ``min_locations`` locations saw fail for ``for_seconds``, each with those locations
    (sorted). A domain listed here is not necessarily disabled: the rule that keeps one
    domain of every pool enabled wins. A value, like ``ControlDocument``.
    """

    min_locations: int
    for_seconds: int
    agreed: Mapping[str, Mapping[str, tuple[str, ...]]]

    def __init__(
        self,
        *,
        min_locations: int,
        for_seconds: int,
        agreed: Mapping[str, Mapping[str, Iterable[str]]],
    ) -> None:
        least = _integer(min_locations, "quorum.min_locations", 1, MAX_LOCATIONS, str(MAX_LOCATIONS))
        seconds = _integer(for_seconds, "quorum.for_seconds", 1, _MAX_FOR_SECONDS, str(_MAX_FOR_SECONDS))
        pools: dict[str, Mapping[str, tuple[str, ...]]] = {}
        for pool, domains in _object(agreed, "quorum.agreed").items():
            if not isinstance(pool, str) or not pool:
                raise ControlError(
                    f"wrong type: quorum.agreed: pool name {short(pool)} must be a non-empty string",
                    reason="wrong_type",
                )
            entry: dict[str, tuple[str, ...]] = {}
            for url, names in _object(domains, f"quorum.agreed[{short(pool)}]").items():
                try:
                    normal = Domain.parse(url).url if isinstance(url, str) else None
                except ValueError as exc:
                    raise ControlError(f"wrong type: quorum.agreed[{short(pool)}]: {exc}", reason="wrong_type") from None
                if normal is None or normal in entry:
                    raise ControlError(
                        f"wrong type: quorum.agreed[{short(pool)}]: domain {short(url)} is not a base URL "
                        "or is listed twice",
                        reason="wrong_type",
                    )
                entry[normal] = _locations(names, f"quorum.agreed[{short(pool)}][{normal}]", least)
            pools[pool] = MappingProxyType(entry)
        object.__setattr__(self, "min_locations", least)
        object.__setattr__(self, "for_seconds", seconds)
        object.__setattr__(self, "agreed", MappingProxyType(pools))

    @classmethod
    def from_claims(cls, value: object) -> Quorum:
        """The ``quorum`` member of a decoded payload, or ``ControlError`` naming the rule."""
        members = _members(value, "quorum", _QUORUM_FIELDS)
        return cls(
            min_locations=members["min_locations"],
            for_seconds=members["for_seconds"],
            agreed=members["agreed"],
        )

    def claims(self) -> dict[str, Any]:
        """The JSON form of the ``quorum`` member."""
        return {
            "agreed": {
                pool: {url: list(names) for url, names in sorted(domains.items())}
                for pool, domains in sorted(self.agreed.items())
            },
            "for_seconds": self.for_seconds,
            "min_locations": self.min_locations,
        }

    def _key(self) -> tuple[int, int, frozenset[tuple[str, frozenset[tuple[str, tuple[str, ...]]]]]]:
        return (
            self.min_locations,
            self.for_seconds,
            frozenset((pool, frozenset(domains.items())) for pool, domains in self.agreed.items()),
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Quorum):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        agreed = {pool: dict(sorted(d.items())) for pool, d in sorted(self.agreed.items())}
        return f"Quorum(min_locations={self.min_locations}, for_seconds={self.for_seconds}, agreed={agreed})"


def check_disabled(
    pools: Iterable[Pool] | Mapping[str, Pool], disabled: Mapping[str, Iterable[str]]
) -> None:
    """Raise ``ControlError`` unless ``disabled`` fits ``pools``: the one home of the pool rules.

    ``disabled`` maps a pool name to the base URLs (any spelling) it would disable.
    Every pool it names must be one of ``pools`` (``unknown_pool``), every domain one of
    that pool's (``unknown_domain``), and at least one domain of each pool must stay
    enabled (``all_disabled``). Readers check documents with it before applying them
    (``ControlDocument.check``); writers check what they are about to sign.
    """
    listed: Iterable[Pool] = pools.values() if isinstance(pools, Mapping) else pools
    by_name = {p.name: p for p in listed}
    for name, urls in sorted(_normalise_disabled(disabled).items()):
        pool = by_name.get(name)
        if pool is None:
            known = ", ".join(sorted(by_name)) or "none"
            raise ControlError(
                f"unknown pool {short(name)} (local pools: {known})", reason="unknown_pool"
            )
        local = {d.url for d in pool.domains}
        unknown = sorted(urls - local)
        if unknown:
            raise ControlError(
                f"pool {short(name)} has no domain {', '.join(unknown)} "
                f"(its domains: {', '.join(d.url for d in pool.domains)})",
                reason="unknown_domain",
            )
        if urls >= local:
            raise ControlError(
                f"document disables every domain of pool {short(name)}; at least one must stay enabled",
                reason="all_disabled",
            )


@dataclass(frozen=True, slots=True, init=False)
class ControlDocument:
    """A control document: which domains of which pools are disabled, and when.

    A value (frozen, compared and hashed by content). ``disabled`` maps a pool name
    to the normalised base URLs of its disabled domains. Get one verified from the
    wire with ``ControlDocument.parse`` (or ``verify_document``); write the signed
    wire form with ``ControlDocument.sign`` (or ``sign_document``).
    """

    version: int
    issued_at: int
    expires_at: int
    disabled: Mapping[str, frozenset[str]]
    quorum: Quorum | None

    def __init__(
        self,
        *,
        version: int,
        issued_at: int,
        expires_at: int,
        disabled: Mapping[str, Iterable[str]],
        quorum: Quorum | None = None,
    ) -> None:
        version = _integer(version, "version", 0, MAX_VERSION, "2**63-1")
        issued = _integer(issued_at, "iat (issued_at)", 0, MAX_TIME, str(MAX_TIME))
        expires = _integer(expires_at, "exp (expires_at)", 0, MAX_TIME, str(MAX_TIME))
        if expires <= issued:
            raise ControlError(
                f"out of range: exp ({expires}) must be after iat ({issued})",
                reason="out_of_range",
            )
        object.__setattr__(self, "version", version)
        object.__setattr__(self, "issued_at", issued)
        object.__setattr__(self, "expires_at", expires)
        object.__setattr__(self, "disabled", _normalise_disabled(disabled))
        if quorum is not None and not isinstance(quorum, Quorum):
            raise TypeError(f"quorum: expected a Quorum or None, got {type(quorum).__name__}")
        object.__setattr__(self, "quorum", quorum)

    @classmethod
    def create(
        cls,
        *,
        version: int,
        pools: Mapping[str, Iterable[str]],
        expires_in: float,
        now: float | None = None,
        quorum: Quorum | None = None,
    ) -> ControlDocument:
        """A document issued at ``now`` (the wall clock by default), valid ``expires_in`` seconds.

        ``iat`` is ``now`` rounded down and ``exp`` is ``now + expires_in`` rounded up,
        so the document is valid for at least ``expires_in`` seconds.
        """
        if isinstance(expires_in, bool) or not isinstance(expires_in, int | float):
            raise TypeError(f"expires_in: expected seconds, got {type(expires_in).__name__}")
        if not (math.isfinite(expires_in) and expires_in > 0):
            raise ValueError(f"expires_in must be a positive number of seconds, got {expires_in!r}")
        issued = time.time() if now is None else now
        if isinstance(issued, bool) or not isinstance(issued, int | float) or not math.isfinite(issued):
            raise TypeError(f"now: expected unix seconds, got {issued!r}")
        return cls(
            version=version,
            issued_at=math.floor(issued),
            expires_at=math.ceil(issued + expires_in),
            disabled=pools,
            quorum=quorum,
        )

    @classmethod
    def from_claims(cls, claims: object) -> ControlDocument:
        """The document a decoded payload describes, or ``ControlError`` naming the rule."""
        payload = _members(claims, "the payload", _PAYLOAD_FIELDS, _OPTIONAL_PAYLOAD_FIELDS)
        pools = payload["pools"]
        if not isinstance(pools, dict):
            raise ControlError(
                f"wrong type: pools must be an object, got {json_type(pools)}", reason="wrong_type"
            )
        disabled: dict[str, list[Any]] = {}
        for name, entry in pools.items():
            entry = _members(entry, f"pool {short(name)}", _POOL_FIELDS)
            if not isinstance(entry["disabled"], list):
                raise ControlError(
                    f"wrong type: pool {short(name)}: disabled must be an array, got {json_type(entry['disabled'])}",
                    reason="wrong_type",
                )
            disabled[name] = entry["disabled"]
        return cls(
            version=payload["version"],
            issued_at=payload["iat"],
            expires_at=payload["exp"],
            disabled=disabled,
            quorum=Quorum.from_claims(payload["quorum"]) if "quorum" in payload else None,
        )

    def claims(self) -> dict[str, Any]:
        """The JWT claims set of this document (what is signed); ``quorum`` only if it has one."""
        claims: dict[str, Any] = {
            "exp": self.expires_at,
            "iat": self.issued_at,
            "pools": {
                name: {"disabled": sorted(urls)} for name, urls in sorted(self.disabled.items())
            },
            "version": self.version,
        }
        if self.quorum is not None:
            claims["quorum"] = self.quorum.claims()
        return claims

    def payload(self) -> bytes:
        """The claims as canonical JSON: sorted members, no spaces, ASCII only."""
        return json.dumps(self.claims(), separators=(",", ":"), sort_keys=True).encode("ascii")

    def check_time(self, now: float, max_skew: float = 30.0) -> None:
        """Raise ``ControlError`` unless the document may be accepted at ``now``.

        It may be issued at most ``max_skew`` seconds ahead of the reader's clock, and
        is refused from ``exp`` on.
        """
        if self.issued_at > now + max_skew:
            raise ControlError(
                f"document version {self.version} is issued {self.issued_at - now:.0f} s in the future "
                f"(allowed clock skew: {max_skew:g} s)",
                reason="future",
            )
        if self.expires_at <= now:
            raise ControlError(
                f"document version {self.version} expired {now - self.expires_at:.0f} s ago",
                reason="expired",
            )

    def check(
        self, pools: Iterable[Pool] | Mapping[str, Pool], current_version: int | None
    ) -> None:
        """Raise ``ControlError`` unless this document may be applied to ``pools`` now.

        ``current_version`` is the version in force (``None``: none yet); this
        document's version must be greater. Every pool and domain it names must
        exist locally, and at least one domain of each pool must stay enabled.
        """
        if current_version is not None and self.version <= current_version:
            raise ControlError(
                f"document version {self.version} is not newer than version {current_version} in force",
                reason="stale_version",
            )
        check_disabled(pools, self.disabled)

    def is_disabled(self, pool: str, domain: str) -> bool:
        """True if this document disables ``domain`` (any spelling of the base URL) in ``pool``."""
        return Domain.parse(domain).url in self.disabled.get(pool, frozenset())

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ControlDocument):
            return NotImplemented
        return (self.version, self.issued_at, self.expires_at, dict(self.disabled), self.quorum) == (
            other.version,
            other.issued_at,
            other.expires_at,
            dict(other.disabled),
            other.quorum,
        )

    def __hash__(self) -> int:
        return hash(
            (self.version, self.issued_at, self.expires_at, frozenset(self.disabled.items()), self.quorum)
        )

    def __repr__(self) -> str:
        pools = {name: sorted(urls) for name, urls in sorted(self.disabled.items())}
        quorum = "" if self.quorum is None else f", quorum={self.quorum!r}"
        return (
            f"ControlDocument(version={self.version}, issued_at={self.issued_at}, "
            f"expires_at={self.expires_at}, disabled={pools}{quorum})"
        )

    # -- the wire form, through _jws

    @classmethod
    def sign(
        cls,
        *,
        version: int,
        pools: Mapping[str, Iterable[str]],
        expires_in: float,
        key: ControlKey | None = None,
        hmac_key: bytes | None = None,
        now: float | None = None,
        quorum: Quorum | None = None,
    ) -> bytes:
        """The JWS (compact serialization) of a new document, signed with one key.

        ``key`` is a ``ControlKey`` that can sign (``load_key("control.key")``);
        ``hmac_key`` is the shorthand for an HS256 secret given as 32+ raw bytes.
        See ``ControlDocument.create`` for ``expires_in`` and ``now``; ``quorum`` records
        how a quorum of locations decided it.
        """
        from ._jws import sign_document  # _jws reads documents: imported here, not above

        doc = cls.create(version=version, pools=pools, expires_in=expires_in, now=now, quorum=quorum)
        return sign_document(doc, signing_key(key, hmac_key))

    @classmethod
    def parse(
        cls,
        raw: bytes,
        *,
        key: ControlKey | Sequence[ControlKey] | None = None,
        hmac_key: bytes | None = None,
        now: float | None = None,
        max_skew: float = 30.0,
    ) -> ControlDocument:
        """Verify the JWS ``raw`` with the given key(s), then validate and return the document.

        ``key`` is a ``ControlKey`` or a sequence of them (several during a key
        rotation); ``hmac_key`` is the shorthand for an HS256 secret as raw bytes.
        ``now`` defaults to the wall clock. Raises ``ControlError``.
        """
        from ._jws import verify_document

        return verify_document(raw, verifying_keys(key, hmac_key), now=now, max_skew=max_skew)
