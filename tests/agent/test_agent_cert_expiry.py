"""The pinned probe reads certificate expiry from its own TLS handshake (no second connection)."""

from __future__ import annotations

import asyncio
import datetime as dt
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trustme
from failover_agent.checks.domain import DomainProber
from failover_agent.config import ProbeConfig

ANSWER = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
UTC = dt.UTC


@asynccontextmanager
async def tls_server(context: ssl.SSLContext) -> AsyncIterator[tuple[int, list[int]]]:
    """A loopback https server answering 200; yields its port and a list counting connections."""
    connections: list[int] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(1)
        try:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(ANSWER)
            await writer.drain()
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=context)
    try:
        yield server.sockets[0].getsockname()[1], connections
    finally:
        server.close()
        await server.wait_closed()


def server_context(ca: trustme.CA, not_after: dt.datetime) -> ssl.SSLContext:
    """A server context with a leaf of ``ca`` for 127.0.0.1 that expires at ``not_after``."""
    cert = ca.issue_cert("127.0.0.1", not_after=not_after)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    cert.configure_cert(context)
    return context


CFG = ProbeConfig.model_validate({"path": "/health", "timeout": 5.0, "interval": 5.0})


async def test_https_probe_reports_the_earliest_expiry_of_its_own_handshake() -> None:
    """Two concurrent https probes each report their own server's notAfter, one connection each."""
    ca = trustme.CA()
    soon = dt.datetime(2031, 3, 4, 5, 6, 7, tzinfo=UTC)
    later = dt.datetime(2033, 1, 2, 3, 4, 5, tzinfo=UTC)
    client = ssl.create_default_context()
    ca.configure_trust(client)
    prober = DomainProber(client)
    async with tls_server(server_context(ca, soon)) as (port_a, seen_a), \
            tls_server(server_context(ca, later)) as (port_b, seen_b):
        a, b = await asyncio.gather(prober.probe(f"https://127.0.0.1:{port_a}", CFG),
                                    prober.probe(f"https://127.0.0.1:{port_b}", CFG))
    assert a.success and b.success, (a, b)
    # the CA (trustme: valid for decades) expires after both leaves: the leaf is the earliest
    assert a.cert_not_after == soon.timestamp()
    assert b.cert_not_after == later.timestamp()
    assert (len(seen_a), len(seen_b)) == (1, 1)  # no second handshake for the certificate


async def test_http_and_failed_verification_report_no_expiry() -> None:
    """An http probe has no certificate; an untrusted one fails the probe and reports none."""
    ca, other = trustme.CA(), trustme.CA()
    client = ssl.create_default_context()
    other.configure_trust(client)  # does not trust ``ca``
    prober = DomainProber(client)
    async with tls_server(server_context(ca, dt.datetime(2031, 1, 1, tzinfo=UTC))) as (port, _):
        untrusted = await prober.probe(f"https://127.0.0.1:{port}", CFG)
    assert (untrusted.success, untrusted.error_type, untrusted.cert_not_after) == (
        False, "server_certificate_invalid", None)

    async def plain(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(ANSWER)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(plain, "127.0.0.1", 0)
    try:
        result = await prober.probe(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}", CFG)
    finally:
        server.close()
        await server.wait_closed()
    assert (result.success, result.cert_not_after) == (True, None)
