"""The requests adapter next to a bare ``requests.Session``: what a caller of requests sees
of an answer (its raw stream, its cookies, its body) is what the bare session shows, on
the primary and after a failover alike."""

from __future__ import annotations

import gzip
import io
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from requests.adapters import HTTPAdapter
from urllib3 import Timeout

from pytest_failover import Pool
from pytest_failover.integrations.requests import FailoverAdapter

from .servers import LoopbackServer, closed_port
from .test_transport import fast

Servers = dict[str, LoopbackServer]
Sessions = dict[str, tuple[requests.Session, str]]  # name: the session, the base URL it asks for


@pytest.fixture
def sessions(servers: Servers) -> Iterator[Sessions]:
    """Three sessions that all get their answers from ``a``: ``bare`` (no adapter),
    ``primary`` (a pool whose first domain is ``a``) and ``failover`` (a pool whose first
    domain refuses connections, the URL it asks for, then ``a``). The pools read at most
    100 KiB of a body before handing it over."""
    a = servers["a"]
    dead = f"http://127.0.0.1:{closed_port()}"
    made: Sessions = {"bare": (requests.Session(), a.url())}
    for name, domains in (("primary", [a.url()]), ("failover", [dead, a.url()])):
        session = requests.Session()
        session.mount("http://", FailoverAdapter([Pool("api", domains)], fast(read_body_max_bytes=100 << 10, sticky=False)))
        made[name] = (session, domains[0])
    yield made
    for session, _ in made.values():
        session.close()


# name: the body, the answer's headers, sent chunked (no length)?
BODIES: dict[str, tuple[bytes, dict[str, str], bool]] = {
    "sized": (b"line\n" * 2000, {}, False),  # read whole in the adapter
    "chunked past the limit": (os.urandom(300 << 10), {}, True),  # read up to the limit, then streamed
    "gzip": (gzip.compress(b"line\n" * 2000), {"Content-Encoding": "gzip"}, True),
    "gzip past the limit": (gzip.compress(os.urandom(300 << 10)), {"Content-Encoding": "gzip"}, True),
}


@pytest.mark.parametrize("body", list(BODIES))
@pytest.mark.parametrize("name", ["primary", "failover"])
def test_a_streamed_answer_reads_from_raw_as_the_bare_session_does(
    sessions: Sessions, servers: Servers, name: str, body: str
) -> None:
    """``stream=True`` answers keep ``raw`` readable as bare requests leaves it: its bytes
    as they came (still compressed), ``read(n)`` n at a time, ``read(decode_content=True)``
    decoded; ``iter_content`` decoded; whether the adapter read the body whole or streams
    it past its read limit, on the primary and after a failover."""
    payload, headers, chunked = BODIES[body]
    servers["a"].set(body=payload, headers=headers, chunked=chunked)
    decoded = gzip.decompress(payload) if headers else payload
    for session, base in (sessions["bare"], sessions[name]):
        url = base + "/file"
        response = session.get(url, timeout=10, stream=True)
        assert response.raw.read(5) == payload[:5]
        assert response.raw.read() == payload[5:]
        assert session.get(url, timeout=10, stream=True).raw.read(decode_content=True) == decoded
        assert b"".join(session.get(url, timeout=10, stream=True).iter_content(1000)) == decoded
        assert session.get(url, timeout=10).content == decoded


@pytest.mark.parametrize("name", ["bare", "primary", "failover"])
def test_cookies_of_an_answer_past_the_read_limit_reach_the_jar(sessions: Sessions, servers: Servers, name: str) -> None:
    """A ``Set-Cookie`` on an answer whose body streams past the read limit is filed in the
    session's jar, as on one read whole (requests takes an answer's cookies from ``raw``)."""
    servers["a"].set(body=os.urandom(300 << 10), headers={"Set-Cookie": "sid=42; Path=/"}, chunked=True)
    session, base = sessions[name]
    assert len(session.get(base + "/login", timeout=10).content) == 300 << 10
    assert session.cookies.get("sid") == "42"


def test_an_answer_past_the_read_limit_closed_early_closes_its_connection(servers: Servers) -> None:
    """A streamed answer the caller closes after its first chunk, past the read limit,
    closes urllib3's response under it (its connection is not handed back half read) and
    the next request is answered."""
    a = servers["a"]
    a.set(body=os.urandom(300 << 10), chunked=True)
    raws: list[Any] = []

    class Recording(HTTPAdapter):
        def send(self, request: requests.PreparedRequest, *args: Any, **kwargs: Any) -> requests.Response:
            response = super().send(request, *args, **kwargs)
            raws.append(response.raw)
            return response

    adapter = FailoverAdapter([Pool("api", [a.url()])], fast(read_body_max_bytes=100 << 10), adapter=Recording())
    with requests.Session() as session:
        session.mount("http://", adapter)
        with session.get(a.url() + "/file", timeout=10, stream=True) as response:
            assert len(next(response.iter_content(1000))) == 1000
        assert raws[0].closed
        a.set(body=b"again")
        assert session.get(a.url() + "/again", timeout=10).content == b"again"


@pytest.mark.parametrize(
    "timeout",
    [-1, 0, float("nan"), True, "x", [1, 2], (1, 2, 3), (1,), (0.1, "y"), (-1, 5)],
    ids=repr,
)
def test_an_invalid_timeout_is_requests_own_error_and_sends_nothing(sessions: Sessions, servers: Servers, timeout: Any) -> None:
    """A ``timeout=`` bare requests refuses is refused with requests' own ``ValueError`` and
    message, before anything is sent: no attempt, no breaker count."""
    messages = []
    for name in ("bare", "primary"):
        session, base = sessions[name]
        with pytest.raises(ValueError, match=r"(?i)timeout|NaN") as refused:
            session.get(base + "/x", timeout=timeout)
        messages.append(str(refused.value))
    assert messages[1] == messages[0]
    assert servers["a"].total == 0
    adapter = sessions["primary"][0].get_adapter("http://")
    assert isinstance(adapter, FailoverAdapter)
    assert adapter.state().pools["api"].domains[0].consecutive_failures == 0


@pytest.mark.parametrize("failover", [False, True])
def test_a_urllib3_timeout_with_a_total_bounds_the_attempt(servers: Servers, failover: bool) -> None:
    """``urllib3.Timeout(total=...)``, which requests takes, bounds the wait for an answer
    (a slow one fails with a requests error) and lets a prompt one through."""
    a = servers["a"]
    adapter = FailoverAdapter([Pool("api", [a.url()])], fast(breaker_threshold=10))
    with requests.Session() as session:
        if failover:
            session.mount("http://", adapter)
        a.set(delay=2.0)
        with pytest.raises(requests.RequestException):
            session.get(a.url() + "/slow", timeout=Timeout(total=0.3))  # type: ignore[arg-type]  # requests takes one (HTTPAdapter.send); its stubs do not say so
        a.set()
        assert session.get(a.url() + "/x", timeout=Timeout(total=5, connect=2)).status_code == 200  # type: ignore[arg-type]  # as above


def _body(kind: str, folder: Path) -> tuple[dict[str, Any], bytes, bool]:
    """A body of one kind requests sends: its keyword arguments, bytes its request carries,
    and whether it can be sent again (a file object cannot: requests reads it as it goes)."""
    if kind == "file":
        path = folder / "upload.bin"
        path.write_bytes(b"file-bytes" * 1000)
        return {"data": path.open("rb")}, b"file-bytes" * 1000, False
    kinds: dict[str, tuple[dict[str, Any], bytes, bool]] = {
        "bytes": ({"data": b"raw-bytes"}, b"raw-bytes", True),
        "str": ({"data": "some text"}, b"some text", True),
        "form": ({"data": {"k": "v"}}, b"k=v", True),
        "json": ({"json": {"k": "v"}}, b'{"k": "v"}', True),
        "files": ({"files": {"up": ("x.txt", b"multipart-content")}}, b"multipart-content", True),
        "BytesIO": ({"data": io.BytesIO(b"in-memory file")}, b"in-memory file", False),
    }
    return kinds[kind]


@pytest.mark.parametrize("kind", ["bytes", "str", "form", "json", "files", "file", "BytesIO"])
@pytest.mark.parametrize("fault", ["refused", "reset after sending"])
def test_every_kind_of_body_moves_on_when_nothing_was_sent_and_only_a_replayable_one_after(
    servers: Servers, tmp_path: Path, kind: str, fault: str
) -> None:
    """A POST with an ``Idempotency-Key``, whatever its body: a primary that refused the
    connection got nothing, so the backup gets the whole body; one that reset after reading
    it gets it again on the backup only if it can be sent again (not a file object, which
    fails with ``AllDomainsFailed``, ``not_retryable``)."""
    a, b = servers["a"], servers["b"]
    keywords, carried, replayable = _body(kind, tmp_path)
    first = f"http://127.0.0.1:{closed_port()}" if fault == "refused" else a.url()
    a.set(reset=True)
    adapter = FailoverAdapter([Pool("api", [first, b.url()])], fast(sticky=False))
    with requests.Session() as session:
        session.mount("http://", adapter)

        def call() -> requests.Response:
            return session.post(first + "/up", timeout=10, headers={"Idempotency-Key": "k1"}, **keywords)

        if fault == "refused" or replayable:
            assert call().headers["x-served-by"] == "b"
            assert [carried in body for _, _, _, body in b.seen] == [True]
        else:
            with pytest.raises(requests.exceptions.ConnectionError, match="not_retryable"):
                call()
            assert b.total == 0
    if fault != "refused":
        assert [carried in body for _, _, _, body in a.seen] == [True]
    if isinstance(keywords.get("data"), io.IOBase):
        keywords["data"].close()
