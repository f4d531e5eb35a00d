"""The requests and aiohttp front-ends build httpx's request and response without httpx's
constructors (``integrations/_convert.py``): what they build is what the constructors
would, and what reaches the server and the caller is what the bare client sends and gets."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import aiohttp
import httpx
import pytest
import requests

from pytest_failover import Policy, Pool
from pytest_failover.integrations import _convert
from pytest_failover.integrations.aiohttp import FailoverMiddleware
from pytest_failover.integrations.requests import FailoverAdapter

from .servers import LoopbackServer, closed_port

Servers = dict[str, LoopbackServer]

PAIRS = [("Accept", "application/json"), ("X-Trace", "abc"), ("x-trace", "def"), ("User-Agent", "t/1")]


def attributes(made: object, names: object = None) -> dict[str, Any]:
    """An httpx object's attributes (those ``names`` has, when given: on the instance or
    its class), its headers as httpx's class (of which :class:`_convert.Unread` is one),
    their byte triples and their encoding."""
    found = {name: getattr(made, name) for name in vars(names)} if names is not None else dict(vars(made))
    headers = found["headers"]
    assert isinstance(headers, httpx.Headers)
    found["headers"] = (httpx.Headers, headers._list, headers.encoding)
    return found


def response_attributes(ours: httpx.Response, theirs: httpx.Response) -> tuple[dict[str, Any], dict[str, Any]]:
    """The attributes of a front-end's response (of a subclass of httpx's: those its
    constructor sets alike for every response are the class's) by the names of httpx's
    own, and those of httpx's own; ours has no other."""
    assert isinstance(ours, httpx.Response) and set(vars(ours)) <= set(vars(theirs))
    return attributes(ours, theirs), attributes(theirs)


def test_the_request_is_the_one_httpx_builds_from_the_same_arguments() -> None:
    """Every attribute httpx's ``Request(method, url, headers=, stream=, extensions=)`` sets,
    with the same value, and no other."""
    url, stream = httpx.URL("http://127.0.0.1:9/x?q=1"), httpx.ByteStream(b"{}")
    extensions: dict[str, Any] = {"timeout": {}}
    theirs = httpx.Request("POST", url, headers=PAIRS, stream=stream, extensions=extensions)
    ours = _convert.request("POST", url, PAIRS, stream, extensions)
    assert type(ours) is httpx.Request
    assert attributes(ours) == attributes(theirs)
    assert ours.headers.get_list("x-trace") == ["abc", "def"] and ours.headers["accept"] == "application/json"


def test_a_request_s_headers_are_made_when_first_read_and_say_when_they_changed() -> None:
    """A request's headers stay the client's pairs until read (most never are); every way of
    reading them gives what httpx's own give and changes nothing, and every way of changing
    them (set, remove, update, pop, set a default, clear) sets ``changed``."""
    theirs = httpx.Headers(PAIRS)
    url, stream = httpx.URL("http://127.0.0.1:9/x"), httpx.ByteStream(b"")
    for read in (
        lambda h: h.get_list("x-trace"),
        lambda h: h["Accept"],
        lambda h: h.multi_items(),
        lambda h: h.raw,
        lambda h: h.encoding,
        lambda h: dict(h),
        lambda h: h.copy() == theirs,
        lambda h: "user-agent" in h,
        lambda h: len(h),
    ):
        headers = _convert.request("GET", url, PAIRS, stream, {}).headers
        assert isinstance(headers, _convert.Unread) and "_list" not in vars(headers)
        assert read(headers) == read(theirs) and headers._list == theirs._list and not headers.changed
    with pytest.raises(AttributeError):
        getattr(headers, "missing")  # noqa: B009  # a name it lacks: only _list is made when first read
    changes: tuple[Callable[[httpx.Headers], object], ...] = (
        lambda h: h.__setitem__("traceparent", "00-1-2-01"),
        lambda h: h.__setitem__("Accept", "text/plain"),
        lambda h: h.__delitem__("x-trace"),
        lambda h: h.update({"X-New": "1"}),
        lambda h: h.pop("accept"),
        lambda h: h.setdefault("X-Other", "2"),
        lambda h: h.clear(),
    )
    for change in changes:
        headers = _convert.request("GET", url, PAIRS, stream, {}).headers
        assert isinstance(headers, _convert.Unread) and not headers.changed
        change(headers)
        assert headers.changed and headers._list != theirs._list


def test_the_response_is_the_one_httpx_builds_from_the_same_arguments() -> None:
    """Every attribute httpx's ``Response(status, headers=, stream=, extensions=)`` sets, with
    the same value, and no other; it reads as httpx's does."""
    raw = [(name.encode(), value.encode()) for name, value in PAIRS]
    stream = httpx.ByteStream(b"{}")
    theirs = httpx.Response(503, headers=raw, stream=stream, extensions={"k": 1})
    ours = _convert.response(503, _convert.from_bytes(raw), stream, {"k": 1})
    mine, expected = response_attributes(ours, theirs)
    assert mine == expected
    assert ours.read() == b"{}" and ours.headers.get_list("X-Trace") == ["abc", "def"]
    assert ours.is_closed and ours.is_stream_consumed and ours.num_bytes_downloaded == 2
    again = _convert.response(503, _convert.from_bytes(raw), httpx.ByteStream(b"{}"), {})  # reading one changed no other
    assert attributes(again, theirs) == attributes(httpx.Response(503, headers=raw, stream=again.stream))


def test_a_response_with_its_content_is_the_one_httpx_reads_from_the_same_arguments() -> None:
    """Every attribute httpx's ``Response(status, headers=, stream=, extensions=)`` holds once
    ``read()``, with the same value, but its stream (nothing iterates it again) and its
    decoder (made only to read); it reads as httpx's does, and cannot be streamed again."""
    raw = [(name.encode(), value.encode()) for name, value in PAIRS]
    theirs = httpx.Response(200, headers=raw, stream=httpx.ByteStream(b"{}"), extensions={"k": 1})
    theirs.read()
    ours = _convert.held(200, raw, {"k": 1}, b"{}")
    assert ours.headers.encoding == theirs.headers.encoding  # found as httpx's read() finds it
    del vars(theirs)["_decoder"]
    mine, expected = response_attributes(ours, theirs)
    assert mine.pop("stream") is _convert.READ is not expected.pop("stream")
    assert mine == expected
    assert (ours.read(), ours.content, ours.json()) == (b"{}", b"{}", {})
    with pytest.raises(httpx.StreamConsumed):
        list(ours.iter_raw())


def test_the_headers_of_a_held_answer_are_made_when_first_read_and_read_as_httpx_s() -> None:
    """The headers of a response whose body the client holds whole stay the answer's byte
    pairs until read (most never are); every way of reading them gives what httpx's own give."""
    raw = [(name.encode(), value.encode()) for name, value in PAIRS]
    theirs = httpx.Headers(raw)
    for read in (
        lambda h: h.get_list("x-trace"),
        lambda h: h["Accept"],
        lambda h: h.multi_items(),
        lambda h: h.raw,
        lambda h: dict(h),
        lambda h: h.copy() == theirs,
    ):
        headers = _convert.held(200, raw, {}, b"").headers
        assert isinstance(headers, _convert.Unread) and "_list" not in vars(headers)
        assert read(headers) == read(theirs) and headers._list == theirs._list


def test_headers_keep_bytes_and_spelling_and_round_trip_latin_1() -> None:
    """``str`` and ``bytes`` pairs alike become httpx's triples, names spelt as given; text
    outside ASCII is ``latin-1``, as both clients send it, and comes back the same."""
    mixed: list[tuple[str | bytes, str | bytes]] = [("X-A", b"1"), (b"x-B", "2"), ("X-Name", "caf\xe9")]
    headers = _convert.encoded(mixed)
    assert headers._list == [(b"X-A", b"x-a", b"1"), (b"x-B", b"x-b", b"2"), (b"X-Name", b"x-name", b"caf\xe9")]
    assert _convert.decoded(headers._list) == [("X-A", "1"), ("x-B", "2"), ("X-Name", "caf\xe9")]
    assert headers["x-name"] == "caf\xe9"  # httpx finds the encoding from the bytes, as for its own
    assert _convert.encoded([])._list == _convert.from_bytes(())._list == httpx.Headers([])._list == []
    with pytest.raises(UnicodeEncodeError):  # neither client can send it either
        _convert.encoded([("X-Sign", "\u20ac")])


def bare_and_failover_requests(a: LoopbackServer, sent: dict[str, str]) -> tuple[requests.Response, requests.Response]:
    """The same GET through bare requests, then through a ``FailoverAdapter`` to a first
    domain that refuses (the answer comes from the second: the request was rewritten)."""
    with requests.Session() as bare:
        plain = bare.get(a.url() + "/x", headers=sent, timeout=5)
    refusing = f"http://127.0.0.1:{closed_port()}"
    with requests.Session() as session:
        session.mount("http://", FailoverAdapter([Pool("api", [refusing, a.url()])]))
        moved = session.get(refusing + "/x", headers=sent, timeout=5)
    return plain, moved


def test_requests_sends_and_hands_over_what_bare_requests_does(servers: Servers) -> None:
    """Headers outside ASCII (``latin-1``) go out as requests sends them, on the first
    domain and on the next; the answer's headers and body reach the caller as requests
    gives them (an answer's ``latin-1`` header once raised ``UnicodeEncodeError``)."""
    a = servers["a"]
    a.set(headers={"X-Name": "caf\xe9"}, body=b'{"ok": 1}')
    sent = {"X-Sent": "na\xefve", "Accept": "application/json"}
    plain, moved = bare_and_failover_requests(a, sent)
    result = moved.failover  # type: ignore[attr-defined]  # the adapter's documented attribute
    assert result.domain == a.url() and len(result.attempts) == 2
    assert (moved.status_code, moved.content, moved.headers["X-Name"]) == (200, b'{"ok": 1}', "caf\xe9")
    assert dict(moved.headers) == dict(plain.headers)
    assert [seen[2]["X-Sent"] for seen in a.seen] == ["na\xefve", "na\xefve"]
    assert a.seen[1][2]["Host"] == a.url().removeprefix("http://")  # the attempt's own domain


def test_a_gzip_answer_reaches_a_requests_caller_decoded(servers: Servers) -> None:
    """A ``Content-Encoding`` body read by the adapter is decoded for the caller, as
    requests decodes it."""
    import gzip

    a = servers["a"]
    a.set(headers={"Content-Encoding": "gzip"}, body=gzip.compress(b'{"ok": 1}'))
    plain, moved = bare_and_failover_requests(a, {})
    assert moved.content == plain.content == b'{"ok": 1}'


def test_aiohttp_sends_and_hands_over_what_bare_aiohttp_does(servers: Servers) -> None:
    """Through ``FailoverMiddleware`` (the first domain refusing) a header goes out, and the
    answer's headers and body come back, as with a bare session."""
    a = servers["a"]
    a.set(headers={"X-Name": "caf\xe9"}, body=b'{"ok": 1}')
    sent = {"X-Sent": "naive", "Accept": "application/json"}

    async def fetch(middlewares: tuple[Any, ...], url: str) -> tuple[int, dict[str, str], bytes, Any]:
        async with aiohttp.ClientSession(middlewares=middlewares) as session, session.get(url, headers=sent) as response:
            body = await response.read()
            return response.status, dict(response.headers), body, getattr(response, "failover", None)

    refusing = f"http://127.0.0.1:{closed_port()}"
    failover = FailoverMiddleware([Pool("api", [refusing, a.url()])], Policy())
    plain = asyncio.run(fetch((), a.url() + "/x"))
    moved = asyncio.run(fetch((failover,), refusing + "/x"))
    assert moved[3].domain == a.url() and len(moved[3].attempts) == 2
    assert moved[:3] == plain[:3]
    assert [seen[2]["X-Sent"] for seen in a.seen] == ["naive", "naive"]
    assert a.seen[1][2]["Host"] == a.url().removeprefix("http://")


@pytest.mark.parametrize("big", [False, True], ids=["held", "read by the exchange"])
@pytest.mark.parametrize("moves", [False, True], ids=["first domain", "next domain"])
def test_an_aiohttp_answer_streams_to_the_caller_as_from_a_bare_session(servers: Servers, moves: bool, big: bool) -> None:
    """An answer reaches the caller with its ``content`` to stream, as a bare session's:
    one the exchange needed nothing more of (it came whole with its head) untouched, one
    the exchange read (too long to come with its head) given back."""
    a = servers["a"]
    body = bytes(range(256)) * 2400 if big else b'{"ok": 1}'  # 600 KiB, read within the limit
    a.set(body=body)

    async def fetch(middlewares: tuple[Any, ...], url: str) -> tuple[bytes, Any]:
        async with aiohttp.ClientSession(middlewares=middlewares) as session, session.get(url) as response:
            streamed = b"".join([chunk async for chunk in response.content.iter_any()])
            return streamed, getattr(response, "failover", None)

    refusing = f"http://127.0.0.1:{closed_port()}"
    failover = FailoverMiddleware([Pool("api", [refusing, a.url()] if moves else [a.url()])], Policy())
    plain = asyncio.run(fetch((), a.url() + "/x"))
    mine = asyncio.run(fetch((failover,), (refusing if moves else a.url()) + "/x"))
    assert plain[0] == mine[0] == body
    assert mine[1].domain == a.url() and len(mine[1].attempts) == (2 if moves else 1)


@pytest.mark.parametrize("decompress", [True, False])
def test_a_gzip_answer_reaches_an_aiohttp_caller_as_from_a_bare_session(servers: Servers, decompress: bool) -> None:
    """A ``Content-Encoding`` body reaches the caller as a bare session gives it: decoded
    (its header kept) with ``auto_decompress``, the encoded bytes without."""
    import gzip

    a = servers["a"]
    a.set(headers={"Content-Encoding": "gzip"}, body=gzip.compress(b'{"ok": 1}'))

    async def fetch(middlewares: tuple[Any, ...]) -> tuple[bytes, str]:
        session = aiohttp.ClientSession(middlewares=middlewares, auto_decompress=decompress)
        async with session, session.get(a.url() + "/x") as response:
            return await response.read(), response.headers["Content-Encoding"]

    plain = asyncio.run(fetch(()))
    mine = asyncio.run(fetch((FailoverMiddleware([Pool("api", [a.url()])], Policy()),)))
    assert mine == plain and (plain[0] == b'{"ok": 1}') is decompress


def test_a_prepared_request_whose_headers_are_a_plain_dict_goes_out(servers: Servers) -> None:
    """A ``PreparedRequest`` whose headers were replaced by a plain ``dict`` (not requests'
    ``CaseInsensitiveDict``) is sent with them."""
    a = servers["a"]
    with requests.Session() as session:
        session.mount("http://", FailoverAdapter([Pool("api", [a.url()])]))
        prepared = session.prepare_request(requests.Request("GET", a.url() + "/x"))
        prepared.headers = {"X-Plain": "1"}  # type: ignore[assignment]  # a mapping, as requests sends one
        assert session.send(prepared, timeout=5).status_code == 200
    assert a.seen[-1][2]["X-Plain"] == "1"


def test_each_distinct_header_is_encoded_once_and_the_table_stays_bounded() -> None:
    """A header sent again comes back as the very triple made the first time (no bytes made
    again); a header whose value changes each time is encoded each time, and the table of
    them never grows past its size."""
    first, again = _convert.encoded(PAIRS)._list, _convert.encoded(list(PAIRS))._list
    assert first == again and all(a is b for a, b in zip(first, again, strict=True))
    size = _convert._HEADERS
    for n in range(size + 10):
        value = f"id-{n}"
        assert _convert.encoded([("X-Request-Id", value)])._list == [(b"X-Request-Id", b"x-request-id", value.encode())]
    table: dict[object, object] = _convert._triple.__self__  # type: ignore[attr-defined]  # the bound table's dict
    assert 0 < len(table) <= size
    token = "t" * (_convert._LONG + 1)  # too long to keep: encoded every time
    assert _convert.encoded([("Authorization", token)])._list == [(b"Authorization", b"authorization", token.encode())]
    assert ("Authorization", token) not in table


def test_a_yarl_url_is_parsed_as_its_string_is_and_remembered_by_the_object() -> None:
    """aiohttp's ``URL`` becomes the ``httpx.URL`` of its string; the same object, or an equal
    one made anew, gives the same parse again, another URL its own."""
    from yarl import URL

    one, other = URL("http://127.0.0.1:9/x?q=1#f"), URL("http://127.0.0.1:9/y")
    parsed = _convert.parse_native(one)
    assert parsed == httpx.URL(str(one)) and parsed.fragment == "f"
    assert _convert.parse_native(one) is parsed
    assert _convert.parse_native(URL("http://127.0.0.1:9/x").with_query(q=1).with_fragment("f")) is parsed
    assert _convert.parse_native(other) == httpx.URL("http://127.0.0.1:9/y") != parsed


def test_the_tables_of_parsed_urls_start_afresh_when_full() -> None:
    """Each table of parsed URLs keeps at most 512 (an application that makes a new URL per
    request does not grow it): the next one empties it."""
    from yarl import URL

    strings = [f"http://127.0.0.1:9/many/{i}" for i in range(513)]
    tables: list[tuple[Callable[[Any], httpx.URL], list[Any]]] = [
        (_convert.parse, strings),
        (_convert.parse_native, [URL(u) for u in strings]),
    ]
    for parse, keys in tables:
        table = parse.__self__  # type: ignore[attr-defined]  # the table's own __getitem__
        for key in keys:
            assert parse(key) == httpx.URL(str(key))
        assert 1 <= len(table) <= 512 and parse(keys[-1]) is parse(keys[-1])


