"""The poller: fetch the signed control document, apply each newer one.

Rules and theory of operation
-----------------------------
One poll is one GET of the control URL with the poller's own small httpx client
(never the failover transport it controls), then a verdict on the answer. Both
halves are written once:

- ``_Exchange`` is the fetch without I/O: the deadline, the status, the body under
  its size cap, and what a failure was. The sync shell (``poll_once``) and the async
  shell (``poll_once_async``) make the same calls on it in the same order; they only
  differ in how they wait.
- ``ControlPoller._accept`` judges the outcome: verify, compare with the version in
  force, hand to the target. Anything wrong keeps the last good state.

The *whole* exchange (connect, TLS, headers and body) is bounded by ``timeout``.
httpx bounds each read, so a server that trickles one byte per read would otherwise
hold a poll for ever. Async: the exchange runs inside ``anyio.fail_after``. Sync: a
watchdog timer shuts down the connection's socket at the deadline, which wakes a
blocked read at once; each poll uses a fresh connection (polls are seconds apart) so
the watchdog always knows the socket. Between chunks the deadline is checked too.

After ``n`` failed polls in a row the next one waits ``interval`` plus an
``ExponentialBackoff`` delay (full jitter, base ``interval``), never more than
``max_backoff``; a good poll (even "same document again") resets the streak.
"""

from __future__ import annotations

import contextlib
import logging
import math
import random
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol

from .._exceptions import ControlError
from .._fork import renew_in_child
from .._lib import client_library
from .._policy import ExponentialBackoff
from ._document import ControlDocument
from ._jws import CONTENT_TYPE, MAX_DOCUMENT_BYTES, verify_document
from ._keys import ControlKey, verifying_keys

if TYPE_CHECKING:
    import ssl
    from collections.abc import Sequence

    import httpx
else:
    httpx = client_library()  # httpx, or httpx2 (the same API) when only it is installed

__all__ = ["ControlPoller", "ControlTarget"]

logger = logging.getLogger("pytest_failover")

# The body is judged, never the Content-Type: a document served as application/jose (the
# agent's), application/jwt or application/json (older agents, static hosting) is read alike.
_HEADERS = {"Accept": f"{CONTENT_TYPE}, application/jwt, application/json;q=0.5", "Accept-Encoding": "identity"}
_MAX_STREAK = 64  # 2**64 intervals is longer than any max_backoff: stop the exponent growing


class ControlTarget(Protocol):
    """What a poller applies documents to (``FailoverTransport`` and its async twin)."""

    def apply_control(self, doc: ControlDocument) -> None: ...


class _PollFailure(Exception):
    """A poll failed before there was a document to judge."""


@dataclass(slots=True)
class _Fetched:
    """What one fetch produced: a status and body, or why there is none."""

    status: int | None = None
    body: bytes = b""
    error: str | None = None


@dataclass(slots=True)
class _Exchange:
    """One GET of the control URL, without I/O.

    The shells call ``timeout()`` for the request, ``response(status, length)``
    once the headers are in (False: do not read the body), ``chunk(data)`` per body
    chunk, and end with ``done()``, ``failed(exc)`` or ``timed_out()``.
    """

    seconds: float
    monotonic: Callable[[], float]
    deadline: float = 0.0
    status: int | None = None
    body: bytearray = field(default_factory=bytearray)

    def __post_init__(self) -> None:
        self.deadline = self.monotonic() + self.seconds

    def remaining(self) -> float:
        """Seconds left; ``_PollFailure`` once the deadline has passed."""
        left = self.deadline - self.monotonic()
        if left <= 0:
            raise _PollFailure(self._late())
        return left

    def timeout(self) -> httpx.Timeout:
        """Per-operation timeouts for httpx: none longer than what is left of the whole."""
        return httpx.Timeout(self.remaining())

    def response(self, status: int, length: str | None) -> bool:
        """Headers are in: True if the body is worth reading."""
        self.status = status
        if status != 200:
            return False
        if length is not None and length.isdigit() and (len(length) > 12 or int(length) > MAX_DOCUMENT_BYTES):
            raise _PollFailure(f"response is larger than {MAX_DOCUMENT_BYTES} bytes (Content-Length {length[:20]})")
        return True

    def chunk(self, data: bytes) -> None:
        """One more piece of the body: under the size cap and before the deadline, or fail."""
        self.body += data
        if len(self.body) > MAX_DOCUMENT_BYTES:
            raise _PollFailure(f"response is larger than {MAX_DOCUMENT_BYTES} bytes")
        self.remaining()

    def done(self) -> _Fetched:
        return _Fetched(self.status, bytes(self.body))

    def failed(self, exc: Exception) -> _Fetched:
        """The I/O raised ``exc``: a timeout if the deadline has passed, else a fetch failure."""
        if isinstance(exc, _PollFailure):
            return _Fetched(error=str(exc))
        if self.monotonic() >= self.deadline or isinstance(exc, TimeoutError):
            return self.timed_out()
        return _Fetched(error=f"fetch failed: {type(exc).__name__}: {exc}")

    def timed_out(self) -> _Fetched:
        return _Fetched(error=self._late())

    def _late(self) -> str:
        got = "" if self.status is None else f" (HTTP {self.status}, {len(self.body)} bytes read)"
        return f"fetch timed out: no complete answer within {self.seconds:g} s{got}"


class _Watchdog:
    """Shuts down the sockets of one sync exchange when its deadline passes.

    httpcore reports each network stream it opens through the ``trace`` request
    extension; at the deadline the timer shuts their sockets down (``shutdown``, not
    ``close``: the reading thread still owns the descriptor), which makes a blocked
    ``recv`` return at once.
    """

    def __init__(self, seconds: float) -> None:
        self._streams: list[Any] = []
        self._lock = threading.Lock()
        self._finished = False
        #: True once the deadline passed and the sockets were shut down
        self.fired = False
        self._timer = threading.Timer(max(seconds, 0.0), self._fire)
        self._timer.daemon = True

    def trace(self, event: str, info: dict[str, Any]) -> None:
        """The httpcore trace hook: remember every stream a connect or TLS step returned."""
        if event.endswith((".connect_tcp.complete", ".start_tls.complete")):
            stream = info.get("return_value")
            if stream is not None:
                with self._lock:
                    self._streams.append(stream)

    def _fire(self) -> None:
        with self._lock:
            if self._finished:
                return
            self.fired = True
            for stream in self._streams:
                sock = stream.get_extra_info("socket")
                if isinstance(sock, socket.socket):
                    # socket.socket's own shutdown: an SSLSocket's would drop its TLS state
                    # under the reading thread. OSError: already closed, nobody waits on it.
                    with contextlib.suppress(OSError):
                        socket.socket.shutdown(sock, socket.SHUT_RDWR)

    def __enter__(self) -> _Watchdog:
        self._timer.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        with self._lock:
            self._finished = True
        self._timer.cancel()


def _redact(url: str) -> str:
    """``url`` without credentials, query or fragment, for log lines."""
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL:
        return "<invalid url>"
    return str(parsed.copy_with(userinfo=b"", query=None, fragment=None))


def _seconds(name: str, value: float, *, allow_zero: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be a number of seconds, got {type(value).__name__}")
    if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        kind = "non-negative" if allow_zero else "positive"
        raise ValueError(f"{name} must be a {kind} number of seconds, got {value!r}")
    return float(value)


class ControlPoller:
    """Fetch a signed control document from ``url`` and apply new ones to ``target``.

    ``key`` is the ``ControlKey`` that verifies documents (``load_key(path)``; for
    EdDSA the public key), or a sequence of them during a key rotation; ``hmac_key``
    is the shorthand for an HS256 secret as raw bytes.

    A document is applied when it verifies, is newer than the last one applied and
    the target accepts it. Anything else (network error, timeout, HTTP status other
    than 200, bad signature, stale, expired, unknown pool ...) keeps the last good
    state, is logged at WARNING on logger ``pytest_failover`` and counted in
    ``failures`` / ``consecutive_failures``; polling then backs off.

    Sync: ``poll_once()`` or ``start()``/``stop()`` (a daemon thread; also a context
    manager). Async: ``await poll_once_async()`` or ``await run()`` (until
    cancelled), then ``await aclose()``.
    """

    def __init__(
        self,
        url: str,
        target: ControlTarget,
        *,
        key: ControlKey | Sequence[ControlKey] | None = None,
        hmac_key: bytes | None = None,
        interval: float = 30.0,
        max_backoff: float = 300.0,
        timeout: float = 5.0,
        max_skew: float = 30.0,
        verify: ssl.SSLContext | str | bool = True,
        clock: Callable[[], float] = time.time,
        rng: Callable[[], float] = random.random,
    ) -> None:
        url_obj = httpx.URL(url)
        if url_obj.scheme not in ("http", "https"):
            raise ValueError(f"control url {url!r}: scheme must be http or https")
        if not callable(getattr(target, "apply_control", None)):
            raise TypeError("target must have an apply_control(doc) method")
        self.url = url
        self.target = target
        self.interval = _seconds("interval", interval)
        self.max_backoff = _seconds("max_backoff", max_backoff)
        self.timeout = _seconds("timeout", timeout)
        self.max_skew = _seconds("max_skew", max_skew, allow_zero=True)
        self._keys = verifying_keys(key, hmac_key)
        self._backoff = ExponentialBackoff(
            base=self.interval, cap=max(self.max_backoff, self.interval)
        )
        self._verify_tls = verify
        self._clock = clock
        self._rng = rng
        self._safe_url = _redact(url)
        self._lock = threading.Lock()
        self._client_lock = threading.Lock()
        renew_in_child(self, ControlPoller._forked)
        self._client: httpx.Client | None = None
        self._async_client: httpx.AsyncClient | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        #: the last document applied (``None`` until one is)
        self.document: ControlDocument | None = None
        #: polls that failed, in total and in a row
        self.failures = 0
        self.consecutive_failures = 0
        #: why the last poll failed (``None`` after a good poll)
        self.last_error: str | None = None

    @property
    def version(self) -> int | None:
        """The version of the last document applied."""
        return None if self.document is None else self.document.version

    def next_delay(self) -> float:
        """Seconds to wait before the next poll, given the failures in a row so far."""
        streak = min(self.consecutive_failures, _MAX_STREAK)
        extra = self._backoff.delay(streak, self._rng)
        return min(self.interval + extra, max(self.max_backoff, self.interval))

    # -- the shared, I/O-free halves

    def _exchange(self) -> _Exchange:
        return _Exchange(self.timeout, time.monotonic)

    def _client_options(self) -> dict[str, Any]:
        return {
            "verify": self._verify_tls,
            "follow_redirects": False,
            # a fresh connection per poll: the sync watchdog must see every socket
            "limits": httpx.Limits(max_keepalive_connections=0),
        }

    def _request(self, client: httpx.Client | httpx.AsyncClient, exchange: _Exchange, **extensions: Any) -> httpx.Request:
        timeout = exchange.timeout()
        return client.build_request(
            "GET",
            self.url,
            headers=_HEADERS,
            timeout=timeout,
            extensions=extensions,
        )

    def _accept(self, fetched: _Fetched) -> bool:
        with self._lock:
            try:
                if fetched.error is not None:
                    raise _PollFailure(fetched.error)
                if fetched.status != 200:
                    raise _PollFailure(f"HTTP {fetched.status}")
                doc = verify_document(
                    fetched.body, self._keys, now=self._clock(), max_skew=self.max_skew
                )
                current = self.document
                if current is not None and doc.version == current.version and doc.disabled == current.disabled:
                    self._succeeded()
                    return False
                if current is not None and doc.version <= current.version:
                    raise ControlError(
                        f"document version {doc.version} is not newer than version {current.version} in force",
                        reason="stale_version",
                    )
                self.target.apply_control(doc)
            except (ControlError, _PollFailure) as exc:
                self._failed(str(exc))
                return False
            except Exception as exc:  # a target bug must not kill the poller
                self._failed(f"{type(exc).__qualname__}: {exc}")
                return False
            self.document = doc
            self._succeeded()
            logger.info(
                "control document version %d from %s applied: %s",
                doc.version,
                self._safe_url,
                {name: sorted(urls) for name, urls in sorted(doc.disabled.items())}
                or "nothing disabled",
            )
            return True

    def _succeeded(self) -> None:
        self.consecutive_failures = 0
        self.last_error = None

    def _failed(self, why: str) -> None:
        self.failures += 1
        self.consecutive_failures += 1
        self.last_error = why
        kept = "none" if self.document is None else str(self.document.version)
        logger.warning(
            "control document from %s rejected: %s; keeping version %s (%d failure(s) in a row)",
            self._safe_url,
            why,
            kept,
            self.consecutive_failures,
        )

    # -- sync shell

    def _sync_client(self) -> httpx.Client:
        with self._client_lock:
            if self._client is None:
                self._client = httpx.Client(**self._client_options())
            return self._client

    def _fetch(self) -> _Fetched:
        client = self._sync_client()  # before the clock starts: building TLS contexts is slow
        exchange = self._exchange()
        watchdog = _Watchdog(exchange.remaining())
        try:
            with watchdog:
                response = client.send(self._request(client, exchange, trace=watchdog.trace), stream=True)
                try:
                    if exchange.response(response.status_code, response.headers.get("content-length")):
                        for data in response.iter_raw():
                            exchange.chunk(data)
                finally:
                    response.close()
        except (_PollFailure, httpx.HTTPError) as exc:
            return exchange.timed_out() if watchdog.fired else exchange.failed(exc)
        return exchange.done()

    def poll_once(self) -> bool:
        """Fetch and apply once; True if a new document was applied. Never raises on bad input."""
        return self._accept(self._fetch())

    def start(self) -> None:
        """Poll in a daemon thread now and then every ``next_delay()`` seconds until ``stop()``."""
        if self._thread is not None:
            raise RuntimeError("this ControlPoller is already started")
        self._stopping.clear()
        self._thread = threading.Thread(target=self._loop, name="pytest-failover-control", daemon=True)
        self._thread.start()

    def _forked(self) -> None:
        """In a fork's child (``_fork``): free locks, clients of its own (the parent's
        connections are left alone: closing one would end the parent's TLS session too), and
        its polling thread again if it was polling."""
        self._lock = threading.Lock()
        self._client_lock = threading.Lock()
        self._client = self._async_client = None
        if self._thread is not None and not self._stopping.is_set():
            self._thread = None
            self.start()

    def _loop(self) -> None:
        while not self._stopping.is_set():
            self.poll_once()
            self._stopping.wait(self.next_delay())

    def stop(self, timeout: float | None = None) -> None:
        """Stop the thread (waiting for a poll in flight, at most ``timeout``, by default one poll timeout + 1 s)."""
        thread, self._thread = self._thread, None
        self._stopping.set()
        if thread is not None:
            thread.join(self.timeout + 1.0 if timeout is None else timeout)
        if thread is None or not thread.is_alive():
            with self._client_lock:
                client, self._client = self._client, None
            if client is not None:
                client.close()

    def __enter__(self) -> ControlPoller:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # -- async shell

    def _async_client_(self) -> httpx.AsyncClient:
        with self._client_lock:
            if self._async_client is None:
                self._async_client = httpx.AsyncClient(**self._client_options())
            return self._async_client

    async def _afetch(self) -> _Fetched:
        import anyio

        client = self._async_client_()
        exchange = self._exchange()
        try:
            with anyio.fail_after(exchange.remaining()):
                request = self._request(client, exchange)
                response = await client.send(request, stream=True)
                try:
                    if exchange.response(response.status_code, response.headers.get("content-length")):
                        async for data in response.aiter_raw():
                            exchange.chunk(data)
                finally:
                    await response.aclose()
        except (_PollFailure, httpx.HTTPError, TimeoutError) as exc:
            return exchange.failed(exc)
        return exchange.done()

    async def poll_once_async(self) -> bool:
        """Async twin of ``poll_once``."""
        return self._accept(await self._afetch())

    async def run(self) -> None:
        """Poll now and then every ``next_delay()`` seconds until cancelled; closes its client."""
        import anyio

        try:
            while True:
                await self.poll_once_async()
                await anyio.sleep(self.next_delay())
        finally:
            await self.aclose()

    async def aclose(self) -> None:
        """Close the async HTTP client (a later poll opens a new one)."""
        with self._client_lock:
            client, self._async_client = self._async_client, None
        if client is not None:
            await client.aclose()

    async def __aenter__(self) -> ControlPoller:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
