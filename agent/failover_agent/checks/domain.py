"""The pinned probe of one domain: one attempt, no failover, one fresh connection, timed.

Like blackbox_exporter: the agent resolves the name itself (phase ``dns``), connects to the
address with the original ``Host`` header and TLS server name, so ``connect`` and ``tls``
time exactly one TCP connect and one handshake; then ``ttfb`` (request written to response
head) and ``transfer`` (head to end of body). The exchange is :func:`failover_agent.wire.exchange`;
``error.type`` is the library's classification of the httpx error it raises, except that a
timeout while resolving is ``dns_timeout`` (the library calls every timeout before a
connection ``connect_timeout``). An https probe also reports the earliest expiry of the
verified chain of its own handshake (:mod:`.certs`).
"""

from __future__ import annotations

import asyncio
import functools
import ssl
from time import perf_counter

import httpx

from pytest_failover import Domain, error_type_of

from .. import wire
from ..config import ProbeConfig
from .body import check_body
from .certs import earliest_expiry, handshakes, watch_handshakes
from .result import ProbeResult

__all__ = ["USER_AGENT", "DomainProber"]

USER_AGENT = "failover-agent"

# request headers the probe writes itself, whatever the configuration says
_OWN_HEADERS = frozenset({"host", "connection", "content-length", "transfer-encoding"})
_WITH_BODY = frozenset({"POST", "PUT", "PATCH"})

Head = tuple[bytes, tuple[tuple[bytes, bytes], ...]]


Origin = tuple[str, str, int, bytes]
"""What a probe needs of its domain: scheme, host, port and the ``Host`` header's value."""


@functools.lru_cache(maxsize=wire.CACHE_SIZE)
def _domain(url: str) -> Origin:
    """``Domain.parse(url)``'s origin, remembered (parsing costs ~40 µs a probe; the tuple is
    a third of the Domain value's memory)."""
    domain = Domain.parse(url)
    return domain.scheme, domain.host, domain.effective_port, domain.netloc.encode("latin-1")


@functools.lru_cache(maxsize=wire.CACHE_SIZE)
def _head(method: str, path: str, extra: tuple[tuple[str, str], ...]) -> Head:
    """The probe's request target and headers but ``Host`` (which :func:`_with_host` puts
    first): ``User-Agent: failover-agent`` and ``Accept: */*`` unless the configuration sets
    them, ``Connection: close``. Remembered without the host, so domains probed alike share
    one entry (one per domain was 0.7 MiB at 1,000 domains)."""
    headers = {"user-agent": ("User-Agent", USER_AGENT), "accept": ("Accept", "*/*")}
    for name, value in extra:
        if name.lower() not in _OWN_HEADERS:
            headers[name.lower()] = (name, value)
    headers["connection"] = ("Connection", "close")
    if method in _WITH_BODY:
        headers["content-length"] = ("Content-Length", "0")
    target = httpx.URL(path).raw_path  # percent-encoded as httpx would
    return target, tuple((k.encode("latin-1"), v.encode("latin-1")) for k, v in headers.values())


def _with_host(netloc: bytes, headers: tuple[tuple[bytes, bytes], ...]) -> tuple[tuple[bytes, bytes], ...]:
    return ((b"Host", netloc), *headers)


def _phases(progress: wire.Progress) -> dict[str, float]:
    """The phases the probe got through (``dns`` also when resolution failed)."""
    phases: dict[str, float] = {}
    p = progress
    for name, begin, end in (("dns", p.start, p.resolved), ("connect", p.resolved, p.connected),
                             ("tls", p.connected, p.secured), ("ttfb", p.sent, p.head),
                             ("transfer", p.head, p.end)):
        if begin and end:
            phases[name] = max(0.0, end - begin)
    return phases


class DomainProber:
    """Runs pinned, single-attempt probes, each on its own connection, with the shared
    verifying :class:`ssl.SSLContext` (whose handshakes it watches: :func:`.certs.watch_handshakes`)."""

    def __init__(self, context: ssl.SSLContext) -> None:
        watch_handshakes(context)
        self._context = context

    async def aclose(self) -> None:
        """Nothing to release: every probe closes its own connection."""

    async def probe(self, url: str, cfg: ProbeConfig) -> ProbeResult:
        """Probe ``url`` (a domain's base URL) once; never raises."""
        start = perf_counter()
        progress = wire.Progress()
        try:
            scheme, host, port, netloc = _domain(url)
            target, shared = _head(cfg.method, cfg.path, tuple(cfg.headers.items()))
            headers = _with_host(netloc, shared)
            with handshakes() as seen:
                answer = await wire.exchange(
                    cfg.method, target, headers,
                    scheme=scheme, host=host, port=port, server_hostname=host, context=self._context,
                    deadline=asyncio.get_running_loop().time() + cfg.timeout, progress=progress,
                )
            expiry = earliest_expiry(seen[-1]) if seen else None
            content = answer.body
            if answer.encoding and cfg.json_check is not None:
                content = wire.decoded(answer, progress)
        except Exception as exc:  # a probe never kills its job
            return self._failed(start, progress, exc, cfg)
        phases = _phases(progress)
        total = phases["total"] = perf_counter() - start
        status = answer.status
        if status not in cfg.expected_status:
            return ProbeResult(False, status, str(status), total, phases,
                               detail=f"status {status} not in {cfg.expected_status}",
                               cert_not_after=expiry)
        reason = check_body(content, cfg.json_check)
        if reason is not None:
            return ProbeResult(False, status, "body_mismatch", total, phases, detail=reason,
                               cert_not_after=expiry)
        return ProbeResult(True, status, None, total, phases, cert_not_after=expiry)

    @staticmethod
    def _failed(start: float, progress: wire.Progress, exc: Exception, cfg: ProbeConfig) -> ProbeResult:
        phases = _phases(progress)
        total = phases["total"] = perf_counter() - start
        step = progress.step
        if isinstance(exc, httpx.TimeoutException):
            error = "dns_timeout" if step is wire.Step.RESOLVE else error_type_of(exc)
            detail = f"timed out after {cfg.timeout:g} s ({step.value})"
        else:
            error, detail = error_type_of(exc), str(exc) or type(exc).__name__
        return ProbeResult(False, None, error, total, phases, detail=detail)
