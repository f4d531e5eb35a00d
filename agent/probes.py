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
import json
import socket
import ssl
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from pytest_failover._classify import error_type_of
from pytest_failover._pool import Domain

from .config import JsonCheck, ProbeConfig, ReadinessConfig

__all__ = [
    "CertInfo",
    "DomainProber",
    "HealthAnswer",
    "ProbeResult",
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


async def resolve(host: str, port: int) -> tuple[str, int]:
    """The first address and port ``getaddrinfo`` returns for ``host`` (raises socket.gaierror)."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    if not infos:
        raise socket.gaierror(socket.EAI_NONAME, f"no address for {host}")
    address = infos[0][4]
    return str(address[0]), int(address[1])


class _Timeline:
    """Collects httpcore's trace events into phase timings."""

    def __init__(self) -> None:
        self.marks: dict[str, float] = {}

    async def __call__(self, event: str, info: Mapping[str, Any]) -> None:
        self.marks[event] = time.perf_counter()

    def span(self, start: str, end: str) -> float | None:
        a, b = self.marks.get(start), self.marks.get(end)
        return None if a is None or b is None else max(0.0, b - a)

    def last_phase(self) -> str:
        if "http11.receive_response_headers.started" in self.marks:
            return "ttfb"
        if "connection.start_tls.started" in self.marks and "connection.start_tls.complete" not in self.marks:
            return "tls"
        return "connect"


def ssl_context(ca_file: str | None) -> ssl.SSLContext:
    """The verifying TLS context every probe shares (built once: it costs ~30 ms)."""
    if ca_file:
        return ssl.create_default_context(cafile=ca_file)
    return httpx.create_ssl_context(trust_env=True)


class DomainProber:
    """Runs pinned, single-attempt probes with one fresh connection each."""

    def __init__(self, context: ssl.SSLContext) -> None:
        self._context = context
        self._client = httpx.AsyncClient(
            verify=context,
            trust_env=False,
            follow_redirects=False,
            limits=httpx.Limits(max_keepalive_connections=0, max_connections=None),
        )

    async def aclose(self) -> None:
        await self._client.aclose()

    async def probe(self, url: str, cfg: ProbeConfig) -> ProbeResult:
        """Probe ``url`` (a domain's base URL) once; never raises."""
        start = time.perf_counter()
        phases: dict[str, float] = {}
        timeline = _Timeline()
        try:
            return await asyncio.wait_for(self._run(url, cfg, start, phases, timeline), cfg.timeout)
        except asyncio.TimeoutError:
            phase = timeline.last_phase() if "dns" in phases else "dns"
            error = {"dns": "dns_timeout", "connect": "connect_timeout", "tls": "connect_timeout"}.get(
                phase, "read_timeout"
            )
            self._fill(phases, timeline)
            return self._failed(start, phases, error, f"timed out after {cfg.timeout} s ({phase})")
        except httpx.HTTPError as exc:
            self._fill(phases, timeline)
            return self._failed(start, phases, error_type_of(exc), str(exc) or type(exc).__name__)
        except Exception as exc:  # a probe never kills its job
            cls = type(exc)
            return self._failed(start, phases, f"{cls.__module__}.{cls.__qualname__}", str(exc))

    async def _run(
        self, url: str, cfg: ProbeConfig, start: float, phases: dict[str, float], timeline: _Timeline
    ) -> ProbeResult:
        domain = Domain.parse(url)
        try:
            address, port = await resolve(domain.host, domain.effective_port)
        except socket.gaierror as exc:
            phases["dns"] = time.perf_counter() - start
            return self._failed(start, phases, "dns_error", str(exc))
        phases["dns"] = time.perf_counter() - start
        literal = f"[{address}]" if ":" in address else address
        target = f"{domain.scheme}://{literal}:{port}{cfg.path}"
        remaining = max(0.001, cfg.timeout - (time.perf_counter() - start))
        headers = {**cfg.headers, "Host": domain.netloc}
        request = self._client.build_request(
            cfg.method,
            target,
            headers=headers,
            timeout=httpx.Timeout(remaining),
            extensions={"sni_hostname": domain.host, "trace": timeline},
        )
        response = await self._client.send(request, stream=True)
        try:
            transfer_start = time.perf_counter()
            content = await response.aread()
            phases["transfer"] = time.perf_counter() - transfer_start
        finally:
            await response.aclose()
        self._fill(phases, timeline)
        total = time.perf_counter() - start
        phases["total"] = total
        status = response.status_code
        if status not in cfg.expected_status:
            return ProbeResult(False, status, str(status), total, phases,
                               detail=f"status {status} not in {cfg.expected_status}")
        reason = check_body(content, cfg.json_check)
        if reason is not None:
            return ProbeResult(False, status, "body_mismatch", total, phases, detail=reason)
        return ProbeResult(True, status, None, total, phases)

    @staticmethod
    def _fill(phases: dict[str, float], timeline: _Timeline) -> None:
        for name, start, end in (
            ("connect", "connection.connect_tcp.started", "connection.connect_tcp.complete"),
            ("tls", "connection.start_tls.started", "connection.start_tls.complete"),
            ("ttfb", "http11.send_request_headers.started", "http11.receive_response_headers.complete"),
        ):
            value = timeline.span(start, end)
            if value is not None:
                phases[name] = value

    @staticmethod
    def _failed(start: float, phases: dict[str, float], error: str, detail: str) -> ProbeResult:
        total = time.perf_counter() - start
        phases["total"] = total
        return ProbeResult(False, None, error, total, phases, detail=detail)


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
        loose = ssl.create_default_context()
        loose.check_hostname = False
        loose.verify_mode = ssl.CERT_NONE
        ders = await _handshake(address, port, domain.host, loose)
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
