"""Readiness of a backup: could it take the primary's traffic right now?

Three checks, each ``(ready, detail)``:

- ``cert`` (https backups): a TLS handshake (:func:`failover_agent.wire.peer_certificates`)
  gives the expiry of the leaf and of the earliest-expiring certificate of the chain. An
  invalid certificate (expired, untrusted) is not ready; its expiry is still read, through a
  second handshake that does not verify.
- ``cors``: a preflight from each configured origin; the backup's normalised answer must
  equal the primary's (when the primary answers at all).
- ``health``: the probe's path (or ``health_path``) and ``health_field`` must answer as on
  the primary; with the primary down, the backup must simply be healthy.
"""

from __future__ import annotations

import asyncio
import functools
import ssl
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from pytest_failover import Domain, error_type_of

from .. import wire
from ..config import ProbeConfig, ReadinessConfig
from .body import json_field
from .certs import not_after

__all__ = [
    "CertInfo",
    "HealthAnswer",
    "ReadinessResult",
    "check_readiness",
    "cors_preflight",
    "fetch_certificates",
    "health_answer",
]


@dataclass(frozen=True, slots=True)
class CertInfo:
    """Expiry (unix time) of the leaf and of the earliest-expiring certificate of the chain."""

    leaf_not_after: float
    chain_not_after: float
    verified: bool
    detail: str = ""


@dataclass(frozen=True, slots=True)
class HealthAnswer:
    """A domain's answer to the health request: its status and the compared field's value."""

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


@functools.cache
def _loose_context() -> ssl.SSLContext:
    """A non-verifying context, to read an invalid chain's expiry (built once: ~30 ms)."""
    loose = ssl.create_default_context()
    loose.check_hostname = False
    loose.verify_mode = ssl.CERT_NONE
    return loose


async def fetch_certificates(url: str, context: ssl.SSLContext, timeout: float) -> CertInfo:
    """Handshake with the domain and read the expiry of its leaf and chain, within ``timeout``.

    The chain is the verified one when verification succeeds; otherwise (an expired or
    untrusted certificate) the handshake is repeated without verification so the expiry can
    still be reported. Errors are httpx exceptions (see :mod:`failover_agent.wire`).
    """
    domain = Domain.parse(url)
    deadline = asyncio.get_running_loop().time() + timeout
    host, port = domain.host, domain.effective_port
    verified, detail = True, ""
    try:
        ders = await wire.peer_certificates(host, port, server_hostname=host, context=context,
                                            deadline=deadline)
    except httpx.ConnectError as exc:
        cause = exc.__cause__
        if not isinstance(cause, ssl.SSLCertVerificationError):
            raise
        verified, detail = False, cause.verify_message or str(cause)
        ders = await wire.peer_certificates(host, port, server_hostname=host, context=_loose_context(),
                                            deadline=deadline)
    expiries = [not_after(der) for der in ders]
    return CertInfo(expiries[0], min(expiries), verified, detail)


_CORS_HEADERS = (
    "access-control-allow-origin",
    "access-control-allow-methods",
    "access-control-allow-headers",
    "access-control-allow-credentials",
    "access-control-expose-headers",
)
_CORS_LISTS = frozenset({"access-control-allow-methods", "access-control-allow-headers",
                         "access-control-expose-headers"})


def _cors_view(response: httpx.Response) -> dict[str, Any]:
    view: dict[str, Any] = {"status_ok": response.status_code < 400}
    for name in _CORS_HEADERS:
        value = response.headers.get(name)
        if value is None:
            view[name] = None
        elif name in _CORS_LISTS:
            view[name] = sorted({v.strip().lower() for v in value.split(",") if v.strip()})
        else:
            view[name] = value.strip()
    return view


async def cors_preflight(client: httpx.AsyncClient, url: str, origin: str, method: str, path: str,
                         timeout: float) -> dict[str, Any] | str:
    """The normalised CORS answer of ``url`` to a preflight from ``origin`` (or an error type)."""
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
    """``url``'s answer to the health request (``value``: ``field_name``'s, if one is set)."""
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


async def _cert_check(backup: str, context: ssl.SSLContext, cfg: ReadinessConfig,
                      now: float) -> tuple[tuple[bool, str], CertInfo | None]:
    try:
        cert = await fetch_certificates(backup, context, cfg.timeout)
    except Exception as exc:  # reported, never raised
        return (False, f"handshake failed: {error_type_of(exc)}: {exc}"), None
    left = min(cert.leaf_not_after, cert.chain_not_after) - now
    if not cert.verified:
        return (False, f"certificate not valid: {cert.detail}"), cert
    if left < cfg.cert_warning_days * 86400:
        return (False, f"certificate expires in {left / 86400:.1f} days (< {cfg.cert_warning_days:g})"), cert
    return (True, f"certificate valid for {left / 86400:.0f} days"), cert


async def _cors_check(client: httpx.AsyncClient, primary: str, backup: str, cfg: ReadinessConfig,
                      path: str) -> tuple[bool, str]:
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
    return not mismatches, "; ".join(mismatches) or "same as primary"


async def _health_check(client: httpx.AsyncClient, primary: str, backup: str, cfg: ReadinessConfig,
                        probe: ProbeConfig) -> tuple[bool, str]:
    path = cfg.health_path or probe.path
    want, got = await asyncio.gather(
        health_answer(client, primary, path, cfg.health_field, cfg.timeout),
        health_answer(client, backup, path, cfg.health_field, cfg.timeout),
    )
    if got.error is not None:
        return False, f"backup failed ({got.error})"
    if want.error is not None or want.status not in probe.expected_status:
        return got.status in probe.expected_status, f"primary unavailable; backup answered {got.status}"
    if (want.status, want.value) != (got.status, got.value):
        return False, f"backup answered {got.status} {got.value!r}, primary {want.status} {want.value!r}"
    return True, "same as primary"


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
        checks["cert"], cert = await _cert_check(backup, context, cfg, now)
    if cfg.cors_origins:
        checks["cors"] = await _cors_check(client, primary, backup, cfg, probe.path)
    checks["health"] = await _health_check(client, primary, backup, cfg, probe)
    return ReadinessResult(checks, cert)
