"""HTTPDNS: a cloud vendor's resolver over plain HTTP(S), ``GET .../d?host={host}``.

The answer's body goes through a parser, ``parse(host, body) -> (addresses, ttl)``; what it
returns is then checked like any resolver's (IP addresses, a sane TTL, ``allow``). A parser
raises ``BadAnswer`` (or any exception, which becomes one) for a body it cannot read, and
returns no address for a name without one. Three ship:

``parse_json`` (the default), for the common JSON shape (Alibaba Cloud's ``/d``, and most
self-hosted ones)::

    {"host": "api.example.com", "ips": ["192.0.2.1"], "ipsv6": ["2001:db8::1"], "ttl": 60}

``ips`` may hold both families; ``ipsv6`` (or ``ipv6``) is optional; ``host``, when present,
must be the name asked; other keys are ignored. The batch form ``{"dns": [{...}, ...]}``
is read too (the entry for the name asked).

``parse_text``, for the ``ip;ip,ttl`` text of Tencent Cloud's DNSPod D+::

    192.0.2.1;192.0.2.2,60

(``0`` alone means no address).

``parse_dns_json``, for the DNS JSON API of Google and Cloudflare (``application/dns-json``)::

    {"Status": 0, "Answer": [{"name": "api.example.com.", "type": 1, "TTL": 60, "data": "192.0.2.1"}]}
"""

from __future__ import annotations

import json
import ssl
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias
from urllib.parse import quote

from .. import semconv
from .._lib import client_library
from ._base import (
    AddressFilter,
    Answer,
    BadAnswer,
    ResolverUnavailable,
    make_answer,
    normalize_host,
)
from ._http import Endpoint, Reply

if TYPE_CHECKING:
    import httpx
else:
    httpx = client_library()  # httpx, or httpx2 (the same API) when only it is installed

__all__ = ["HTTPDNSResolver", "Parse", "parse_dns_json", "parse_json", "parse_text"]

SOURCE = semconv.RESOLVE_SOURCE_HTTPDNS
#: ``parse(host, body) -> (addresses, ttl)``; checked afterwards, so it may return what it read.
Parse: TypeAlias = Callable[[str, bytes], tuple[Sequence[object], object]]


class HTTPDNSResolver:
    """Resolve through an HTTPDNS endpoint: ``url_template`` holds ``{host}``.

    ``parse`` reads the body (``parse_json`` by default; see the module docstring).
    ``bootstrap``, ``timeout``, ``verify`` and ``allow`` are as ``DoHResolver``'s.
    """

    def __init__(
        self,
        url_template: str,
        *,
        parse: Parse | None = None,
        bootstrap: str | Sequence[str] | None = None,
        timeout: float = 2.0,
        verify: ssl.SSLContext | str | bool = True,
        allow: AddressFilter | None = None,
    ) -> None:
        if url_template.count("{host}") != 1:
            raise ValueError(
                f"HTTPDNSResolver's url_template holds '{{host}}' once, got {url_template!r}"
            )
        self.template = url_template
        self.parse: Parse = parse or parse_json
        self.allow = allow
        self.endpoint = Endpoint(
            url_template.replace("{host}", "name"),
            bootstrap=bootstrap,
            timeout=timeout,
            verify=verify,
            source=SOURCE, label="HTTPDNS endpoint",
        )

    def __repr__(self) -> str:
        return f"HTTPDNSResolver({self.template!r})"

    def resolve(self, host: str) -> Answer:
        name = normalize_host(host)
        return self._read(name, self.endpoint.send("GET", self._url(name), {}, None, host=name))

    async def aresolve(self, host: str) -> Answer:
        name = normalize_host(host)
        return self._read(name, await self.endpoint.asend("GET", self._url(name), {}, None, host=name))

    def close(self) -> None:
        self.endpoint.close()

    async def aclose(self) -> None:
        await self.endpoint.aclose()

    def _url(self, name: str) -> httpx.URL:
        return httpx.URL(self.template.replace("{host}", quote(name, safe="")))

    def _read(self, name: str, reply: Reply) -> Answer:
        status, _, body = reply
        if status != 200:
            raise ResolverUnavailable(
                f"HTTPDNS endpoint answered HTTP {status} for {name!r}", host=name, source=SOURCE
            )
        try:
            addresses, ttl = self.parse(name, body)
        except BadAnswer:
            raise
        except Exception as exc:  # a parser's failure on untrusted input is a bad answer
            raise BadAnswer(
                f"HTTPDNS answer for {name!r} could not be read by {_name(self.parse)}: "
                f"{type(exc).__name__}: {exc}",
                host=name,
                source=SOURCE,
            ) from exc
        return make_answer(name, addresses, ttl, source=SOURCE, allow=self.allow)


# --------------------------------------------------------------------------- parsers


def _name(parse: object) -> str:
    return getattr(parse, "__name__", repr(parse))


def _wrong(host: str, what: str, body: object) -> BadAnswer:
    shown = repr(body)
    shown = shown if len(shown) <= 200 else shown[:200] + "..."
    return BadAnswer(f"HTTPDNS answer for {host!r} {what}: {shown}", host=host, source=SOURCE)


def _load(host: str, body: bytes) -> Any:
    try:
        return json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise _wrong(host, f"is not JSON ({exc})", body) from None


def _strings(host: str, document: dict[str, Any], key: str) -> list[object]:
    value = document.get(key, [])
    if not isinstance(value, list):
        raise _wrong(host, f"has {key!r} that is not a list", document)
    return value


def parse_json(host: str, body: bytes) -> tuple[Sequence[object], object]:
    """``{"host": ..., "ips": [...], "ipsv6": [...], "ttl": 60}`` (or ``{"dns": [...]}`` of them)."""
    document = _load(host, body)
    if isinstance(document, dict) and isinstance(document.get("dns"), list):
        entries = [e for e in document["dns"] if isinstance(e, dict) and str(e.get("host", "")).lower().rstrip(".") == host]
        if not entries:
            raise _wrong(host, "has no entry for the name in 'dns'", document)
        document = entries[0]
    if not isinstance(document, dict) or not {"ips", "ipsv6", "ipv6"} & document.keys():
        raise _wrong(host, "is not an object with 'ips' (and 'ttl')", document)
    if "host" in document and str(document["host"]).lower().rstrip(".") != host:
        raise _wrong(host, f"is for another name, {document['host']!r}", document)
    if "ttl" not in document:
        raise _wrong(host, "has no 'ttl'", document)
    ips = [*_strings(host, document, "ips"), *_strings(host, document, "ipsv6"), *_strings(host, document, "ipv6")]
    return ips, document["ttl"]


def parse_text(host: str, body: bytes) -> tuple[Sequence[object], object]:
    """``ip;ip;...,ttl`` (DNSPod D+); ``0`` or an empty body: no address."""
    try:
        text = body.decode("ascii").strip()
    except UnicodeDecodeError:
        raise _wrong(host, "is not ASCII text", body) from None
    if text in ("", "0"):
        return [], 0
    ips, comma, ttl = text.rpartition(",")
    if not comma or not ttl.strip().isdigit():
        raise _wrong(host, "is not 'ip;ip,ttl'", text)
    return [ip for ip in ips.split(";") if ip], int(ttl)


def parse_dns_json(host: str, body: bytes) -> tuple[Sequence[object], object]:
    """The DNS JSON API (``application/dns-json``): ``Answer`` records of type 1 (A) and 28 (AAAA)."""
    document = _load(host, body)
    if not isinstance(document, dict) or not isinstance(document.get("Status"), int):
        raise _wrong(host, "is not an object with 'Status'", document)
    if document["Status"] == 3:  # NXDOMAIN
        return [], 0
    if document["Status"] != 0:
        raise _wrong(host, f"has the DNS status {document['Status']}", document)
    records = document.get("Answer", [])
    if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
        raise _wrong(host, "has 'Answer' that is not a list of records", document)
    found = [r for r in records if r.get("type") in (1, 28)]
    if not found:
        return [], 0
    ttls = [r.get("TTL") for r in found]
    bad = [t for t in ttls if isinstance(t, bool) or not isinstance(t, int)]
    return [r.get("data") for r in found], bad[0] if bad else min(ttls)
