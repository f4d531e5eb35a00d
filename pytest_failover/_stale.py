"""The stale-response fallback: a shared HTTP cache that only answers when every domain failed.

When every domain of a pool failed or is open, a GET that recently succeeded is answered
from here, marked ``X-Failover-Stale: 1`` (and ``extensions["failover"].stale`` by the
transport). The healthy path never reads from it: a response is *stored* after every
success and *served* only on error, so this is RFC 9111 caching restricted to the
"disconnected" case of §4.2.4 plus RFC 5861 ``stale-if-error``.

Rules and theory of operation
=============================

One client process may serve many users, so this is a **shared** cache (RFC 9111 §1), and
on top of the RFC every entry is **partitioned by the credentials that fetched it**.

Key
    ``(pool, credentials, path?query, Vary names, Vary selection)``. The host is not in
    the key (a pool's domains are interchangeable); ``credentials`` is a keyed BLAKE2b
    digest of every ``Authorization``, ``Proxy-Authorization`` and ``Cookie`` field line
    of the request, so no answer ever crosses credentials, and no credential is held in
    memory in clear (the Vary selection is digested the same way).

Storing (``store``) needs all of:
    - method ``GET``, no ``Range``, no request ``no-store``;
    - a final status other than 206 and 304 (neither is a complete answer);
    - no response ``no-store``, no ``private`` (qualified or not: stricter than §5.2.2.7,
      which would allow storing without the listed fields);
    - no ``Vary: *`` (§4.1: never served, so never stored);
    - if the request carries ``Authorization``: ``public``, ``s-maxage`` or
      ``must-revalidate`` on the response (§3.5);
    - explicit freshness (``s-maxage``, ``max-age``, ``Expires``), ``public``, or a
      heuristically cacheable status (§4.2.2: 200 203 204 300 301 308 404 405 410 414 501);
    - a fully read body of at most ``max_bytes``, a valid ``Age``, and an entry that fits
      ``max_total_bytes``.
    Not stored: hop-by-hop fields (``Connection`` and the fields it names, ``Keep-Alive``,
    ``Proxy-Connection``, ``TE``, ``Transfer-Encoding``, ``Upgrade``), proxy fields
    (``Proxy-Authenticate``, ``Proxy-Authentication-Info``, §3.1), fields named by a
    qualified ``no-cache="..."`` (they may not be reused without validation, and a stale
    answer is never validated), ``Set-Cookie`` (a stale answer must not hand one user's
    session to the next anonymous caller), and ``Content-Encoding`` / ``Content-Length``
    (the body is stored decoded; the served response gets a fresh ``Content-Length``).
    A GET answer that is *not* stored removes what a lookup for that request would have
    found: a stale answer never goes back in time past a response the caller has seen.
    A non-error answer to an unsafe method invalidates the path in every partition (§4.4).

Age and freshness
    ``current_age = Age + (now - stored_at)`` (§4.2.3 without ``apparent_age``: that
    needs a wall clock and this module reads none; ``now`` is monotonic seconds).
    Lifetime (shared cache, §4.2.1): ``s-maxage``, else ``max-age``, else
    ``Expires - Date`` (0 when either is missing or invalid), else 0: no heuristic
    lifetime. Repeated integer directives count as their minimum; a value that is not
    ``1*DIGIT`` counts as 0 ("invalid freshness information is stale"), values are
    capped at 2**31 (§1.2.2).

Serving (``lookup``): a stored answer matching the key (most recent first) is served iff
``current_age < lifetime + window``, where ``window`` is the smallest of:

    =========================  =====================================================
    the origin's limit         response ``stale-if-error=N``: N (RFC 5861, this wins
                               over every prohibition below); else unqualified
                               ``no-cache``: never served, not even fresh (§5.2.2.4);
                               else ``must-revalidate``, ``proxy-revalidate`` or
                               ``s-maxage``: 0, i.e. only while fresh (§5.2.2.2,
                               §5.2.2.8, §5.2.2.10); else no limit
    the client's limit         request ``stale-if-error=N``: N; else, when the response
                               said nothing (no ``stale-if-error``): ``max_age``
                               (``Policy.stale_max_age``); else no limit
    =========================  =====================================================

    A request with ``no-cache`` (it insists on validation, which just failed) or
    ``no-store`` (it opts out of storage, and so of answers from it: stricter than
    §5.2.1.5) is never answered from here, nor is a request carrying ``Authorization``
    whose stored answer lacked ``public`` / ``s-maxage`` / ``must-revalidate`` (§3.5;
    unreachable through the partitioning, checked anyway).
    The served response carries ``Age`` (§4) and ``X-Failover-Stale: 1``; no
    ``Warning`` (obsoleted by RFC 9111 §5.5).

Bounds: an LRU of at most ``max_entries`` entries and ``max_total_bytes`` bytes (body plus
stored field bytes); thread-safe (one lock around the index, parsing outside it); no I/O.

Why not hishel
==============

``hishel`` 2.0.0 (the maintained RFC 9111 cache for httpx) was read for this and not used:

- it reads the clock: ``hishel._core._spec.get_age`` and ``get_freshness_lifetime`` call
  ``time.time()`` and take the age from ``Date`` alone (the ``Age`` field and the time
  resident in the cache are ignored), while this module must take a monotonic ``now``;
- it has no ``stale-if-error``: ``CacheControl.stale_if_error`` is parsed but nothing in
  ``_spec.py`` reads it (only ``hishel.fastapi`` emits it); stale reuse is one boolean
  option (``allow_stale``), and it ignores ``proxy-revalidate`` and ``s-maxage``;
- its state machine answers the opposite question: ``IdleClient.next`` decides *before*
  the request whether to serve, revalidate (``NeedRevalidation`` with a conditional
  request) or miss; here storage is consulted only *after* every domain failed;
- no credential partitioning: ``hishel.httpx`` keys on ``sha256("RFC " + url)`` (host
  included), and ``IdleClient.next`` never looks at the new request's ``Authorization``
  (§3.5 is checked only when storing, in ``CacheMiss.next``);
- its storages are SQLite and Redis (I/O, plus ``msgpack``); there is no in-memory LRU with
  a byte bound, and its ``Request``/``Response``/``Headers`` models need converting both ways.
What would be reused (``CacheMiss.next``'s storability test, ``vary_headers_match``) is about
a hundred lines here; it is not worth a dependency whose timing model is wrong for us.
"""

from __future__ import annotations

import email.utils
import hashlib
import re
import secrets
import threading
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ._fork import renew_locks

if TYPE_CHECKING:
    from ._lib import Headers, Request, Response

__all__ = ["StaleCache"]

STALE_HEADER = "X-Failover-Stale"

_DELTA_MAX = 2**31  # RFC 9111 §1.2.2
_DIGITS = re.compile(r"[0-9]+")
_HEURISTIC_STATUSES = frozenset({200, 203, 204, 300, 301, 308, 404, 405, 410, 414, 501})
_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})
_CREDENTIAL_FIELDS = (b"authorization", b"proxy-authorization", b"cookie")
_UNSTORED_FIELDS = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"te",
        b"transfer-encoding",
        b"upgrade",
        b"proxy-authenticate",
        b"proxy-authentication-info",
        b"set-cookie",
        b"set-cookie2",
        b"content-encoding",
        b"content-length",
        b"age",
        STALE_HEADER.lower().encode("ascii"),
    }
)

# (pool, credentials digest, raw path?query)
_Base = tuple[str, bytes, bytes]
# base + (Vary names, Vary selection digest)
_Key = tuple[str, bytes, bytes, tuple[str, ...], bytes]


def _split_directives(value: str) -> Iterator[tuple[str, str | None]]:
    """Yield ``(name, argument)`` of each Cache-Control directive; quoted strings may hold commas."""
    i, n = 0, len(value)
    while i < n:
        while i < n and value[i] in " \t,":
            i += 1
        start = i
        while i < n and value[i] not in "=, \t":
            i += 1
        name = value[start:i].lower()
        while i < n and value[i] in " \t":
            i += 1
        argument: str | None = None
        if i < n and value[i] == "=":
            i += 1
            while i < n and value[i] in " \t":
                i += 1
            if i < n and value[i] == '"':
                i += 1
                chars: list[str] = []
                while i < n and value[i] != '"':
                    if value[i] == "\\" and i + 1 < n:
                        i += 1
                    chars.append(value[i])
                    i += 1
                argument = "".join(chars)
            else:
                start = i
                while i < n and value[i] not in ", \t":
                    i += 1
                argument = value[start:i]
        while i < n and value[i] != ",":
            i += 1
        if name:
            yield name, argument


def _delta(argument: str | None) -> int:
    """A delta-seconds value; anything but ``1*DIGIT`` is 0, large values are 2**31."""
    if argument is None or not _DIGITS.fullmatch(argument):
        return 0
    if len(argument) > 10:
        return _DELTA_MAX
    return min(int(argument), _DELTA_MAX)


@dataclass(frozen=True, slots=True)
class _CacheControl:
    """The directives of every ``Cache-Control`` line of a message, merged conservatively."""

    flags: frozenset[str]
    numbers: dict[str, int]
    no_cache_fields: frozenset[bytes]
    no_cache: bool  # unqualified

    @classmethod
    def parse(cls, headers: Headers) -> _CacheControl:
        flags: set[str] = set()
        numbers: dict[str, int] = {}
        fields: set[bytes] = set()
        no_cache = False
        for line in headers.get_list("cache-control"):
            for name, argument in _split_directives(line):
                flags.add(name)
                if name in ("max-age", "s-maxage", "stale-if-error"):
                    value = _delta(argument)
                    numbers[name] = min(value, numbers.get(name, value))
                elif name == "no-cache":
                    if argument is None:
                        no_cache = True
                    else:
                        fields.update(
                            f.strip().lower().encode("latin-1", "replace")
                            for f in argument.split(",")
                            if f.strip()
                        )
        return cls(frozenset(flags), numbers, frozenset(fields), no_cache)


def _http_date(value: str | None) -> int | None:
    if value is None:
        return None
    parsed = email.utils.parsedate_tz(value)
    if parsed is None:
        return None
    try:
        return email.utils.mktime_tz(parsed)
    except (ValueError, OverflowError):
        return None


def _lifetime(headers: Headers, cc: _CacheControl) -> tuple[int, bool]:
    """The freshness lifetime for a shared cache, and whether it was explicit (RFC 9111 §4.2.1)."""
    if "s-maxage" in cc.numbers:
        return cc.numbers["s-maxage"], True
    if "max-age" in cc.numbers:
        return cc.numbers["max-age"], True
    if "expires" in headers:
        expires = _http_date(headers.get("expires"))
        date = _http_date(headers.get("date"))
        if expires is None or date is None:
            return 0, True
        return min(max(0, expires - date), _DELTA_MAX), True
    return 0, False


def _age(headers: Headers) -> int | None:
    """The largest ``Age`` value, 0 when absent, None when one is not delta-seconds."""
    age = 0
    for value in headers.get_list("age"):
        value = value.strip()
        if not _DIGITS.fullmatch(value):
            return None
        age = max(age, _delta(value))
    return age


def _vary_names(headers: Headers) -> tuple[str, ...] | None:
    """The sorted, lower-cased field names of every ``Vary`` line; None for ``Vary: *``."""
    names: set[str] = set()
    for line in headers.get_list("vary"):
        for name in line.split(","):
            name = name.strip().lower()
            if name == "*":
                return None
            if name:
                names.add(name)
    return tuple(sorted(names))


@dataclass(frozen=True, slots=True)
class _Entry:
    stored_at: float
    age_at_store: int
    lifetime: int
    stale_if_error: int | None  # the response's own, RFC 5861
    no_cache: bool  # unqualified: never served without validation
    revalidate: bool  # must-revalidate, proxy-revalidate or s-maxage: only while fresh
    allows_authorization: bool  # public, s-maxage or must-revalidate (RFC 9111 §3.5)
    status: int
    headers: tuple[tuple[bytes, bytes], ...]
    content: bytes
    size: int

    def servable(self, current_age: float, request_cc: _CacheControl, max_age: float) -> bool:
        """May this entry answer a failed request at ``current_age``? (the window table above)."""
        limits: list[float] = []
        if self.stale_if_error is not None:
            limits.append(self.stale_if_error)
        elif self.no_cache:
            return False
        elif self.revalidate:
            limits.append(0)
        if "stale-if-error" in request_cc.numbers:
            limits.append(request_cc.numbers["stale-if-error"])
        elif self.stale_if_error is None:
            limits.append(max(0.0, max_age))
        window = min(limits) if limits else float("inf")
        return current_age < self.lifetime + window


class StaleCache:
    """Last good GET answers per pool, served only on error; a bounded, thread-safe LRU.

    See the module docstring for every rule. ``now`` is monotonic seconds, passed in.
    """

    def __init__(self, *, max_entries: int = 256, max_total_bytes: int = 32 << 20) -> None:
        if max_entries < 0:
            raise ValueError(f"StaleCache: max_entries must be >= 0, got {max_entries}")
        if max_total_bytes < 0:
            raise ValueError(f"StaleCache: max_total_bytes must be >= 0, got {max_total_bytes}")
        self._max_entries = max_entries
        self._max_total_bytes = max_total_bytes
        self._salt = secrets.token_bytes(16)
        self._lock = threading.Lock()
        renew_locks(self, "_lock")
        self._entries: OrderedDict[_Key, _Entry] = OrderedDict()
        # The Vary name sets stored per base key, with how many entries use each.
        self._variants: dict[_Base, dict[tuple[str, ...], int]] = {}
        self._total_bytes = 0

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    @property
    def total_bytes(self) -> int:
        """The bytes held now (bodies plus stored field lines)."""
        with self._lock:
            return self._total_bytes

    def clear(self) -> None:
        """Hold nothing, as built (``State.forget``)."""
        with self._lock:
            self._entries.clear()
            self._variants.clear()
            self._total_bytes = 0

    # -- keys --------------------------------------------------------------

    def _digest(self, parts: list[bytes]) -> bytes:
        h = hashlib.blake2b(key=self._salt, digest_size=16)
        for part in parts:
            h.update(len(part).to_bytes(8, "big"))
            h.update(part)
        return h.digest()

    def _base(self, pool: str, request: Request) -> _Base:
        parts: list[bytes] = []
        for field in _CREDENTIAL_FIELDS:
            values = [v for k, v in request.headers.raw if k.lower() == field]
            parts.append(field)
            parts.append(len(values).to_bytes(8, "big"))
            parts.extend(values)
        return pool, self._digest(parts), request.url.raw_path

    def _key(self, base: _Base, names: tuple[str, ...], request: Request) -> _Key:
        parts: list[bytes] = []
        for name in names:
            field = name.encode("latin-1", "replace")
            values = [v.strip() for k, v in request.headers.raw if k.lower() == field]
            parts.append(field)
            parts.append(len(values).to_bytes(8, "big"))
            parts.extend(values)
        return (*base, names, self._digest(parts))

    # -- index (callers hold the lock) ---------------------------------------

    def _remove(self, key: _Key) -> None:
        entry = self._entries.pop(key)
        self._total_bytes -= entry.size
        base: _Base = key[:3]
        names = key[3]
        variants = self._variants[base]
        variants[names] -= 1
        if not variants[names]:
            del variants[names]
            if not variants:
                del self._variants[base]

    def _matches(self, base: _Base, request: Request) -> list[_Key]:
        variants = self._variants.get(base)
        if not variants:
            return []
        keys = (self._key(base, names, request) for names in variants)
        return [key for key in keys if key in self._entries]

    # -- public --------------------------------------------------------------

    def store(
        self,
        pool: str,
        request: Request,
        response: Response,
        now: float,
        *,
        max_bytes: int,
    ) -> bool:
        """Keep ``response`` (already read) as the answer to ``request`` if the rules allow; say whether it was kept."""
        method = request.method.upper()
        if method != "GET":
            if method not in _SAFE_METHODS and response.status_code < 400:
                self._invalidate(pool, request.url.raw_path)
            return False
        if "range" in request.headers:
            return False
        base = self._base(pool, request)
        entry, names = self._entry(request, response, now, max_bytes)
        with self._lock:
            if entry is None or names is None:
                # The caller saw a newer answer that is not kept: forget the older one.
                for key in self._matches(base, request):
                    self._remove(key)
                return False
            key = self._key(base, names, request)
            if key in self._entries:
                self._remove(key)
            self._entries[key] = entry
            self._total_bytes += entry.size
            variants = self._variants.setdefault(base, {})
            variants[names] = variants.get(names, 0) + 1
            while (
                len(self._entries) > self._max_entries or self._total_bytes > self._max_total_bytes
            ):
                self._remove(next(iter(self._entries)))
        return True

    def _entry(
        self, request: Request, response: Response, now: float, max_bytes: int
    ) -> tuple[_Entry | None, tuple[str, ...] | None]:
        """The entry to store, or None with the reason being one of the storing rules."""
        request_cc = _CacheControl.parse(request.headers)
        headers = response.headers
        cc = _CacheControl.parse(headers)
        status = response.status_code
        names = _vary_names(headers)
        if (
            "no-store" in request_cc.flags
            or status < 200
            or status in (206, 304)
            or "no-store" in cc.flags
            or "private" in cc.flags
            or names is None
        ):
            return None, names
        allows_authorization = bool({"public", "s-maxage", "must-revalidate"} & cc.flags)
        if "authorization" in request.headers and not allows_authorization:
            return None, names
        lifetime, explicit = _lifetime(headers, cc)
        if not (explicit or "public" in cc.flags or status in _HEURISTIC_STATUSES):
            return None, names
        age = _age(headers)
        if age is None:
            return None, names
        try:
            content = response.content
        except RuntimeError:  # the library's ResponseNotRead (a StreamError, a RuntimeError)
            return None, names
        if len(content) > max_bytes:
            return None, names
        dropped = set(_UNSTORED_FIELDS) | cc.no_cache_fields
        for value in headers.get_list("connection"):
            dropped.update(f.strip().lower().encode("latin-1", "replace") for f in value.split(","))
        kept = tuple((k, v) for k, v in headers.raw if k.lower() not in dropped)
        size = len(content) + sum(len(k) + len(v) for k, v in kept)
        if size > self._max_total_bytes or self._max_entries == 0:
            return None, names
        entry = _Entry(
            stored_at=now,
            age_at_store=age,
            lifetime=lifetime,
            stale_if_error=cc.numbers.get("stale-if-error"),
            no_cache=cc.no_cache,
            revalidate=bool({"must-revalidate", "proxy-revalidate", "s-maxage"} & cc.flags),
            allows_authorization=allows_authorization,
            status=status,
            headers=kept,
            content=content,
            size=size,
        )
        return entry, names

    def _invalidate(self, pool: str, target: bytes) -> None:
        with self._lock:
            for key in [k for k in self._entries if k[0] == pool and k[2] == target]:
                self._remove(key)

    def lookup(
        self, pool: str, request: Request, now: float, *, max_age: float, response: type[Any]
    ) -> Any:
        """The stored answer to ``request`` if it may be served now that every domain failed:
        a ``response`` (the class of the front-end's library: a ``sharing`` group may mix
        libraries, and each is served in its own)."""
        if request.method.upper() != "GET" or "range" in request.headers:
            return None
        request_cc = _CacheControl.parse(request.headers)
        if "no-store" in request_cc.flags or "no-cache" in request_cc.flags:
            return None
        base = self._base(pool, request)
        with self._lock:
            keys = self._matches(base, request)
            if not keys:
                return None
            key = max(keys, key=lambda k: self._entries[k].stored_at)
            entry = self._entries[key]
            self._entries.move_to_end(key)
        if "authorization" in request.headers and not entry.allows_authorization:
            return None
        current_age = entry.age_at_store + max(0.0, now - entry.stored_at)
        if not entry.servable(current_age, request_cc, max_age):
            return None
        headers = [
            *entry.headers,
            (b"Age", str(int(current_age)).encode("ascii")),
            (STALE_HEADER.encode("ascii"), b"1"),
        ]
        return response(entry.status, headers=headers, content=entry.content, request=request)
