"""``FailoverAdapter``: failover for ``requests``, on the same loop and core as ``FailoverTransport``.

::

    session = requests.Session()
    adapter = FailoverAdapter([Pool("api", ["https://api.example.com", "https://api2.example.com"])])
    session.mount("https://", adapter)
    session.mount("http://", adapter)    # the same instance: one breaker per domain

A request to a domain of a pool becomes an ``httpx.Request`` and goes through a
:class:`~pytest_failover.FailoverTransport` whose inner transport sends each attempt with
the wrapped ``HTTPAdapter`` (``adapter=``, a plain one by default) and maps its errors
onto ``httpx.TransportError`` subclasses, so every decision is the transport's. The
response is the wrapped adapter's own ``requests.Response`` with ``response.failover``
(a :class:`~pytest_failover.FailoverResult`); a stale copy or a fallback's answer is
turned into one. Requests to other hosts go straight to the wrapped adapter.

- Retries: the wrapped adapter's own urllib3 ``Retry`` stays in force for the hosts
  outside every pool; inside the pools it is off (``Retry(0, read=False)``, requests'
  default), so two retry layers never stack.
- Bodies: ``bytes``, ``str``, a ``bytearray`` or ``memoryview`` may be re-sent; a
  generator or a file is never re-sent once a byte may have left (an upload that failed
  before connecting moves on).
- Errors: ``AllDomainsFailed`` / ``CircuitOpenError`` here are
  ``requests.exceptions.ConnectionError`` subclasses, and also the
  ``pytest_failover`` errors of the same name (``.attempts``, ``.pool``, ``.reason``).
  What requests refuses before connecting (a bad ``timeout=``, a ``verify=`` or ``cert=``
  path that does not exist) is its own error, raised at once, no domain blamed.
- Per-request options: ``with failover_options({...}):``
  (:func:`pytest_failover.integrations.failover_options`).
- ``fallback`` has the transports' signature: it gets the ``httpx.Request`` and the
  error and returns an ``httpx.Response``, which the caller receives as a
  ``requests.Response``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

try:
    import requests
    from requests.adapters import HTTPAdapter
    from requests.structures import CaseInsensitiveDict
    from requests.utils import get_encoding_from_headers
    from urllib3.exceptions import (
        ConnectTimeoutError,
        HTTPError,
        MaxRetryError,
        NewConnectionError,
        ProtocolError,
        ReadTimeoutError,
    )
    from urllib3.exceptions import SSLError as TLSError
    from urllib3.poolmanager import PoolManager, ProxyManager
    from urllib3.response import HTTPResponse
    from urllib3.util import Timeout
    from urllib3.util.retry import Retry
except ImportError as exc:  # pragma: no cover - exercised by the install hint test
    raise ImportError(
        "pytest_failover.integrations.requests needs requests: pip install 'pytest-failover[requests]'"
    ) from exc

import httpx

from .. import _httpx as _exceptions
from .. import _sockets
from .._exchange import FailoverResult
from .._fork import renew_in_child
from .._httpx import FailoverTransport
from .._sockets import cut_announced
from .._state import AdapterOptions, spelt_out
from .._transport import FrontEnd, _FrontEnd, _state_of
from . import _convert
from ._convert import parse
from ._errors import Row, carried, last_cause, row_of, target_of
from ._options import current
from ._urllib3 import SENDING, pool_classes

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from .._policy import Policy
    from .._pool import Pool

__all__ = ["AllDomainsFailed", "CircuitOpenError", "FailoverAdapter"]

_NATIVE = "pytest_failover.requests"  # extension key: the requests-side objects of an exchange
_SLOT = "pytest_failover.requests.slot"  # and an attempt's: the connection it is on (``_AdapterIO.failover_cut``)
_CHUNK = 65536
_EMPTY = httpx.ByteStream(b"")  # the body of a request without one (immutable: shared)


# Both bases declare ``request``: requests' as an attribute, httpx's as a property; the
# property holds the PreparedRequest, as requests' own errors do.
class AllDomainsFailed(requests.exceptions.ConnectionError, _exceptions.AllDomainsFailed):  # type: ignore[misc]
    """Every attempt the policy allowed failed (``.attempts``, ``.pool``, ``.reason``)."""


class CircuitOpenError(requests.exceptions.ConnectionError, _exceptions.CircuitOpenError):  # type: ignore[misc]  # as above
    """Every domain of the pool is open or disabled: nothing was sent."""


_KINDS = (AllDomainsFailed, CircuitOpenError)

# The requests-side state of one exchange, carried in the httpx request's extensions: the
# PreparedRequest, the send's verify, cert and proxies, and the caller's URL (which the
# PreparedRequest keeps). A tuple: built for every request, unpacked at each attempt.
_Sent = tuple[requests.PreparedRequest, Any, Any, Any, httpx.URL]


class FailoverAdapter(HTTPAdapter, _FrontEnd):
    """A ``requests`` adapter that fails over between the domains of its pools.

    ``adapter=`` wraps your own ``HTTPAdapter`` (pool sizes, TLS, retries for other
    hosts); its connection pools are shared, its ``Retry`` is off inside the pools.
    """

    _transport: FailoverTransport

    @spelt_out(AdapterOptions)
    def __init__(
        self,
        pools: Sequence[Pool] | Pool,
        policy: Policy | Mapping[str, Policy] | None = None,
        *,
        adapter: HTTPAdapter | None = None,
        **options: Unpack[AdapterOptions],
    ) -> None:
        self._wrap(adapter)
        self._transport = FailoverTransport(pools, policy, self._io, **options)
        self._core = self._transport._state.core
        self._resolve(adapter)

    @classmethod
    def sharing(cls, other: FrontEnd, *, adapter: HTTPAdapter | None = None) -> FailoverAdapter:
        """An adapter over ``other``'s state (any failover front-end: an httpx transport,
        another adapter, an aiohttp middleware): one set of breakers, budget, serving
        domain, control document, stale cache and telemetry for all of them.
        ``adapter=`` as for the constructor."""
        state = _state_of(other, f"{cls.__name__}.sharing")
        self = cls.__new__(cls)
        self._wrap(adapter)
        self._transport = FailoverTransport.sharing(state, self._io)
        self._core = self._transport._state.core
        self._resolve(adapter)
        return self

    def _resolve(self, adapter: HTTPAdapter | None) -> None:
        """This adapter's connections (urllib3 connection classes, :mod:`._urllib3`): each
        says which request it is sending, for the watchdog to cut an attempt out of time
        before its answer's headers came; and for pools with a resolver
        (``Policy.resolver``), those to their hosts resolve through it
        (``docs/resolve.md``). An ``adapter=`` of your own keeps its connections: a resolver
        would silently not be used there, an error instead."""
        dialer = self._transport._state.dialer
        if adapter is None:
            self._own_pools()
            renew_in_child(self, FailoverAdapter._forked)
        elif dialer is not None:
            hosts = ", ".join(sorted(dialer.resolvers))
            raise ValueError(
                f"Policy.resolver (for {hosts}) works through the connections the FailoverAdapter "
                "makes; leave adapter= unset, or resolve in your own adapter"
            )

    def _own_pools(self) -> None:
        """This adapter's urllib3 pools make its own connections (:meth:`_resolve`)."""
        self.poolmanager.pool_classes_by_scheme = pool_classes(self._transport._state.dialer)

    def proxy_manager_for(self, proxy: str, **proxy_kwargs: Any) -> PoolManager:
        """requests' manager for ``proxy``, whose connections announce themselves too (an
        HTTP(S) proxy: a SOCKS proxy's connections are its own), so the watchdog cuts a
        head trickled through the proxy at the attempt's time. They connect to the proxy,
        which resolves the domain: no pool's resolver applies."""
        manager: PoolManager = super().proxy_manager_for(proxy, **proxy_kwargs)
        if isinstance(manager, ProxyManager):
            manager.pool_classes_by_scheme = pool_classes(None)
        return manager

    def _forked(self) -> None:
        """In a fork's child (``_fork``): pools of its own (as ``SyncLoop._forked``: the
        parent's kept-alive connections would carry both processes' requests; they are left
        alone, and the child's copies of their sockets close when collected)."""
        connections, maxsize, block = self._pool_connections, self._pool_maxsize, self._pool_block  # type: ignore[attr-defined]  # requests' HTTPAdapter sets them; its stubs leave them out
        self.init_poolmanager(connections, maxsize, block=block)
        self.proxy_manager = {}
        self._own_pools()

    def _wrap(self, adapter: HTTPAdapter | None) -> None:
        """requests' own set-up, and the sends of the wrapped adapter (or of this one)."""
        super().__init__()  # requests' default: Retry(0, read=False)
        if adapter is not None and not isinstance(adapter, HTTPAdapter):
            raise TypeError(f"adapter= must be a requests.adapters.HTTPAdapter, got {type(adapter).__name__}")
        self._wrapped = adapter
        self._passthrough = adapter.send if adapter is not None else super().send
        self._io = _AdapterIO(_without_retries(adapter).send if adapter is not None else super().send)

    def send(
        self,
        request: requests.PreparedRequest,
        stream: bool = False,
        timeout: Any = None,
        verify: bool | str = True,
        cert: Any = None,
        proxies: Mapping[str, str] | None = None,
    ) -> requests.Response:
        extensions, options = current()
        url = parse(request.url or "")
        route = self._core.route(url, options)
        if route is None:
            return self._passthrough(request, stream, timeout, verify, cert, proxies)
        body = request.body
        if body is None or body == b"":  # none (a GET): one stream for them all, it holds nothing
            content: httpx.SyncByteStream = _EMPTY
        elif isinstance(body, (bytes, str)):
            content = httpx.ByteStream(body.encode() if isinstance(body, str) else body)
        elif isinstance(body, (bytearray, memoryview)):  # in memory too: requests sends it as it is, again
            content = httpx.ByteStream(bytes(body))
        else:
            content = _Unreplayable()
        sent: _Sent = (request, verify, cert, proxies, url)
        timeouts = _NO_TIMEOUTS if timeout is None else _timeouts(timeout)  # None: requests' default
        extensions = {"timeout": timeouts, _NATIVE: sent, **extensions}  # one dict (the options' last: most have none)
        method = (request.method or "GET").upper()  # as httpx's Request has it (requests' prepare does too)
        # The headers as (name, value) pairs, each name spelt as it was given: requests' own
        # CaseInsensitiveDict keeps them in its _store (C-level to read; the mapping's own
        # iteration is Python calls); any other mapping (set by hand) goes out as its items.
        headers = request.headers
        pairs = headers._store.values() if headers.__class__ is CaseInsensitiveDict else headers.items()  # type: ignore[attr-defined]  # requests' own, as checked
        outgoing = _convert.request(method, url, pairs, content, extensions)
        try:
            response = self._transport.handle_request(outgoing, (route, options))
        except _exceptions.FailoverError as error:
            raise carried(_KINDS, error, request) from last_cause(error)
        except _SetUp as carrier:
            raise carrier.error from None  # as requests raised it, its own traceback kept
        return _native(response, request, self, stream)

    def __getstate__(self) -> dict[str, Any]:
        """Refused: requests' ``HTTPAdapter`` pickles (and deep-copies) its settings alone,
        which would make an adapter without its failover state, failing at its first
        request, in a copy that could not share the breakers anyway."""
        raise TypeError(
            f"a {type(self).__name__} cannot be pickled or copied: it holds live failover state "
            "(breakers, budget, connections, threads) that a copy could not share; build a "
            "FailoverAdapter in each process (FailoverAdapter.sharing shares one state within one)"
        )

    def close(self) -> None:
        self._transport.close()
        if self._wrapped is not None:
            self._wrapped.close()
        super().close()


def _without_retries(adapter: HTTPAdapter) -> HTTPAdapter:
    """The same adapter (same class, settings and connection pools) with urllib3's retries off."""
    clone = object.__new__(type(adapter))
    clone.__dict__.update(vars(adapter))
    clone.max_retries = Retry(0, read=False)
    return clone


Store = dict[Any, tuple[Any, Any]]  # CaseInsensitiveDict._store: {lowercased name: (name, value)}


_NO_TIMEOUTS: dict[str, float | None] = dict.fromkeys(("connect", "read", "write", "pool"))  # read, never changed


def _timeouts(timeout: Any) -> dict[str, float | None]:
    """requests' timeout (seconds, a ``(connect, read)`` pair or a urllib3 ``Timeout``) as
    httpx's four. A value requests' own send refuses is refused here, with its
    ``ValueError`` and message, before anything is sent: the attempts' sends would refuse
    it only after the exchange had capped it (a pair the caller never wrote)."""
    if timeout.__class__ in (int, float) and timeout > 0:  # the common case (not NaN, not a bool)
        return {"connect": timeout, "read": timeout, "write": timeout, "pool": timeout}
    if isinstance(timeout, tuple):  # as requests' HTTPAdapter.send checks it
        try:
            connect, read = timeout
            given = Timeout(connect=connect, read=read)
        except ValueError:
            raise ValueError(
                f"Invalid timeout {timeout}. Pass a (connect, read) timeout tuple, "
                "or a single float to set both timeouts to the same value."
            ) from None
    elif isinstance(timeout, Timeout):
        given = timeout
    else:
        given = Timeout(connect=timeout, read=timeout)  # its ValueError names what is wrong
    if given.total is not None and given.total is not Timeout.DEFAULT_TIMEOUT:
        # The read's time is what the connect leaves of the total, known once it started:
        # each phase is given at most the total (the policy's deadline bounds the whole).
        given = given.clone()
        given.start_connect()
    connect, read = given.connect_timeout, given.read_timeout
    connect = connect if isinstance(connect, (int, float)) else None  # urllib3's default: the socket's
    read = read if isinstance(read, (int, float)) else None
    return {"connect": connect, "read": read, "write": read, "pool": connect}


class _Unreplayable(httpx.SyncByteStream):
    """Stands for a generator or file body: the exchange must not re-send it once
    bytes may have left. requests sends the original body itself."""

    def __iter__(self) -> Iterator[bytes]:
        raise RuntimeError("the requests adapter sends this body itself")


class _SetUp(Exception):  # a carrier, never seen by the caller
    """An ``OSError`` requests' send raised itself, not wrapped in one of its own errors:
    the caller's set-up (a CA bundle or client certificate path that does not exist),
    found before connecting, which says nothing about the domain. Carried past the
    failover loop, which takes a raw ``OSError`` for a broken read and would try every
    domain and blame each, and raised as it was, as from a bare session."""

    def __init__(self, error: OSError) -> None:
        super().__init__(error)
        self.error = error


class _AdapterIO(httpx.BaseTransport):
    """The inner transport: one attempt through the wrapped adapter, its errors as httpx's."""

    wires_resolver = True  # FailoverAdapter._resolve does, for urllib3

    def __init__(self, send: Any) -> None:
        self._send = send

    @staticmethod
    def failover_cut(request: httpx.Request) -> bool:
        """Shut down the socket ``request`` is on, before its answer's headers came (the
        watchdog: ``_sockets.cut_attempt``); False when none is known. Its slot, in its
        extensions, is filled by its connection as it sends (the adapter's own
        connections: ``_urllib3.SENDING``; an ``adapter=`` of the caller's own leaves it
        empty)."""
        slot = request.extensions.get(_SLOT)
        return slot is not None and cut_announced(slot)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        sent: _Sent = request.extensions[_NATIVE]
        prepared, verify, cert, proxies, url = sent
        headers = request.headers
        if request.url is not url:
            # Another domain: this attempt's own copy, as a hedge may go out while the
            # attempt it races is still sending the caller's (a retry elsewhere, too).
            prepared = prepared.copy()
            prepared.url = str(request.url)
            prepared.headers = CaseInsensitiveDict(_convert.decoded(headers._list))
        elif getattr(headers, "changed", True):  # the exchange set trace context (one attempt at a time here)
            prepared.headers = CaseInsensitiveDict(_convert.decoded(headers._list))
        timeouts = request.extensions["timeout"]
        slot: list[Any] = [None]
        SENDING.slot = request.extensions[_SLOT] = slot  # (one attempt at a time per request: a hedge sends a copy)
        try:
            native = self._send(prepared, True, (timeouts["connect"], timeouts["read"]), verify, cert, proxies)
        except requests.RequestException as exc:  # requests wraps all a send meets on the wire
            error = _httpx_error(exc, request)
            if error is None:
                raise
            try:
                raise error from exc
            finally:
                del error  # its traceback holds this frame: kept, a cycle with each failed attempt
        except OSError as exc:  # what it does not wrap: its own check of verify= and cert= paths
            raise _SetUp(exc) from exc
        finally:
            with _sockets.ANNOUNCED:  # done with the connection: nothing may cut it now (renewed in a fork's child)
                slot[0] = None  # its response holds the socket now (``network_stream``)
        # The answer's headers by lowercased name, to look names up in at C level (the
        # mapping's own `in` and `[]` are Python calls): requests' CaseInsensitiveDict keeps
        # them so (its _store); any other mapping (an adapter's own) is read into one.
        answered = native.headers
        named: Store = (answered if answered.__class__ is CaseInsensitiveDict else CaseInsensitiveDict(answered))._store  # type: ignore[attr-defined]  # requests' own, made so if need be
        body = _Body(native, request, named)
        return _convert.response(native.status_code, _convert.encoded(named.values()), body, {_NATIVE: body, "network_stream": body})


# What requests raises from a send (or urllib3 from a body read), what happened (for
# a plain ``requests.ConnectionError``, the urllib3 exception it wraps, out of its
# ``MaxRetryError``; ``object``: whatever), and the httpx error that classifies the same
# way; ``None``: it says nothing about the domain (a bad URL, header or body) and
# propagates unchanged. The first row that matches wins: most specific first. A raw
# ``OSError`` reaches the table only from a body read (one from a send is a local
# set-up error, such as a missing CA bundle, which requests does not wrap).
_ERRORS: tuple[Row, ...] = (
    # A send: requests' exceptions.
    (requests.exceptions.ConnectTimeout, object, httpx.ConnectTimeout),
    (requests.exceptions.ReadTimeout, object, httpx.ReadTimeout),
    (requests.exceptions.ProxyError, object, httpx.ProxyError),
    (requests.exceptions.SSLError, object, httpx.ConnectError),  # the handshake: no request byte left
    (requests.exceptions.ChunkedEncodingError, object, httpx.RemoteProtocolError),
    (requests.exceptions.ConnectionError, NewConnectionError, httpx.ConnectError),  # refused, DNS (a ConnectTimeoutError)
    (requests.exceptions.ConnectionError, ConnectTimeoutError, httpx.ConnectTimeout),
    (requests.exceptions.ConnectionError, ReadTimeoutError, httpx.ReadTimeout),
    (requests.exceptions.ConnectionError, ProtocolError, httpx.ReadError),  # it broke after it was made
    (requests.exceptions.ConnectionError, OSError, httpx.ReadError),
    (requests.exceptions.ConnectionError, object, httpx.ConnectError),  # a closed pool, a retry error
    (requests.RequestException, object, None),
    # A body read: urllib3's exceptions (the answer's head had come).
    (ReadTimeoutError, object, httpx.ReadTimeout),
    (TLSError, object, httpx.ReadError),  # the TLS stream broke
    (ProtocolError, object, httpx.RemoteProtocolError),  # reset, cut short, a bad chunk
    (OSError, object, httpx.RemoteProtocolError),
    (HTTPError, object, None),
)


def _row(raised: type[Exception], said: type[object]) -> int | None:
    """The row of :data:`_ERRORS` for an exception of class ``raised`` that says ``said``
    happened (None: no row, it propagates unchanged)."""
    return row_of(_ERRORS, raised, said)


def _target(raised: type[Exception], said: type[object]) -> type[httpx.TransportError] | None:
    """The httpx class :data:`_ERRORS` names for an exception of class ``raised`` that
    says ``said`` happened; ``None``: propagate unchanged."""
    return target_of(_ERRORS, raised, said)


def _httpx_error(exc: Exception, request: httpx.Request) -> httpx.TransportError | None:
    """The httpx exception that classifies like ``exc``, or None when ``exc`` says
    nothing about the domain (raise it unchanged)."""
    said = exc.args[0] if isinstance(exc, requests.RequestException) and exc.args else None
    if isinstance(said, MaxRetryError):
        said = said.reason
    target = _target(type(exc), type(said))
    return None if target is None else target(str(exc), request=request)


def _read_error(exc: Exception, request: httpx.Request) -> Exception:
    """The error to raise for ``exc``, raised by a body read: the httpx error that
    classifies like it, caused by it; or ``exc`` itself (no cause) when it says nothing
    about the domain."""
    error = _httpx_error(exc, request)
    if error is None:
        return exc
    error.__cause__ = exc
    return error


class _Body(httpx.SyncByteStream):
    """The response body as urllib3 delivers it (still encoded), read by the exchange;
    keeps what it handed out, the whole body once the exchange read it all. Also the
    response's ``network_stream``, for the deadline watchdog and ``Dialer.peer``."""

    ended = False  # read to its end (then ``seen`` holds all of it)
    seen: list[bytes]  # what it handed out

    def __init__(self, native: requests.Response, request: httpx.Request, named: Store) -> None:
        self.native = native
        self._request = request
        self.named = named  # the answer's headers by lowercased name

    def __iter__(self) -> Iterator[bytes]:
        if "content-length" not in self.named:
            return self._chunks()
        try:  # one read, at once: no generator to make and resume
            self.seen = [self.native.raw.read(decode_content=False)]
        except (HTTPError, OSError) as exc:
            raise _read_error(exc, self._request)  # noqa: B904  # its cause set there, or exc itself (no cause)
        self.ended = True
        return iter(self.seen)

    def _chunks(self) -> Iterator[bytes]:
        self.seen = seen = []
        try:
            for chunk in self.native.raw.stream(_CHUNK, decode_content=False):
                seen.append(chunk)
                yield chunk
        except (HTTPError, OSError) as exc:
            raise _read_error(exc, self._request)  # noqa: B904  # its cause set there, or exc itself (no cause)
        self.ended = True

    def close(self) -> None:
        # Read to its end, urllib3 gave the connection back to its pool as the last byte
        # came (as for a bare request, whose answer requests reads and never closes):
        # closing it again would only look that up (some 90 opcodes a request).
        if not self.ended:
            self.native.close()

    def get_extra_info(self, name: str) -> Any:
        """The socket of the response's connection (``name="socket"``), for the watchdog.
        An answer the server ends by closing (``Connection: close``) has it in its own file:
        http.client hands it there and drops the connection's (``sock`` None)."""
        if name != "socket":
            return None
        raw = self.native.raw
        sock = getattr(getattr(raw, "connection", None), "sock", None)
        if sock is None:  # http.client's response file: a SocketIO over the socket
            sock = getattr(getattr(getattr(getattr(raw, "_fp", None), "fp", None), "raw", None), "_sock", None)
        return sock

    @property
    def failover_connection(self) -> Any:
        """The response's urllib3 connection while it is the response's (None once it went
        back to its pool), whose requests the adapter's own connections count
        (``_urllib3``), as ``_sockets.connection`` reads it."""
        return self.native.raw.connection

    @property
    def failover_peer(self) -> tuple[str, str] | None:
        """The address of the response's connection and how it was found, when it was
        opened through a resolver (``_urllib3``), as ``Dialer.peer`` reads it."""
        return getattr(getattr(self.native.raw, "connection", None), "failover_peer", None)


class _Replay:
    """The raw bytes (still encoded) of a body the exchange read, all of it or its start,
    as the file a replay (:func:`_replayed`) reads them from: ``chunks``, what was read
    then (past the read limit) the rest as the httpx response streams it. It takes the
    place of ``http.client``'s response and says what that one says: closed once read to
    its end (urllib3's ``stream`` reads until its file is closed), ``read(n)`` ``n`` bytes
    unless the body ends first. A break on the way is urllib3's error (the one the read
    raised, else a ``ProtocolError``), as requests expects of ``raw``. ``closing`` runs
    when it is closed before its end."""

    def __init__(self, chunks: Iterator[bytes], closing: Callable[[], None] | None = None) -> None:
        self._chunks = chunks
        self._closing = closing
        self._left = memoryview(b"")  # what the last chunk still holds
        self._ended = self._closed = False

    def _next(self) -> bool:
        """The next chunk into ``_left``; False at the body's end."""
        try:
            self._left = memoryview(next(self._chunks))
        except StopIteration:
            self._ended = True
            return False
        except httpx.TransportError as exc:
            cause = exc.__cause__
            if isinstance(cause, HTTPError):  # urllib3's own, as the read raised it
                raise cause from None
            raise ProtocolError(str(exc), exc) from exc
        return True

    def read(self, amt: int | None = None) -> bytes:
        left = -1 if amt is None or amt < 0 else amt  # -1: to the end
        parts = []
        while left and (self._left or self._next()):
            part = self._left if left < 0 else self._left[:left]
            self._left = self._left[len(part) :]
            parts.append(part)
            left -= len(part) if left > 0 else 0
        return b"".join(parts)

    def read1(self, amt: int = -1) -> bytes:
        """What the current chunk holds (the next one's, if none), ``amt`` at most."""
        if not self._left:
            self._next()
        part = self._left if amt < 0 else self._left[:amt]
        self._left = self._left[len(part) :]
        return bytes(part)

    def isclosed(self) -> bool:
        return self._closed or (self._ended and not self._left)

    @property
    def closed(self) -> bool:
        return self.isclosed()

    def close(self) -> None:
        if self.isclosed():
            return
        # Marked first: ``closing`` closes the requests response, whose ``raw`` (the
        # replay) closes this again.
        self._closed = True
        if self._closing is not None:
            self._closing()


def _closer(response: httpx.Response, raw: Any) -> Callable[[], None]:
    """What closes a body streamed past the read limit before its end: the exchange's
    stream, and urllib3's response (no longer the requests response's ``raw``), as
    requests' ``Response.close`` would (its connection not handed back half read)."""

    def close() -> None:
        response.close()
        raw.close()
        raw.release_conn()

    return close


def _replayed(raw: Any, body: _Replay, prepared: requests.PreparedRequest) -> HTTPResponse:
    """urllib3's response ``raw`` once more, its body (still encoded, as it came) read
    from ``body``: the ``raw`` a caller reads a body the exchange read (all of it, or its
    start) from, with urllib3's own ``read(n)``, ``stream`` and decoding, and the answer
    requests takes cookies from (``_original_response``). The bytes were checked against
    the answer's length as they came: they are not checked again."""
    return HTTPResponse(
        body,  # type: ignore[arg-type]  # a file as urllib3 reads one (read, read1, isclosed, close), not an IO
        raw.headers,
        raw.status,
        raw.version,
        reason=raw.reason,
        preload_content=False,
        decode_content=False,
        original_response=raw._original_response,
        retries=raw.retries,
        enforce_content_length=False,
        request_method=prepared.method,
        request_url=raw.url,
    )


def _decoded(response: httpx.Response, prepared: requests.PreparedRequest) -> bytes:
    """``response``'s content, decoded as its ``Content-Encoding`` says; a body that does not
    decode raises requests' own ``ContentDecodingError``, as a bare session's read does."""
    try:
        return response.read()
    except httpx.DecodingError as exc:
        raise requests.exceptions.ContentDecodingError(exc, request=prepared) from exc


def _native(
    response: httpx.Response, prepared: requests.PreparedRequest, adapter: HTTPAdapter, stream: bool
) -> requests.Response:
    """The transport's answer as the ``requests.Response`` the caller gets; one sent with
    ``stream=True`` keeps a ``raw`` to read the body from, as bare requests does
    (``shutil.copyfileobj(response.raw, file)``), though the exchange read it."""
    result: FailoverResult = response.extensions["failover"]
    body: _Body | None = response.extensions.get(_NATIVE)
    if body is None:  # a stale copy or the fallback's answer
        native = requests.Response()
        native.status_code = response.status_code
        native.headers = CaseInsensitiveDict(response.headers.items())
        native.reason = response.reason_phrase
        native.url = prepared.url or ""
        native.request = prepared
        native.connection = adapter
        native.encoding = get_encoding_from_headers(native.headers)
        native._content = content = _decoded(response, prepared)
        native._content_consumed = True  # type: ignore[attr-defined]  # requests' own flag, missing from its stubs
        if stream:  # a raw over the content, which is decoded: it names no encoding
            plain = {name: value for name, value in native.headers.items() if name.lower() != "content-encoding"}
            native.raw = HTTPResponse(
                _Replay(iter((content,))),  # type: ignore[arg-type]  # as in _replayed
                plain,
                native.status_code,
                reason=native.reason,
                preload_content=False,
                decode_content=False,
                enforce_content_length=False,
                request_method=prepared.method,
                request_url=native.url,
            )
    else:
        native = body.native
        if body.ended:  # read to its end by the exchange: the whole body is in ``seen``
            # Without a Content-Encoding those bytes are the content: no need for httpx's read,
            # its decoders and its checks (some 400 opcodes a request).
            native._content = _decoded(response, prepared) if "content-encoding" in body.named else b"".join(body.seen)
            native._content_consumed = True  # type: ignore[attr-defined]  # requests' own flag, missing from its stubs
            if stream:  # urllib3's response is read to its end: its bytes again
                native.raw = _replayed(native.raw, _Replay(iter(body.seen)), prepared)
        elif response.stream is not body:  # partly read (over the read limit): what was read, then the rest
            native.raw = _replayed(native.raw, _Replay(response.iter_raw(), _closer(response, native.raw)), prepared)
    native.failover = result  # type: ignore[attr-defined]  # the result's documented place on a requests.Response
    return native
