"""What the front-ends convert on every request: their client's URL, headers, request and
response into httpx's, and back.

The request path speaks httpx, so each request of the requests adapter and the aiohttp
middleware becomes an ``httpx.Request``, and each answer an ``httpx.Response``. Built
through their constructors, those two cost more than the rest of a front-end's work: the
constructors parse again what the client parsed already (each header name and value
checked and encoded one call at a time, a URL split up). Here they are built as httpx's
constructors would leave them for the same arguments, from what the client holds:

- a URL, parsed once per string and remembered (an application calls the same URLs
  again and again);
- headers, straight into httpx's own list of ``(name, lowercased name, value)`` byte
  triples (the list the request path already reads, ``Headers._list``), encoded as
  ``latin-1``: the encoding both clients send header text in and decode it from, so an
  answer's header bytes come back as they came;
- a request and a response with a stream (never content: nothing to encode), whose
  attributes are exactly those httpx's constructors set
  (``tests/client/test_front_end_conversion.py`` compares them, attribute by attribute,
  with httpx's own, so that a new httpx release that sets another fails there).
"""

from __future__ import annotations

import operator
from collections.abc import Collection
from typing import Any

import httpx

__all__ = ["decoded", "encoded", "from_bytes", "parse", "raw_headers", "request", "response"]

Triples = list[tuple[bytes, bytes, bytes]]  # httpx's Headers._list: name, lowercased name, value

_LIMIT = 512  # URLs remembered; the table starts afresh when full
_seen: dict[str, httpx.URL] = {}
_new = object.__new__


def parse(url: str) -> httpx.URL:
    """``httpx.URL(url)``; the same immutable object for the same string."""
    parsed = _seen.get(url)
    if parsed is None:
        parsed = httpx.URL(url)
        if len(_seen) >= _LIMIT:
            _seen.clear()
        _seen[url] = parsed
    return parsed


# Each header is converted at C level (``map``, ``zip``): a Python loop cost some 20 opcodes a header.
_LATIN_1 = operator.methodcaller("encode", "latin-1")


def encoded(pairs: Collection[tuple[str | bytes, str | bytes]]) -> httpx.Headers:
    """``httpx.Headers`` of ``(name, value)`` pairs, ``str`` (encoded as ``latin-1``) or
    ``bytes``, each name spelt as it was given."""
    if not pairs:
        return raw_headers([])
    names, values = zip(*pairs, strict=True)
    try:  # text, as both clients hold it
        keys = list(map(_LATIN_1, names))
        return raw_headers(list(zip(keys, map(bytes.lower, keys), map(_LATIN_1, values), strict=True)))
    except AttributeError:  # a name or value given as bytes (requests takes both): bytes have no encode
        keys = list(map(_bytes, names))
        return raw_headers(list(zip(keys, map(bytes.lower, keys), map(_bytes, values), strict=True)))


def from_bytes(pairs: Collection[tuple[bytes, bytes]]) -> httpx.Headers:
    """``httpx.Headers`` of ``(name, value)`` byte pairs (an answer's, as aiohttp's parser
    leaves them)."""
    if not pairs:
        return raw_headers([])
    names, values = zip(*pairs, strict=True)
    return raw_headers(list(zip(names, map(bytes.lower, names), values, strict=True)))


def _bytes(text: str | bytes) -> bytes:
    return text if isinstance(text, bytes) else text.encode("latin-1")


def raw_headers(triples: Triples) -> httpx.Headers:
    """``httpx.Headers`` holding ``triples`` (httpx's own list: not copied)."""
    headers: httpx.Headers = _new(httpx.Headers)
    headers._list = triples
    headers._encoding = None  # found from the bytes when first decoded, as httpx's constructor leaves it
    return headers


def request(method: str, url: httpx.URL, headers: httpx.Headers, stream: Any, extensions: dict[str, Any]) -> httpx.Request:
    """``httpx.Request(method, url, headers=headers, stream=stream, extensions=extensions)``
    for an upper-case ``method``, a parsed ``url`` and ``headers`` of this module (kept, not
    copied; ``extensions`` too)."""
    built: httpx.Request = _new(httpx.Request)
    vars(built).update(method=method, url=url, headers=headers, extensions=extensions, stream=stream)
    return built


# What httpx's Response sets the same for every answer with a stream.
_UNREAD = {"_request": None, "next_request": None, "is_closed": False, "is_stream_consumed": False,
           "default_encoding": "utf-8", "_num_bytes_downloaded": 0}  # fmt: skip


def response(status: int, headers: httpx.Headers, stream: Any, extensions: dict[str, Any]) -> httpx.Response:
    """``httpx.Response(status, headers=headers, stream=stream, extensions=extensions)``
    (``headers`` and ``extensions`` kept, not copied)."""
    built: httpx.Response = _new(httpx.Response)
    vars(built).update(_UNREAD, status_code=status, headers=headers, extensions=extensions, history=[], stream=stream)
    return built


def decoded(triples: Triples) -> list[tuple[str, str]]:
    """httpx's header triples as ``str`` pairs, each name spelt as it was given."""
    return [(name.decode("latin-1"), value.decode("latin-1")) for name, _, value in triples]
