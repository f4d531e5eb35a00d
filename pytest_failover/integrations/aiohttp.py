"""``FailoverMiddleware``: failover for aiohttp (>= 3.12), on the same loop and core as ``AsyncFailoverTransport``.

::

    failover = FailoverMiddleware([Pool("api", ["https://api.example.com", "https://api2.example.com"])])
    async with aiohttp.ClientSession(middlewares=(failover,)) as session:
        async with session.get("https://api.example.com/v1/rooms") as response:
            response.failover.domain      # which domain answered

A request to a domain of a pool becomes an ``httpx.Request`` and goes through an
:class:`~pytest_failover.AsyncFailoverTransport` whose inner transport sends each
attempt with aiohttp's own ``handler`` (the next middleware, then the connector) and
maps aiohttp's errors onto ``httpx.TransportError`` subclasses, so every decision is the
transport's. The response is aiohttp's own ``ClientResponse`` with
``response.failover`` (a :class:`~pytest_failover.FailoverResult`); a stale copy or a
fallback's answer is turned into one. Requests to other hosts go straight to ``handler``.

- Bodies: ``bytes``, ``str``, JSON and urlencoded form bodies may be re-sent; any other
  payload (multipart ``FormData``, a ``StreamReader``, an async generator, a file) is
  never re-sent once a byte may have left (one that failed before connecting moves on).
  An answer that came whole with its head (aiohttp holds every byte) reaches the caller
  untouched, as from a bare session.
- Time: each attempt is bounded by the policy's attempt time and deadline; a connect
  that does not finish in time is a ``connect_timeout``, one that stalls after the
  request went out a ``read_timeout``. The session's own ``ClientTimeout`` still applies;
  its ``total`` is the caller's time for the whole request: when it runs out, the caller
  gets aiohttp's ``TimeoutError`` as from a bare session, and no domain is blamed.
  Closing the session ends its requests in flight with ``aiohttp.ClientConnectionError``,
  nothing blamed either.
- Cookies and redirects: to the session the pool is one site. Its cookies for the URL
  asked for go to whichever domain serves it, and those an answer from another domain
  sets are filed under the URL asked for too (as well as under that domain, as aiohttp
  files them). That answer's redirect to its own origin says the origin asked for (same
  path): aiohttp follows it through the pool, with the request's ``Authorization``.
- Errors: ``AllDomainsFailed`` / ``CircuitOpenError`` here are
  ``aiohttp.ClientConnectionError`` subclasses, and also the ``pytest_failover`` errors
  of the same name (``.attempts``, ``.pool``, ``.reason``).
- Per-request options: ``with failover_options({...}):``
  (:func:`pytest_failover.integrations.failover_options`).
- ``fallback`` has the transports' signature (an ``httpx.Request`` without its body,
  the error; it returns an ``httpx.Response``, sync or async).
- Use aiohttp's threaded resolver with the outage simulator (``aiodns`` bypasses it).
"""

from __future__ import annotations

import asyncio
import copy
import warnings
import weakref
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

try:
    import aiohttp
    from aiohttp import ClientRequest, ClientResponse, hdrs, payload
    from aiohttp.base_protocol import BaseProtocol
    from aiohttp.client_middlewares import ClientHandlerType
    from aiohttp.helpers import TimerNoop
    from aiohttp.http_exceptions import HttpProcessingError
    from aiohttp.streams import EMPTY_PAYLOAD
    from multidict import CIMultiDict, CIMultiDictProxy
    from yarl import URL
except ImportError as exc:  # pragma: no cover - exercised by the install hint test
    raise ImportError(
        "pytest_failover.integrations.aiohttp needs aiohttp >= 3.12: pip install 'pytest-failover[aiohttp]'"
    ) from exc

import httpx

from .. import _httpx as _exceptions
from .._exchange import in_memory
from .._httpx import AsyncFailoverTransport
from .._state import MiddlewareOptions, spelt_out
from .._transport import FrontEnd, _FrontEnd, _state_of
from . import _convert
from ._convert import parse_native
from ._errors import Row, carried, last_cause, row_of, target_of
from ._options import current

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from .._dial import Dialer
    from .._policy import Policy
    from .._pool import Pool

__all__ = ["AllDomainsFailed", "CircuitOpenError", "FailoverMiddleware"]

_NATIVE = "pytest_failover.aiohttp"  # extension key: the aiohttp-side objects of an exchange; an answer held whole
_READ = "pytest_failover.aiohttp.read"  # extension key: the body of aiohttp's answer the exchange may read (_Body)
_SENDING = "pytest_failover.aiohttp.sending"  # extension key: the ClientRequest an attempt to another domain sends
_MOVED = "pytest_failover.aiohttp.moved"  # extension key: an answer held whole from another domain than the URL's
_REPLAYABLE = httpx.ByteStream(b"")  # aiohttp sends the body itself; this says it may be re-sent
# httpx's four timeouts, which the handler never reads: the loop bounds each attempt with
# its own limit, and the middleware names the phase (``failover_timeout_error``). Each is
# 0, within every attempt's time, so the exchange finds none to cap at it (capping four
# None costs a call and two dicts an attempt: 18 opcodes, 3,400 instructions a request).
_UNREAD_TIMEOUTS: dict[str, float | None] = dict.fromkeys(("connect", "read", "write", "pool"), 0.0)


class AllDomainsFailed(aiohttp.ClientConnectionError, _exceptions.AllDomainsFailed):
    """Every attempt the policy allowed failed (``.attempts``, ``.pool``, ``.reason``)."""


class CircuitOpenError(aiohttp.ClientConnectionError, _exceptions.CircuitOpenError):
    """Every domain of the pool is open or disabled: nothing was sent."""


_KINDS = (AllDomainsFailed, CircuitOpenError)

# The aiohttp-side state of one exchange, carried in the httpx request's extensions: the
# ClientRequest and the handler that sends it, and the caller's URL (which the
# ClientRequest keeps). A tuple: built for every request, unpacked at each attempt.
_Sent = tuple[ClientRequest, ClientHandlerType, httpx.URL]

# The connectors ``FailoverMiddleware.connector()`` made, and the resolving state each
# resolves through (weak: a closed session's connector goes).
_CONNECTORS: weakref.WeakKeyDictionary[aiohttp.BaseConnector, Dialer] = weakref.WeakKeyDictionary()


class FailoverMiddleware(_FrontEnd):
    """An aiohttp client middleware that fails over between the domains of its pools."""

    _transport: AsyncFailoverTransport

    @spelt_out(MiddlewareOptions)
    def __init__(
        self,
        pools: Sequence[Pool] | Pool,
        policy: Policy | Mapping[str, Policy] | None = None,
        **options: Unpack[MiddlewareOptions],
    ) -> None:
        inner = _HandlerIO()
        self._transport = AsyncFailoverTransport(pools, policy, inner, **options)
        self._serve(inner)

    @classmethod
    def sharing(cls, other: FrontEnd) -> FailoverMiddleware:
        """A middleware over ``other``'s state (any failover front-end: an httpx transport,
        a requests adapter, another middleware): one set of breakers, budget, serving
        domain, control document, stale cache and telemetry for all of them."""
        state = _state_of(other, f"{cls.__name__}.sharing")
        self = cls.__new__(cls)
        inner = _HandlerIO()
        self._transport = AsyncFailoverTransport.sharing(state, inner)
        self._serve(inner)
        return self

    def _serve(self, inner: _HandlerIO) -> None:
        """What each request reads of the transport's state: its core, and its dialer
        (None unless a pool has a resolver), which ``inner`` reads too."""
        state = self._transport._state
        self._core = state.core
        self._dialer = inner.dialer = state.dialer

    def connector(self, **options: Any) -> aiohttp.TCPConnector:
        """An ``aiohttp.TCPConnector(**options)`` whose resolver answers the hosts of the
        pools with a ``Policy.resolver`` from it (``docs/resolve.md``); give it to the
        session: ``ClientSession(connector=failover.connector(), middlewares=(failover,))``.
        aiohttp's own DNS cache is off unless ``use_dns_cache=`` says otherwise: the
        pool's resolver has its cache (``CachingResolver``), with the answer's TTL."""
        dialer = self._transport._state.dialer
        if dialer is None:
            return aiohttp.TCPConnector(**options)
        if "resolver" in options:
            raise ValueError("connector(): the middleware gives the connector its resolver; leave resolver= unset")
        from ._aiohttp_resolver import FailoverConnector, FailoverResolver

        options.setdefault("use_dns_cache", False)
        connector = FailoverConnector(dialer, resolver=FailoverResolver(dialer), **options)
        _CONNECTORS[connector] = dialer
        return connector

    async def aclose(self) -> None:
        """Let go of shared health, if any: it stops with the last front-end using it
        (the session's own connections are its own)."""
        await self._transport.aclose()

    async def __call__(self, request: ClientRequest, handler: ClientHandlerType) -> ClientResponse:
        extensions, options = current()
        url = parse_native(request.url)
        route = self._core.route(url, options)
        if route is None:
            return await handler(request)
        if self._dialer is not None:
            _check_connector(request, self._dialer)
        body = request._body  # None: none (``request.body``, a property's frame, reads it as b"")
        stream = _REPLAYABLE if body is None or isinstance(body, payload.BytesPayload) else _Unreplayable()
        outgoing = _convert.request(request.method, url, request.headers.items(), stream, {"timeout": _UNREAD_TIMEOUTS, _NATIVE: (request, handler, url), **extensions})  # _Sent
        try:
            response = await self._transport.handle_async_request(outgoing, (route, options))
        except _exceptions.FailoverError as error:
            raise carried(_KINDS, error, request) from last_cause(error)
        # aiohttp's own answer (sync: no coroutine made per request): as aiohttp handed it
        # over when its body was in memory (``_convert.held``) and it came for the URL asked
        # for; else made so (:func:`_handed_over`)
        answered = response.extensions
        native: ClientResponse | None = answered.get(_NATIVE)
        if native is None:
            native = await _handed_over(response, request)
        native.failover = answered["failover"]  # type: ignore[attr-defined]  # its documented place
        return native


def _check_connector(request: ClientRequest, dialer: Dialer) -> None:
    """A pool's resolver works through the connector ``FailoverMiddleware.connector()``
    makes; with the session's own connector, it would silently not be used: say so
    before anything is sent."""
    session = request.session
    connector = session.connector if session is not None else None
    if connector is None or _CONNECTORS.get(connector) is not dialer:
        hosts = ", ".join(sorted(dialer.resolvers))
        raise ValueError(
            f"Policy.resolver (for {hosts}) works through the connector the FailoverMiddleware "
            "makes: aiohttp.ClientSession(connector=failover.connector(), middlewares=(failover,))"
        )


class _Unreplayable(httpx.AsyncByteStream):
    """Stands for a streamed payload: the exchange must not re-send it once bytes may
    have left. aiohttp sends the original payload itself."""

    async def __aiter__(self) -> AsyncIterator[bytes]:
        raise RuntimeError("the aiohttp middleware sends this body itself")
        yield b""  # pragma: no cover - makes this an async generator


class _HandlerIO(httpx.AsyncBaseTransport):
    """The inner transport: one attempt through aiohttp's handler, its errors as httpx's."""

    wires_resolver = True  # FailoverMiddleware.connector() does, for aiohttp
    dialer: Dialer | None = None  # the state's, when a pool has a resolver

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        native: ClientRequest  # the three of _Sent, unpacked straight from the extension
        handler: ClientHandlerType
        url: httpx.URL
        native, handler, url = request.extensions[_NATIVE]
        whole = _NATIVE  # where an answer held whole goes (_MOVED: another domain's)
        if request.url is not url:
            # Another domain: this attempt's own copy, as a hedge may go out while the
            # attempt it races is still sending the caller's (a retry elsewhere, too).
            native = copy.copy(native)
            native.url = native.original_url = URL(str(request.url), encoded=True)
            native.headers = CIMultiDict(_convert.decoded(request.headers._list))
            request.extensions[_SENDING] = native  # for failover_timeout_error
            whole = _MOVED
        elif getattr(request.headers, "changed", True):  # the exchange set trace context (one attempt at a time here)
            native.headers = CIMultiDict(_convert.decoded(request.headers._list))
        native.response = None  # set by aiohttp once the request went out
        try:
            response = await handler(native)
        except aiohttp.ClientError as exc:  # (its ServerTimeoutError is a TimeoutError too: a phase's)
            error = _httpx_error(exc, request)
            if error is None:
                raise
            _session_closed(native.session, exc)
            try:
                raise error from exc
            finally:
                del error  # its traceback holds this frame: kept, a cycle with each failed attempt
        except TimeoutError as exc:
            _caller_out_of_time(native._timer, exc)
            raise
        except Exception as exc:  # aiohttp asserts it has a connector: a retry after the session closed
            _session_closed(native.session, exc)
            raise
        extensions: dict[str, Any] = {}
        if self.dialer is not None:
            peer = self._peer(response)
            if peer is not None:
                extensions["network_stream"] = peer
        # what its ``raw_headers`` and ``headers`` read on first use (a frame each; the
        # caller's first use then runs them, if any)
        raw = response._raw_headers
        encoded = "Content-Encoding" in response._headers
        if encoded and _decompresses(native, handler):  # aiohttp decoded the body: its bytes are plain
            raw = tuple((k, v) for k, v in raw if k.lower() != b"content-encoding")
            encoded = False
        if not encoded:
            held = response._body  # read whole by aiohttp already (its read()), or else
            if held is None:  # all of it in its stream already, maybe
                held = _held(response)
            if held is not None:  # nothing left to read or to break: aiohttp's answer as it is
                extensions[whole] = response
                return _convert.held(response.status, raw, extensions, held)
        body = extensions[_READ] = _Body(response, request)  # what the exchange may read, and give back
        return _convert.response(response.status, _convert.from_bytes(raw), body, extensions)

    @staticmethod
    def failover_timeout_error(request: httpx.Request) -> httpx.TransportError:
        """The error of an attempt the failover loop cut at its time (``AsyncLoop._send``
        bounds each attempt, its body read included): a connect timeout while aiohttp had
        not sent the request (nothing left: the request may move on at once), else a read
        timeout. aiohttp's handler has no timeouts of its own per phase to tell them."""
        sent: _Sent = request.extensions[_NATIVE]
        native, _, url = sent
        if request.url is not url:  # another domain's: the attempt's own copy
            native = request.extensions[_SENDING]
        kind = httpx.ConnectTimeout if native.response is None else httpx.ReadTimeout
        return kind(f"no answer from {request.url.host} within the attempt's time", request=request)

    @staticmethod
    def _peer(response: ClientResponse) -> _Peer | None:
        """Where the response's connection goes, as ``Dialer.peer`` reads it (None: not a
        connection of ``FailoverMiddleware.connector()``'s to a pool's host). The protocol
        stays on the response after aiohttp gave the connection back to its pool (it does
        once a short body is in: ``response.connection`` is None by then)."""
        from ._aiohttp_resolver import PEERS

        peer = PEERS.get(getattr(response, "_protocol", None))
        return None if peer is None else _Peer(peer)


class _Peer:
    """``network_stream`` for ``Dialer.peer``: the connection's address and how it was found."""

    __slots__ = ("failover_peer",)

    def __init__(self, peer: tuple[str, str]) -> None:
        self.failover_peer = peer

    def get_extra_info(self, name: str) -> None:
        return None  # no socket to cut: the middleware bounds an attempt with its own limit


# What aiohttp raises from a send or a body read (and, for an answer it could not parse,
# the parser's error it raises it from), and the httpx error that classifies the same way;
# ``None``: it says nothing about the domain (a bad URL, a redirect, an error status raised
# for) and propagates unchanged. The first row that matches wins: most specific first.
_ERRORS: tuple[Row, ...] = (
    (aiohttp.ConnectionTimeoutError, object, httpx.ConnectTimeout),
    (aiohttp.ServerTimeoutError, object, httpx.ReadTimeout),
    (aiohttp.ClientProxyConnectionError, object, httpx.ProxyError),
    (aiohttp.ClientHttpProxyError, object, httpx.ProxyError),
    (aiohttp.ClientConnectorError, object, httpx.ConnectError),  # DNS, refused, TLS: no request byte left
    (aiohttp.ServerFingerprintMismatch, object, httpx.ConnectError),
    (aiohttp.ServerDisconnectedError, object, httpx.RemoteProtocolError),
    (aiohttp.ClientPayloadError, object, httpx.RemoteProtocolError),
    (aiohttp.ClientConnectionError, object, httpx.ReadError),  # reset or broken once connected
    # A malformed answer (status line, header, length, chunk): aiohttp's parser fails, and
    # it raises a "400" ClientResponseError from the parser's error, as no server said
    (aiohttp.ClientResponseError, HttpProcessingError, httpx.RemoteProtocolError),
    (aiohttp.ClientError, object, None),
)


def _row(raised: type[aiohttp.ClientError], said: type[object]) -> int | None:
    """The row of :data:`_ERRORS` for ``raised`` raised from ``said`` (None: no row, it
    propagates unchanged)."""
    return row_of(_ERRORS, raised, said)


def _target(raised: type[aiohttp.ClientError], said: type[object]) -> type[httpx.TransportError] | None:
    """The httpx class :data:`_ERRORS` names for ``raised`` raised from ``said``; ``None``:
    propagate unchanged."""
    return target_of(_ERRORS, raised, said)


def _httpx_error(exc: aiohttp.ClientError, request: httpx.Request) -> httpx.TransportError | None:
    """The httpx exception that classifies like ``exc``, or None when ``exc`` says
    nothing about the domain (raise it unchanged)."""
    target = _target(type(exc), type(exc.__cause__))
    return None if target is None else target(str(exc), request=request)


class _Body(httpx.AsyncByteStream):
    """The response body as aiohttp delivers it, read by the exchange; keeps what it
    handed out, so that a body read in part can be given back to aiohttp's stream.

    Its own iterator, not an async generator: asyncio registers each async generator
    with its loop (a weak set, a hook call) and the exchange iterates one per read."""

    __slots__ = ("_request", "response", "seen")

    def __init__(self, response: ClientResponse, request: httpx.Request) -> None:
        self.response = response
        self._request = request
        self.seen: list[bytes] = []

    def __aiter__(self) -> _Body:
        return self

    async def __anext__(self) -> bytes:
        response = self.response
        try:
            if response.content_length is not None:  # one read, aiohttp's fastest path
                if response._body is not None:  # read already: the end
                    raise StopAsyncIteration
                return await response.read()
            chunk = await response.content.readany()  # as aiohttp's iter_any()
        except aiohttp.ClientError as exc:
            error = _httpx_error(exc, self._request)
            if error is None:
                raise
            _session_closed(response._session, exc)
            raise error from exc
        except TimeoutError as exc:
            _caller_out_of_time(response._timer, exc)
            raise
        if not chunk:
            raise StopAsyncIteration
        self.seen.append(chunk)
        return chunk

    async def aclose(self) -> None:
        # Read to its end, the body has already given its connection back (and a
        # released response would refuse ``read()``); otherwise let the connection go.
        if self.response._body is None and not self.response.content.at_eof():
            self.response.release()


def _caller_out_of_time(timer: object, exc: TimeoutError) -> None:
    """Raise the cancellation that aiohttp's ``timer`` (``ClientTimeout.total``, the
    session's or the request's) turned into ``exc``, once it ran out: the caller's time
    is up, which says nothing about the domain. As a ``TimeoutError`` the failover loop
    would take it for its attempt's own, blame the domain, and try the next with no time
    left (whose breaker would open too); as the cancellation it was, the request is given
    up, hedges and all, and aiohttp's outer timer turns it into the ``TimeoutError`` a
    bare session raises. (The loop's own limit is a cancellation aiohttp lets through.)"""
    if getattr(timer, "_cancelled", False):  # a TimerContext that fired (a TimerNoop has none)
        raise asyncio.CancelledError from exc


_REDIRECTS = frozenset((301, 302, 303, 307, 308))  # the statuses aiohttp follows


def _as_asked(answer: ClientResponse, request: ClientRequest) -> None:
    """``answer``, from another domain of the pool than ``request``'s URL, made the answer
    of the URL asked for where the session reads it as such. To the caller the pool is one
    site: the session's cookies for the URL asked for go to whichever domain serves it,
    and a relative redirect is followed from that URL, through the pool. So:

    - the cookies ``answer`` sets are filed under the URL asked for too (aiohttp files
      them under the domain that answered): the next requests for it carry them back;
    - a redirect to the origin that answered is made one to the origin asked for (same
      path and query): aiohttp judges a ``Location`` by the URL it asked for, and would
      drop the request's ``Authorization`` and ``Cookie`` for another origin, where a bare
      session that asked that domain keeps them. It then follows it as a relative one,
      through the pool."""
    session = request.session
    if session is not None and hdrs.SET_COOKIE in answer._headers:
        session.cookie_jar.update_cookies(answer.cookies, request.url)
    if answer.status not in _REDIRECTS:
        return
    location = answer._headers.get(hdrs.LOCATION)
    try:
        target = URL(location) if location is not None else None
    except ValueError:  # not a URL: aiohttp raises its own error for it
        return
    if target is None or not target.absolute or target.origin() != answer._real_url.origin():
        return
    asked = str(request.original_url.origin().join(target.relative()))
    headers = CIMultiDict(answer._headers)
    headers[hdrs.LOCATION] = asked
    answer._headers = CIMultiDictProxy(headers)
    answer._raw_headers = tuple(
        (name, asked.encode("latin-1") if name.lower() == b"location" else value) for name, value in answer._raw_headers
    )
    for read in ("headers", "raw_headers"):  # aiohttp's properties of them keep what they read first
        answer._cache.pop(read, None)


def _session_closed(session: aiohttp.ClientSession | None, exc: Exception) -> None:
    """Raise ``aiohttp.ClientConnectionError`` from ``exc`` if the attempt failed because
    its session was closed meanwhile (its connections closed under it, or no connector
    left for a retry): the caller's doing, which says nothing about the domain. As the
    ``TransportError`` it maps to, the loop would blame the domain and try the next one
    on the closed session (blamed in turn: a middleware that serves other sessions would
    find healthy domains' breakers open); as an error of the caller's own it ends the
    request, nothing blamed, as a bare session's ends."""
    if session is not None and session.closed:
        raise aiohttp.ClientConnectionError("Session is closed") from exc


def _decompresses(request: ClientRequest, handler: ClientHandlerType) -> bool:
    """Does aiohttp decode the body of ``request``'s answer? What its ``auto_decompress`` is
    for this request (:func:`_asked`), else its session's."""
    asked = _asked(handler, "auto_decompress")
    if isinstance(asked, bool):
        return asked
    session = request.session
    return session.auto_decompress if session is not None else True


def _asked(handler: ClientHandlerType, name: str) -> object:
    """The value of ``name`` that the request ``handler`` sends was made with: a
    ``ClientSession.request`` argument, which aiohttp keeps nowhere a middleware can read
    (not on the ``ClientRequest``, and its C parser keeps ``auto_decompress`` to itself)
    but in its sending closure (``_connect_and_send_request``, in aiohttp 3.12 to 3.14), as
    the session's own value when the call gave none. Reached through the closures of the
    middlewares after this one (``build_client_middlewares``: ``next_h``), 16 at most;
    None when not found (another aiohttp): the caller falls back to the session's."""
    for _ in range(16):
        code = getattr(handler, "__code__", None)
        cells = getattr(handler, "__closure__", None)
        if code is None or cells is None:
            return None
        names: tuple[str, ...] = code.co_freevars
        try:
            if name in names:
                return cells[names.index(name)].cell_contents
            if "next_h" not in names:
                return None
            handler = cells[names.index("next_h")].cell_contents
        except ValueError:  # a cell not filled yet: not the closure meant
            return None
    return None


def _held(response: ClientResponse) -> bytes | None:
    """The whole body of ``response`` when aiohttp holds it in its stream already (None:
    some of it is still to come, or its read failed). It is left where it is, for the
    caller to read or stream as without the middleware: every byte already in its stream
    (a short answer comes in the packet of its head; aiohttp gave the connection back to
    its pool then). Read from the stream's buffer (aiohttp's ``StreamReader`` keeps a
    deque of chunks and the offset read into the first; nothing reads it before the
    caller), as aiohttp has no public way to look at unread bytes without taking them;
    whether it ended, and well, from what its ``is_eof()`` and ``exception()`` read (a
    frame each). (One aiohttp read already, with ``read()``, is its ``_body``: the caller
    looks there.)"""
    content = response.content
    if content is EMPTY_PAYLOAD:  # no body (HEAD, 204, 304)
        return b""
    if not content._eof or content._exception is not None:
        return None
    held = b"".join(content._buffer)
    return held[content._buffer_offset :] if content._buffer_offset else held


async def _handed_over(response: httpx.Response, request: ClientRequest) -> ClientResponse:
    """aiohttp's response to hand over for ``response`` (the transport's answer) when it is
    not aiohttp's own as it came for the URL asked for: one from another domain, made the
    answer of the URL asked for (:func:`_as_asked`); one whose body the exchange read, with
    it given back; or one built for a stale copy or the fallback's answer."""
    answered = response.extensions
    native: ClientResponse | None = answered.get(_MOVED)
    if native is None:
        read: _Body | None = answered.get(_READ)
        if read is None:
            return await _built(response, request)
        native = _given_back(response, read)
        if native._real_url is request.original_url:  # (another domain's attempt sends a copy)
            return native
    _as_asked(native, request)
    return native


def _given_back(response: httpx.Response, body: _Body) -> ClientResponse:
    """aiohttp's response that ``response`` (the transport's answer) was made of, with
    what the exchange read of its body given back."""
    native = body.response
    if in_memory(response):  # read whole by the exchange: aiohttp keeps a body read in one go,
        if native._body is None:  # one read in chunks is in ``seen`` (decoded by aiohttp already)
            native._body = b"".join(body.seen)
        native.content = _reader(native._body)  # the read drained the stream: it streams again
    elif response.stream is not body:  # partly read (over the read limit): give it back
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # the one way to push bytes back
            native.content.unread_data(b"".join(body.seen))
    return native


class _Written:
    """What ``ClientResponse`` asks of the writer of a request that was never sent."""

    output_size = 0


async def _built(response: httpx.Response, request: ClientRequest) -> ClientResponse:
    """A ``ClientResponse`` holding an answer that did not come from the network."""
    content = await response.aread()
    loop = asyncio.get_running_loop()
    native = ClientResponse(
        request.method,
        request.original_url,
        writer=None,
        continue100=None,
        timer=TimerNoop(),
        request_info=request.request_info,
        traces=[],
        loop=loop,
        session=request.session,
        stream_writer=cast(Any, _Written()),
    )
    native.status = response.status_code
    native.reason = response.reason_phrase
    native._headers = CIMultiDictProxy(CIMultiDict(response.headers.multi_items()))
    native._raw_headers = tuple(response.headers.raw)
    native._body = content
    native.content = _reader(content)
    return native


def _reader(content: bytes) -> aiohttp.StreamReader:
    """aiohttp's stream of a response, holding ``content``, ended."""
    loop = asyncio.get_running_loop()
    reader = aiohttp.StreamReader(BaseProtocol(loop), max(2**16, len(content)), loop=loop)  # never over its limit
    reader.feed_data(content)
    reader.feed_eof()
    return reader
