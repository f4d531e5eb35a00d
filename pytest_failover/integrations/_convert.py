"""What the front-ends convert on every request: their client's URL, headers, request and
response into httpx's, and back.

The request path speaks httpx, so each request of the requests adapter and the aiohttp
middleware becomes an ``httpx.Request``, and each answer an ``httpx.Response``. Built
through their constructors, those two cost more than the rest of a front-end's work: the
constructors parse again what the client parsed already (each header name and value
checked and encoded one call at a time, a URL split up). Here they are built as httpx's
constructors would leave them for the same arguments, from what the client holds:

- a URL, parsed once per string and remembered (an application calls the same URLs
  again and again), and aiohttp's yarl ``URL`` by the object itself;
- headers, straight into httpx's own list of ``(name, lowercased name, value)`` byte
  triples (the list the request path already reads, ``Headers._list``), encoded as
  ``latin-1``: the encoding both clients send header text in and decode it from, so an
  answer's header bytes come back as they came; each distinct header is encoded once
  and remembered, as URLs are; a request's, and those of an answer whose body came
  whole with its head (:func:`held`), only when first read (:class:`Unread`), as most
  are never read;
- a request and a response with a stream (never content: nothing to encode), whose
  attributes are exactly those httpx's constructors set
  (``tests/client/test_front_end_conversion.py`` compares them, attribute by attribute,
  with httpx's own, so that a new httpx release that sets another fails there).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import httpx

__all__ = ["Unread", "decoded", "encoded", "from_bytes", "held", "parse", "parse_native", "request", "response"]

Triples = list[tuple[bytes, bytes, bytes]]  # httpx's Headers._list: name, lowercased name, value

_LIMIT = 512  # URLs remembered; a table starts afresh when full
_new = object.__new__


class _Parsed(dict[str, httpx.URL]):
    """URL string -> ``httpx.URL(string)``, each parsed once: an application calls the same
    URLs again and again. A hit is a C-level dict lookup (no Python frame); a miss
    (``__missing__``) parses the string and remembers it; at :data:`_LIMIT` URLs the table
    starts afresh."""

    def __missing__(self, url: str) -> httpx.URL:
        parsed = httpx.URL(url)
        if len(self) >= _LIMIT:
            self.clear()
        self[url] = parsed
        return parsed


parse: Callable[[str], httpx.URL] = _Parsed().__getitem__
"""``httpx.URL(url)``; the same immutable object for the same string."""


class _ParsedNative(dict[Any, httpx.URL]):
    """A client's own immutable URL object (yarl's ``URL``) -> ``parse(str(url))``,
    remembered by the object, so that it is not made a string again for every request
    (yarl's ``__str__`` is some 70 opcodes; its ``__hash__``, which the lookup calls, keeps
    its hash: 14). aiohttp hands the same object for the same string (from yarl's cache);
    an equal one made anew (a query added per request) finds the same entry. As
    :class:`_Parsed` otherwise."""

    def __missing__(self, url: object) -> httpx.URL:
        parsed = parse(str(url))
        if len(self) >= _LIMIT:
            self.clear()
        self[url] = parsed
        return parsed


parse_native: Callable[[object], httpx.URL] = _ParsedNative().__getitem__
"""``parse(str(url))`` for a client's own immutable, hashable URL object."""


class _Triples(dict[tuple[Any, Any], tuple[bytes, bytes, bytes]]):
    """``(name, value)`` -> httpx's ``(name, lowercased name, value)`` byte triple, each
    made once: an application sends the same headers again and again, and a server
    answers with the same ones. A hit is a C-level dict lookup (``map`` over the pairs),
    with no bytes made; a miss (``__missing__``) encodes the pair, ``str`` as ``latin-1``
    (``bytes`` are kept), and remembers it unless its value is longer than
    :data:`_LONG` (a token, a cookie: rarely sent twice, and the table would keep it).
    At :data:`_HEADERS` pairs the table starts afresh, as :func:`parse`'s does: a header
    whose value changes with every request costs a miss each time, and the table holds
    at most 460 KiB (512 pairs whose values are all at the limit, measured)."""

    def __missing__(self, pair: tuple[Any, Any]) -> tuple[bytes, bytes, bytes]:
        name, value = pair
        key = name if isinstance(name, bytes) else name.encode("latin-1")
        triple = (key, key.lower(), value if isinstance(value, bytes) else value.encode("latin-1"))
        if len(value) <= _LONG:
            if len(self) >= _HEADERS:
                self.clear()
            self[pair] = triple
        return triple


_HEADERS = 512  # header pairs remembered
_LONG = 256  # the longest value remembered
_triple = _Triples().__getitem__


class _Headers(httpx.Headers):
    """httpx's ``Headers`` as its constructor leaves them: their encoding (None: found from
    the bytes when first decoded) is the class's until then. Made empty (``_Headers()``),
    then filled attribute by attribute."""

    _encoding = None
    # The class's call makes an empty instance, in C alone: cheaper than
    # ``object.__new__(cls)``, whose wrapper slices its arguments into a new tuple (250
    # instructions an object, callgrind).
    __init__ = object.__init__


def encoded(pairs: Iterable[tuple[str | bytes, str | bytes]]) -> httpx.Headers:
    """``httpx.Headers`` of ``(name, value)`` pairs, ``str`` (encoded as ``latin-1``) or
    ``bytes`` (an answer's, as aiohttp's parser leaves them), each name spelt as it was
    given."""
    headers: httpx.Headers = _Headers()
    headers._list = list(map(_triple, pairs))  # httpx's own list of triples
    return headers


from_bytes = encoded  # an answer's ``(name, value)`` byte pairs: the same table keeps them as they are


class Unread(_Headers):
    """``encoded(pairs)``, made when first read: ``_list``, which every method of httpx's
    ``Headers`` reads, is made from ``pairs`` then (a view of the client's own headers, as
    a front-end gives it: they are as the client holds them then). On most requests the
    exchange reads nothing of the request's headers (a POST's idempotency key, the stale
    cache's key, a retry elsewhere's ``Host`` and trace context do), nor of an answer's
    it classifies by its status alone, whose body came whole (:func:`held`).

    Made by :func:`request` and :func:`held` (httpx's constructor would read the pairs).
    ``changed`` is set by any change to them (a header set, removed, updated): until then
    the client's own request goes out as it is (the front-ends' inner transports ask before
    each attempt; another ``Headers``, a hedge's copy, has no flag: it goes out as changed)."""

    changed = False
    _pairs: Iterable[tuple[Any, Any]]

    def __getattr__(self, name: str) -> Any:
        if name != "_list":
            raise AttributeError(name)
        self._list = triples = list(map(_triple, self._pairs))
        return triples

    def __setitem__(self, key: str, value: str) -> None:
        self.changed = True
        super().__setitem__(key, value)

    def __delitem__(self, key: str) -> None:
        self.changed = True
        super().__delitem__(key)

    def update(self, headers: Any = None) -> None:  # type: ignore[override]  # httpx's own signature (its Headers ignores the same)
        self.changed = True
        super().update(headers)


# The request is built attribute by attribute, in the order httpx's constructor sets them:
# the instance then keeps its attributes as httpx's own do (CPython's values shared with
# the class's keys), with no dict made for them. ``vars(built).update(...)`` made two
# dicts (the keywords, the instance's own): 7,900 and 13,100 instructions against 4,600
# and 6,300.


def request(method: str, url: httpx.URL, pairs: Iterable[tuple[Any, Any]], stream: Any, extensions: dict[str, Any]) -> httpx.Request:
    """``httpx.Request(method, url, headers=pairs, stream=stream, extensions=extensions)``
    for an upper-case ``method``, a parsed ``url`` and the ``(name, value)`` pairs of the
    client's headers as :func:`encoded` takes them (made when first read:
    :class:`Unread`); ``extensions`` kept, not copied."""
    headers: Unread = Unread()
    headers._pairs = pairs
    built: httpx.Request = _new(httpx.Request)
    built.method = method
    built.url = url
    built.headers = headers
    built.extensions = extensions
    built.stream = stream
    return built


# The responses are the front-ends' own (their client's response goes to the caller; an
# httpx one never does: the stale cache keeps its status, headers and bytes), so they are
# of httpx's class with the values its constructor sets alike for every response held by
# the class: each sets the rest, in the constructor's order (5 and 6 attributes, not 11
# and 12: 21 and 30 fewer opcodes a request for requests and aiohttp, every frame counted).


class _Streamed(httpx.Response):
    """``httpx.Response(status, headers=, stream=, extensions=)``: its body still to read.
    Made empty, as :class:`_Headers` are."""

    __init__ = object.__init__

    _request = None
    next_request = None
    is_closed = is_stream_consumed = False
    default_encoding = "utf-8"
    _num_bytes_downloaded = 0


READ = httpx.ByteStream(b"")  # the stream of a response read already: nothing iterates it again (httpx
# raises StreamConsumed), so one empty stream serves them all


class _Held(_Streamed):
    """The same, ``read()`` already: its body in ``_content``, its stream :data:`READ`."""

    is_closed = is_stream_consumed = True
    stream = READ


def response(status: int, headers: httpx.Headers, stream: Any, extensions: dict[str, Any]) -> httpx.Response:
    """``httpx.Response(status, headers=headers, stream=stream, extensions=extensions)``
    (``headers`` and ``extensions`` kept, not copied). httpx makes a decoder only when it
    reads: there is none."""
    built: _Streamed = _Streamed()
    built.status_code = status
    built.headers = headers
    built.extensions = extensions
    built.history = []
    built.stream = stream
    return built


def held(status: int, pairs: Iterable[tuple[bytes, bytes]], extensions: dict[str, Any], content: bytes) -> httpx.Response:
    """``response(status, from_bytes(pairs), READ, extensions)`` as httpx's ``read()``
    leaves it, holding ``content``: the body the client holds whole already (decoded:
    ``pairs`` name no encoding). The exchange then reads nothing, as of an in-memory httpx
    response; its headers are made when first read (:class:`Unread`)."""
    headers: Unread = Unread()
    headers._pairs = pairs
    built: _Held = _Held()
    built.status_code = status
    built.headers = headers
    built.extensions = extensions
    built.history = []
    built._num_bytes_downloaded = len(content)
    built._content = content
    return built


def decoded(triples: Triples) -> list[tuple[str, str]]:
    """httpx's header triples as ``str`` pairs, each name spelt as it was given."""
    return [(name.decode("latin-1"), value.decode("latin-1")) for name, _, value in triples]
