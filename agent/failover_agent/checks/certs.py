"""Certificate expiry, read from the handshake the pinned probe makes anyway.

blackbox_exporter reports ``probe_ssl_earliest_cert_expiry`` from each probe's own TLS
connection; so does the agent, for every https domain, primary included, at no extra
connection or handshake:

- :func:`watch_handshakes` sets the shared context's ``sslobject_class`` (the documented
  hook for the objects ``SSLContext.wrap_bio`` returns, which asyncio's TLS uses) to
  :class:`_WatchedSSLObject`;
- around its exchange, a probe opens :func:`handshakes`: a context variable holding a list.
  asyncio runs the handshake in callbacks scheduled from the probe's task, so they see the
  task's context, and a completed handshake appends its object to that probe's list only.
  Other users of the context (pool probes, readiness) have no list and are left alone;
- :func:`earliest_expiry` reads the verified chain of the last handshake (leaf first) and
  returns the earliest ``notAfter`` of it as a Unix time. A certificate that fails
  verification ends the handshake before it completes: no value (the probe fails with
  ``server_certificate_invalid`` instead).

Parsed expiries are remembered by the certificate's bytes: a probe of a known certificate
costs a dictionary lookup.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import ssl
from collections.abc import Iterator

from .. import wire

__all__ = ["earliest_expiry", "handshakes", "not_after", "watch_handshakes"]

_HANDSHAKES: contextvars.ContextVar[list[ssl.SSLObject] | None] = contextvars.ContextVar(
    "failover_agent_handshakes", default=None
)


class _WatchedSSLObject(ssl.SSLObject):
    """An SSLObject that hands itself to the probe of the current context once its
    handshake completes."""

    def do_handshake(self) -> None:
        super().do_handshake()  # raises SSLWantReadError until the handshake is done
        seen = _HANDSHAKES.get()
        if seen is not None:
            seen.append(self)


def watch_handshakes(context: ssl.SSLContext) -> None:
    """Let probes on ``context`` see their own completed handshakes (idempotent)."""
    context.sslobject_class = _WatchedSSLObject


@contextlib.contextmanager
def handshakes() -> Iterator[list[ssl.SSLObject]]:
    """The TLS handshakes completed by this task inside the block, oldest first."""
    seen: list[ssl.SSLObject] = []
    token = _HANDSHAKES.set(seen)
    try:
        yield seen
    finally:
        _HANDSHAKES.reset(token)


@functools.lru_cache(maxsize=wire.CACHE_SIZE)
def not_after(der: bytes) -> float:
    """The ``notAfter`` of a DER certificate, as a Unix time."""
    from cryptography import x509

    return x509.load_der_x509_certificate(der).not_valid_after_utc.timestamp()


def earliest_expiry(ssl_object: ssl.SSLObject) -> float | None:
    """The earliest ``notAfter`` of the connection's verified chain (None: no certificate)."""
    ders = wire.certificate_chain(ssl_object, verified=True)  # the reader peer_certificates uses
    return min(map(not_after, ders)) if ders else None
