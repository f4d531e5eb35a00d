"""The checks themselves: pinned domain probes, pool probes and readiness checks.

Nothing here schedules or exports; each check is an ``async`` function that
returns a frozen result value and never raises (an unexpected exception becomes a
failed result whose ``error_type`` is the exception's qualified name).

Domain probes follow blackbox_exporter: one fresh connection per probe, no
retries, and phase timings. The name is resolved by the agent itself (phase
``dns``), then the request goes to the resolved address and port with the
original ``Host`` header and TLS server name, so the ``connect`` and ``tls``
phases measure exactly one TCP connect and one handshake.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import ipaddress
import json
import socket
import ssl
import time
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import h11
import httpx

from pytest_failover._classify import error_type_of
from pytest_failover._pool import Domain

from .config import JsonCheck, ProbeConfig, ReadinessConfig

__all__ = [
    "CertInfo",
    "DomainProber",
    "HealthAnswer",
    "ProbeResult",
    "ProbeTransport",
    "ReadinessResult",
    "check_body",
    "fetch_certificates",
    "json_field",
    "resolve",
]

PHASES = ("dns", "connect", "tls", "ttfb", "transfer", "total")


@dataclass(frozen=True, slots=True)
class ProbeResult:
    """One probe of one domain (or of a pool, through the failover client)."""

    success: bool
    status: int | None
    error_type: str | None
    duration: float
    phases: Mapping[str, float] = field(default_factory=dict)
    at: float = field(default_factory=time.time)
    detail: str = ""
    # pool probes only
    served_by: str | None = None
    attempts: int = 0


def json_field(body: Any, dotted: str) -> Any:
    """The value at ``a.b.0.c`` in a parsed JSON document (KeyError if absent)."""
    current = body
    for part in dotted.split("."):
        if isinstance(current, list) and part.isdigit() and int(part) < len(current):
            current = current[int(part)]
        elif isinstance(current, dict) and part in current:
            current = current[part]
        else:
            raise KeyError(dotted)
    return current


def check_body(content: bytes, check: JsonCheck | None) -> str | None:
    """None if the body passes ``check``, else a short reason."""
    if check is None:
        return None
    try:
        value = json_field(json.loads(content), check.field)
    except (ValueError, KeyError):
        return f"JSON field {check.field!r} missing"
    if isinstance(value, bool) != isinstance(check.equals, bool) or value != check.equals:
        return f"JSON field {check.field!r} is {value!r}, expected {check.equals!r}"
    return None


@functools.lru_cache(maxsize=4096)
def _ip_literal(host: str) -> str | None:
    """``host`` as an IP address string, or None for a name (remembered: probes repeat)."""
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        return None


async def resolve(host: str, port: int) -> tuple[str, int]:
    """The first address and port ``getaddrinfo`` returns for ``host`` (raises socket.gaierror).

    An IP literal is its own address: no lookup (and no executor thread), as in
    blackbox_exporter."""
    literal = _ip_literal(host)
    if literal is not None:
        return literal, port
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    if not infos:
        raise socket.gaierror(socket.EAI_NONAME, f"no address for {host}")
    address = infos[0][4]
    return str(address[0]), int(address[1])


_MAX_HEAD = 64 * 1024  # largest response head accepted (h11's limit on an incomplete event)


def _completed(future: asyncio.Future[None]) -> bool:
    """The answer was read in full (not failed, not given up on)."""
    return future.done() and not future.cancelled() and future.exception() is None


def _retrieve(future: asyncio.Future[None]) -> None:
    if not future.cancelled():
        future.exception()


def _send(connection: h11.Connection, request: h11.Request, body: bytes) -> bytes:
    """The bytes of ``request`` and its ``body``, written by h11 (which checks the framing)."""
    out = connection.send(request) or b""
    if body:
        out += connection.send(h11.Data(data=body)) or b""
    return out + (connection.send(h11.EndOfMessage()) or b"")


class _Exchange(asyncio.Protocol):
    """One HTTP/1.1 request and its response on one fresh connection, timed.

    The request is written and the response parsed by ``h11``; this protocol only feeds
    it the bytes the connection receives and notes when the head and the end arrive.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, request: h11.Request, body: bytes = b"") -> None:
        self.done: asyncio.Future[None] = loop.create_future()
        # A connection can die after the probe gave up on it (timeout, failed handshake):
        # the error is then nobody's, and must not be logged as "never retrieved".
        self.done.add_done_callback(_retrieve)
        self.http = h11.Connection(h11.CLIENT, max_incomplete_event_size=_MAX_HEAD)
        # raises h11.LocalProtocolError for a request h11 will not write
        self.request_bytes = _send(self.http, request, body)
        self.status = 0
        self.encoding = ""
        self.reason = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.head_at = 0.0
        self.chunks: list[bytes] = []
        self.body: bytes = b""
        self.body_at = 0.0

    # protocol callbacks
    def data_received(self, data: bytes) -> None:
        if self.done.done():
            return
        self.http.receive_data(data)
        self._read_events()

    def eof_received(self) -> bool | None:
        self._at_eof()
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        if self.done.done():
            return
        if exc is not None:
            self.done.set_exception(exc)
        else:
            self._at_eof()

    def _at_eof(self) -> None:
        if self.done.done():
            return
        if not self.status and not self.http.trailing_data[0]:
            self.done.set_exception(h11.RemoteProtocolError("Server disconnected without sending a response."))
            return
        self.http.receive_data(b"")
        self._read_events()

    def _read_events(self) -> None:
        http = self.http
        try:
            while True:
                event = http.next_event()
                kind = type(event)
                if kind is h11.Data:
                    self.chunks.append(event.data)  # type: ignore[union-attr]
                elif kind is h11.Response:
                    self._head(event)  # type: ignore[arg-type]
                elif kind is h11.EndOfMessage:
                    self.body = b"".join(self.chunks)
                    self.body_at = time.perf_counter()
                    self.done.set_result(None)
                    return
                elif event is h11.NEED_DATA:
                    return
                elif kind is h11.ConnectionClosed or event is h11.PAUSED:
                    raise h11.RemoteProtocolError("Server disconnected without sending a response.")
                # h11.InformationalResponse (1xx): the final answer follows
        except h11.RemoteProtocolError as exc:
            self.done.set_exception(exc)

    def _head(self, event: h11.Response) -> None:
        self.head_at = time.perf_counter()
        self.status = event.status_code
        self.reason = event.reason
        self.headers = event.headers.raw_items()
        for name, value in event.headers:  # names lower-cased by h11
            if name == b"content-encoding":
                self.encoding = value.strip().lower().decode("latin-1")


def _decoded(body: bytes, encoding: str) -> bytes:
    if encoding in ("gzip", "x-gzip"):
        return zlib.decompress(body, 16 + zlib.MAX_WBITS)
    if encoding == "deflate":
        try:
            return zlib.decompress(body)
        except zlib.error:
            return zlib.decompress(body, -zlib.MAX_WBITS)
    return body


def ssl_context(ca_file: str | None) -> ssl.SSLContext:
    """The verifying TLS context every probe shares (built once: it costs ~30 ms)."""
    if ca_file:
        return ssl.create_default_context(cafile=ca_file)
    return httpx.create_ssl_context(trust_env=True)


_USER_AGENT = "failover-agent"
# request headers h11 writes from the message itself (and host, set from the URL)
_FRAMING_HEADERS = frozenset({"host", "connection", "content-length", "transfer-encoding"})


class _Marks:
    """Where a probe is (for a timeout's error type) and when each step happened."""

    __slots__ = ("at", "phase")

    def __init__(self) -> None:
        self.phase = "dns"
        self.at: dict[str, float] = {}


class DomainProber:
    """Runs pinned, single-attempt probes with one fresh connection each.

    A probe is one HTTP/1.1 exchange written directly on an asyncio protocol (no
    connection pool, no client object per probe): resolve, TCP connect, TLS handshake
    with the shared :class:`ssl.SSLContext`, one request with ``Connection: close``,
    the response read to its end. Low-level errors are raised as the httpx exception
    the same failure would raise in httpx (cause attached), so ``error.type`` comes
    from the library's one classifier.
    """

    def __init__(self, context: ssl.SSLContext) -> None:
        self._context = context
        self._requests: dict[tuple[str, str, str, tuple[tuple[str, str], ...]], h11.Request] = {}
        self._domains: dict[str, Domain] = {}

    async def aclose(self) -> None:
        self._requests.clear()
        self._domains.clear()

    def _domain(self, url: str) -> Domain:
        """``Domain.parse(url)``, remembered (a frozen value; parsing costs ~40 µs a probe)."""
        domain = self._domains.get(url)
        if domain is None:
            domain = Domain.parse(url)
            if len(self._domains) > 10_000:
                self._domains.clear()
            self._domains[url] = domain
        return domain

    def _request(self, cfg: ProbeConfig, netloc: str) -> h11.Request:
        """The probe's request as an h11 event (validated once, then reused: events are values)."""
        key = (cfg.method, cfg.path, netloc, tuple(cfg.headers.items()))
        request = self._requests.get(key)
        if request is None:
            headers = {"host": ("Host", netloc), "user-agent": ("User-Agent", _USER_AGENT),
                       "accept": ("Accept", "*/*")}
            for name, value in cfg.headers.items():
                if name.lower() not in _FRAMING_HEADERS:
                    headers[name.lower()] = (name, value)
            headers["connection"] = ("Connection", "close")
            if cfg.method in ("POST", "PUT", "PATCH"):
                headers["content-length"] = ("Content-Length", "0")
            target = httpx.URL(cfg.path).raw_path  # percent-encoded as httpx would
            request = h11.Request(method=cfg.method, target=target,
                                  headers=[(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers.values()])
            if len(self._requests) > 10_000:
                self._requests.clear()
            self._requests[key] = request
        return request

    async def probe(self, url: str, cfg: ProbeConfig) -> ProbeResult:
        """Probe ``url`` (a domain's base URL) once; never raises."""
        start = time.perf_counter()
        phases: dict[str, float] = {}
        marks = _Marks()
        try:
            async with asyncio.timeout(cfg.timeout):  # no extra task, unlike wait_for
                return await self._run(url, cfg, start, phases, marks)
        except TimeoutError:
            phase = marks.phase
            error = {"dns": "dns_timeout", "connect": "connect_timeout", "tls": "connect_timeout"}.get(
                phase, "read_timeout"
            )
            self._fill(phases, marks)
            return self._failed(start, phases, error, f"timed out after {cfg.timeout} s ({phase})")
        except httpx.HTTPError as exc:
            self._fill(phases, marks)
            return self._failed(start, phases, error_type_of(exc), str(exc) or type(exc).__name__)
        except Exception as exc:  # a probe never kills its job
            cls = type(exc)
            return self._failed(start, phases, f"{cls.__module__}.{cls.__qualname__}", str(exc))

    async def _run(
        self, url: str, cfg: ProbeConfig, start: float, phases: dict[str, float], marks: _Marks
    ) -> ProbeResult:
        domain = self._domain(url)
        try:
            address, port = await resolve(domain.host, domain.effective_port)
        except socket.gaierror as exc:
            phases["dns"] = time.perf_counter() - start
            return self._failed(start, phases, "dns_error", str(exc))
        phases["dns"] = time.perf_counter() - start
        status, content = await self._exchange(domain, address, port, cfg, marks)
        self._fill(phases, marks)
        total = time.perf_counter() - start
        phases["total"] = total
        if status not in cfg.expected_status:
            return ProbeResult(False, status, str(status), total, phases,
                               detail=f"status {status} not in {cfg.expected_status}")
        reason = check_body(content, cfg.json_check)
        if reason is not None:
            return ProbeResult(False, status, "body_mismatch", total, phases, detail=reason)
        return ProbeResult(True, status, None, total, phases)

    async def _exchange(
        self, domain: Domain, address: str, port: int, cfg: ProbeConfig, marks: _Marks
    ) -> tuple[int, bytes]:
        """Connect, handshake, send, read: the status and the (decoded) body."""
        loop = asyncio.get_running_loop()
        try:
            exchange = _Exchange(loop, self._request(cfg, domain.netloc))
        except h11.LocalProtocolError as exc:
            raise httpx.LocalProtocolError(str(exc)) from exc
        at = marks.at
        marks.phase = "connect"
        at["connect.start"] = time.perf_counter()
        try:
            transport, _ = await loop.create_connection(lambda: exchange, address, port)
        except OSError as exc:
            raise httpx.ConnectError(str(exc) or type(exc).__name__) from exc
        at["connect.end"] = time.perf_counter()
        try:
            if domain.scheme == "https":
                marks.phase = "tls"
                at["tls.start"] = at["connect.end"]
                try:
                    tls = await loop.start_tls(transport, exchange, self._context, server_hostname=domain.host)
                except (OSError, ssl.SSLError) as exc:
                    raise httpx.ConnectError(str(exc) or type(exc).__name__) from exc
                if tls is None:
                    raise httpx.ConnectError("TLS handshake did not complete")
                transport = tls
                at["tls.end"] = time.perf_counter()
            marks.phase = "http"
            at["send"] = time.perf_counter()
            transport.write(exchange.request_bytes)
            try:
                await exchange.done
            except h11.RemoteProtocolError as exc:
                raise httpx.RemoteProtocolError(str(exc)) from exc
            except OSError as exc:
                raise httpx.ReadError(str(exc) or type(exc).__name__) from exc
            at["head"] = exchange.head_at
            at["body"] = exchange.body_at
        finally:
            if _completed(exchange.done):
                transport.close()
            else:
                transport.abort()
        content = exchange.body
        if exchange.encoding and cfg.json_check is not None:
            try:
                content = _decoded(content, exchange.encoding)
            except zlib.error as exc:
                raise httpx.DecodingError(str(exc)) from exc
        return exchange.status, content

    @staticmethod
    def _fill(phases: dict[str, float], marks: _Marks) -> None:
        at = marks.at
        for name, start, end in (("connect", "connect.start", "connect.end"), ("tls", "tls.start", "tls.end"),
                                 ("ttfb", "send", "head"), ("transfer", "head", "body")):
            a, b = at.get(start), at.get(end)
            if a is not None and b is not None:
                phases[name] = max(0.0, b - a)

    @staticmethod
    def _failed(start: float, phases: dict[str, float], error: str, detail: str) -> ProbeResult:
        total = time.perf_counter() - start
        phases["total"] = total
        return ProbeResult(False, None, error, total, phases, detail=detail)


class ProbeTransport(httpx.AsyncBaseTransport):
    """An httpx transport made of the pinned probe's exchange: one fresh connection per
    request, HTTP/1.1, ``Connection: close``.

    The pool probe puts it under the real :class:`AsyncFailoverTransport`, so the
    failover logic, policy, breakers and telemetry are the library's own, while each
    attempt costs what a pinned probe costs instead of a pass through httpcore's
    connection pool. Timeouts come from the request's ``timeout`` extension: ``connect``
    bounds resolution, connect and TLS handshake; ``read`` bounds the whole answer.
    Errors are the httpx exceptions httpcore would raise, with the cause attached.
    """

    def __init__(self, context: ssl.SSLContext) -> None:
        self._context = context
        self._requests: dict[tuple[str, bytes, tuple[tuple[bytes, bytes], ...]], h11.Request] = {}

    def _request(self, method: str, target: bytes, headers: list[tuple[bytes, bytes]]) -> h11.Request:
        """The request as an h11 event; a pool probe repeats the same one, so h11 validates
        each distinct request once (events are values)."""
        key = (method, target, tuple(headers))
        event = self._requests.get(key)
        if event is None:
            event = h11.Request(method=method, target=target, headers=headers)
            if len(self._requests) > 1_000:
                self._requests.clear()
            self._requests[key] = event
        return event

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        scheme = url.scheme
        host = url.host
        port = url.port or (443 if scheme == "https" else 80)
        timeouts = request.extensions.get("timeout") or {}
        connect_timeout = timeouts.get("connect")
        read_timeout = timeouts.get("read")
        sni = request.extensions.get("sni_hostname") or host
        try:
            body = request.content  # httpx has read a plain body already: no pass over the stream
        except httpx.RequestNotRead:
            body = b"".join([chunk async for chunk in request.stream])  # type: ignore[union-attr]
        headers = [(name, value) for name, value in request.headers.raw
                   if name.lower() not in (b"connection", b"transfer-encoding", b"content-length")]
        if body or request.method in ("POST", "PUT", "PATCH"):
            headers.append((b"Content-Length", str(len(body)).encode()))
        headers.append((b"Connection", b"close"))
        loop = asyncio.get_running_loop()
        try:
            exchange = _Exchange(loop, self._request(request.method, url.raw_path, headers), body)
        except h11.LocalProtocolError as exc:
            raise httpx.LocalProtocolError(str(exc), request=request) from exc
        transport: asyncio.BaseTransport | None = None
        try:
            try:
                async with asyncio.timeout(connect_timeout):
                    transport = await self._connect(loop, exchange, scheme, host, port, sni)
            except TimeoutError as exc:
                raise httpx.ConnectTimeout(f"connect to {host}:{port} timed out", request=request) from exc
            assert isinstance(transport, asyncio.WriteTransport)
            transport.write(exchange.request_bytes)
            try:
                async with asyncio.timeout(read_timeout):
                    await exchange.done
            except TimeoutError as exc:
                raise httpx.ReadTimeout("timed out waiting for the answer", request=request) from exc
            except h11.RemoteProtocolError as exc:
                raise httpx.RemoteProtocolError(str(exc), request=request) from exc
            except OSError as exc:
                raise httpx.ReadError(str(exc) or type(exc).__name__, request=request) from exc
        finally:
            if transport is not None:
                if _completed(exchange.done):
                    transport.close()
                else:
                    transport.abort()  # type: ignore[attr-defined]
            if not exchange.done.done():
                exchange.done.cancel()
        return httpx.Response(
            exchange.status,
            headers=exchange.headers,
            stream=httpx.ByteStream(exchange.body),
            extensions={"http_version": b"HTTP/1.1", "reason_phrase": exchange.reason},
            request=request,
        )

    async def _connect(self, loop: asyncio.AbstractEventLoop, exchange: _Exchange, scheme: str, host: str,
                       port: int, sni: str) -> asyncio.BaseTransport:
        try:
            address, port = await resolve(host, port)
        except socket.gaierror as exc:
            raise httpx.ConnectError(str(exc)) from exc
        try:
            transport, _ = await loop.create_connection(lambda: exchange, address, port)
        except OSError as exc:
            raise httpx.ConnectError(str(exc) or type(exc).__name__) from exc
        if scheme != "https":
            return transport
        try:
            tls = await loop.start_tls(transport, exchange, self._context, server_hostname=sni)
        except BaseException as exc:
            transport.abort()
            if isinstance(exc, (OSError, ssl.SSLError)):
                raise httpx.ConnectError(str(exc) or type(exc).__name__) from exc
            raise
        if tls is None:
            transport.abort()
            raise httpx.ConnectError("TLS handshake did not complete")
        return tls


# --- readiness ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CertInfo:
    """Expiry (unix time) of the leaf and of the earliest-expiring certificate of the chain."""

    leaf_not_after: float
    chain_not_after: float
    verified: bool
    detail: str = ""


@dataclass(frozen=True, slots=True)
class HealthAnswer:
    status: int | None
    value: Any
    error: str | None = None


@dataclass(frozen=True, slots=True)
class ReadinessResult:
    """Readiness of one backup compared with its primary; ``checks[name] = (ready, detail)``."""

    checks: Mapping[str, tuple[bool, str]]
    cert: CertInfo | None
    at: float = field(default_factory=time.time)

    @property
    def ready(self) -> bool:
        return all(ok for ok, _ in self.checks.values())


def _not_after(der: bytes) -> float:
    from cryptography import x509

    cert = x509.load_der_x509_certificate(der)
    return cert.not_valid_after_utc.timestamp()


async def fetch_certificates(url: str, context: ssl.SSLContext, timeout: float) -> CertInfo:
    """Handshake with the domain and read the expiry of its leaf and chain.

    The chain is the verified one when verification succeeds; otherwise (an
    expired or untrusted certificate) the handshake is repeated without
    verification so the expiry can still be reported.
    """
    return await asyncio.wait_for(_fetch_certificates(url, context), timeout)


@functools.cache
def _loose_context() -> ssl.SSLContext:
    """A non-verifying context, to read an invalid chain's expiry (built once: ~30 ms)."""
    loose = ssl.create_default_context()
    loose.check_hostname = False
    loose.verify_mode = ssl.CERT_NONE
    return loose


async def _fetch_certificates(url: str, context: ssl.SSLContext) -> CertInfo:
    domain = Domain.parse(url)
    address, port = await resolve(domain.host, domain.effective_port)
    verified = True
    detail = ""
    try:
        ders = await _handshake(address, port, domain.host, context)
    except ssl.SSLCertVerificationError as exc:
        verified = False
        detail = exc.verify_message or str(exc)
        ders = await _handshake(address, port, domain.host, _loose_context())
    expiries = [_not_after(d) for d in ders]
    return CertInfo(expiries[0], min(expiries), verified, detail)


async def _handshake(address: str, port: int, host: str, context: ssl.SSLContext) -> list[bytes]:
    _reader, writer = await asyncio.open_connection(address, port, ssl=context, server_hostname=host)
    try:
        obj = writer.get_extra_info("ssl_object")
        ders: list[bytes] = []
        inner = getattr(obj, "_sslobj", obj)
        getter = getattr(obj, "get_verified_chain", None) or getattr(inner, "get_verified_chain", None)
        if context.verify_mode == ssl.CERT_NONE:
            getter = getattr(obj, "get_unverified_chain", None) or getattr(inner, "get_unverified_chain", None)
        if getter is not None:
            try:
                chain = getter() or []
                ders = [c if isinstance(c, bytes) else c.public_bytes(ssl._ssl.ENCODING_DER) for c in chain]  # type: ignore[attr-defined]
            except Exception:
                ders = []
        if not ders:
            leaf = obj.getpeercert(binary_form=True)
            ders = [leaf] if leaf else []
        if not ders:
            raise ssl.SSLError("the server sent no certificate")
        return ders
    finally:
        writer.close()
        with contextlib.suppress(OSError, ssl.SSLError):
            await writer.wait_closed()


_CORS_HEADERS = (
    "access-control-allow-origin",
    "access-control-allow-methods",
    "access-control-allow-headers",
    "access-control-allow-credentials",
    "access-control-expose-headers",
)


def _cors_view(response: httpx.Response) -> dict[str, Any]:
    view: dict[str, Any] = {"status_ok": response.status_code < 400}
    for name in _CORS_HEADERS:
        value = response.headers.get(name)
        if value is None:
            view[name] = None
        elif name in ("access-control-allow-methods", "access-control-allow-headers",
                      "access-control-expose-headers"):
            view[name] = sorted({v.strip().lower() for v in value.split(",") if v.strip()})
        else:
            view[name] = value.strip()
    return view


async def cors_preflight(client: httpx.AsyncClient, url: str, origin: str, method: str, path: str,
                         timeout: float) -> dict[str, Any] | str:
    """The normalised CORS answer of ``url`` to a preflight from ``origin`` (or an error string)."""
    try:
        response = await client.options(
            url + path,
            headers={"Origin": origin, "Access-Control-Request-Method": method},
            timeout=timeout,
        )
    except httpx.HTTPError as exc:
        return error_type_of(exc)
    return _cors_view(response)


async def health_answer(client: httpx.AsyncClient, url: str, path: str, field_name: str | None,
                        timeout: float) -> HealthAnswer:
    try:
        response = await client.get(url + path, timeout=timeout)
    except httpx.HTTPError as exc:
        return HealthAnswer(None, None, error_type_of(exc))
    value: Any = None
    if field_name:
        try:
            value = json_field(response.json(), field_name)
        except (ValueError, KeyError):
            value = "<missing>"
    return HealthAnswer(response.status_code, value)


async def check_readiness(
    client: httpx.AsyncClient,
    context: ssl.SSLContext,
    primary: str,
    backup: str,
    cfg: ReadinessConfig,
    probe: ProbeConfig,
    *,
    now: float | None = None,
) -> ReadinessResult:
    """Compare ``backup`` with ``primary``: certificate, CORS answers, health answer."""
    checks: dict[str, tuple[bool, str]] = {}
    cert: CertInfo | None = None
    now = time.time() if now is None else now
    if Domain.parse(backup).scheme == "https":
        try:
            cert = await fetch_certificates(backup, context, cfg.timeout)
        except Exception as exc:
            checks["cert"] = (False, f"handshake failed: {error_type_of(exc) if isinstance(exc, httpx.HTTPError) else type(exc).__name__}: {exc}")
        else:
            left = min(cert.leaf_not_after, cert.chain_not_after) - now
            warn = cfg.cert_warning_days * 86400
            if not cert.verified:
                checks["cert"] = (False, f"certificate not valid: {cert.detail}")
            elif left < warn:
                checks["cert"] = (False, f"certificate expires in {left / 86400:.1f} days (< {cfg.cert_warning_days:g})")
            else:
                checks["cert"] = (True, f"certificate valid for {left / 86400:.0f} days")
    path = probe.path
    if cfg.cors_origins:
        mismatches = []
        for origin in cfg.cors_origins:
            want, got = await asyncio.gather(
                cors_preflight(client, primary, origin, cfg.cors_method, path, cfg.timeout),
                cors_preflight(client, backup, origin, cfg.cors_method, path, cfg.timeout),
            )
            if isinstance(got, str):
                mismatches.append(f"{origin}: backup failed ({got})")
            elif isinstance(want, str):
                continue  # primary unavailable: nothing to compare with
            elif want != got:
                diff = sorted(k for k in want if want.get(k) != got.get(k))
                mismatches.append(f"{origin}: {', '.join(diff)} differ")
        checks["cors"] = (not mismatches, "; ".join(mismatches) or "same as primary")
    health_path = cfg.health_path or probe.path
    want_h, got_h = await asyncio.gather(
        health_answer(client, primary, health_path, cfg.health_field, cfg.timeout),
        health_answer(client, backup, health_path, cfg.health_field, cfg.timeout),
    )
    if got_h.error is not None:
        checks["health"] = (False, f"backup failed ({got_h.error})")
    elif want_h.error is not None or want_h.status not in probe.expected_status:
        ok = got_h.status in probe.expected_status
        checks["health"] = (ok, f"primary unavailable; backup answered {got_h.status}")
    elif (want_h.status, want_h.value) != (got_h.status, got_h.value):
        checks["health"] = (
            False,
            f"backup answered {got_h.status} {got_h.value!r}, primary {want_h.status} {want_h.value!r}",
        )
    else:
        checks["health"] = (True, "same as primary")
    return ReadinessResult(checks, cert)
