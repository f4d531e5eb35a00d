"""Certificates for fake domains: one test CA per ``FakeDomains``, a leaf per host and fault.

``trustme`` (and through it ``cryptography``) is imported here, lazily, so that
``pytest_failover`` itself never needs it.
"""

from __future__ import annotations

import datetime
import ssl
import threading
from functools import cache
from typing import Any

from ._faults import Certificate

__all__ = ["Certificates", "certifi_roots", "import_trustme"]

#: The name on the certificate a ``tls_wrong_host`` domain presents.
WRONG_HOST_NAME = "wrong-host.invalid"


def import_trustme() -> Any:
    try:
        import trustme
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "the outage simulator needs trustme: pip install 'pytest-failover[simulator]'"
        ) from exc
    return trustme


@cache
def certifi_roots() -> bytes:
    """The public roots clients trust by default (certifi's bundle), kept in every test bundle."""
    try:
        import certifi
    except ImportError:  # pragma: no cover - httpx depends on certifi
        return b""
    with open(certifi.where(), "rb") as f:
        return f.read()


class Certificates:
    """The test CA of one ``FakeDomains`` and a server ``SSLContext`` per (host, certificate kind).

    Contexts are made on first use (a leaf costs about half a millisecond) and
    cached; thread-safe.
    """

    def __init__(self) -> None:
        trustme = import_trustme()
        self.ca: Any = trustme.CA(organization_name="pytest-failover test CA")  # trustme.CA
        self._rogue: Any = None  # the CA of tls_untrusted, made on first use
        self._ca_pem: bytes | None = None
        self._lock = threading.Lock()
        self._contexts: dict[tuple[str, Certificate, datetime.datetime | None], ssl.SSLContext] = {}

    @property
    def ca_pem(self) -> bytes:
        if self._ca_pem is None:  # one bytes object: hashed once as part of a bundle key
            self._ca_pem = bytes(self.ca.cert_pem.bytes())
        return self._ca_pem

    def context(
        self, host: str, kind: Certificate, not_after: datetime.datetime | None = None
    ) -> ssl.SSLContext:
        """A server context presenting the ``kind`` certificate for ``host``."""
        key = (host, kind, not_after if kind is Certificate.GOOD else None)
        with self._lock:
            ctx = self._contexts.get(key)
            if ctx is None:
                ctx = self._contexts[key] = self._make(host, kind, not_after)
            return ctx

    def _make(
        self, host: str, kind: Certificate, not_after: datetime.datetime | None
    ) -> ssl.SSLContext:
        now = datetime.datetime.now(datetime.UTC)
        match kind:
            case Certificate.GOOD:
                cert = self.ca.issue_cert(host, not_after=not_after)
            case Certificate.EXPIRED:
                cert = self.ca.issue_cert(
                    host,
                    not_before=now - datetime.timedelta(days=30),
                    not_after=now - datetime.timedelta(days=1),
                )
            case Certificate.WRONG_HOST:
                cert = self.ca.issue_cert(WRONG_HOST_NAME)
            case Certificate.UNTRUSTED:
                if self._rogue is None:
                    self._rogue = import_trustme().CA(organization_name="untrusted test CA")
                cert = self._rogue.issue_cert(host)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.set_alpn_protocols(["http/1.1"])
        cert.configure_cert(ctx)
        return ctx
