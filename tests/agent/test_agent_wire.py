"""The probes' wire: every entry of the one exception map, and the same failure seen the same
way by the pinned probe and by the pool probe's transport."""

from __future__ import annotations

import asyncio
import socket
import ssl
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import h11
import httpx
import pytest
from failover_agent import wire
from failover_agent.checks.domain import DomainProber
from failover_agent.config import ProbeConfig
from failover_agent.wire import EXCEPTION_MAP, ProbeTransport, Progress, Step, map_exceptions

from pytest_failover import error_type_of

# (step, what is raised, what it must become, its error.type): one row per map entry
CASES: list[tuple[Step, Exception, type[httpx.RequestError], str]] = [
    (Step.BUILD, h11.LocalProtocolError("Illegal header name b'bad name'"), httpx.LocalProtocolError,
     "httpx.LocalProtocolError"),
    (Step.RESOLVE, TimeoutError(), httpx.ConnectTimeout, "connect_timeout"),
    (Step.RESOLVE, socket.gaierror(socket.EAI_NONAME, "Name or service not known"), httpx.ConnectError,
     "dns_error"),
    (Step.RESOLVE, OSError("resolver gone"), httpx.ConnectError, "connect_error"),
    (Step.CONNECT, TimeoutError(), httpx.ConnectTimeout, "connect_timeout"),
    (Step.CONNECT, ConnectionRefusedError(111, "Connection refused"), httpx.ConnectError,
     "connection_refused"),
    (Step.TLS, TimeoutError(), httpx.ConnectTimeout, "connect_timeout"),
    (Step.TLS, ssl.SSLCertVerificationError(1, "certificate verify failed: certificate has expired"),
     httpx.ConnectError, "server_certificate_invalid"),
    (Step.TLS, ConnectionResetError(104, "Connection reset by peer"), httpx.ConnectError,
     "connection_reset"),
    (Step.HTTP, TimeoutError(), httpx.ReadTimeout, "read_timeout"),
    (Step.HTTP, h11.RemoteProtocolError("Server disconnected without sending a response."),
     httpx.RemoteProtocolError, "remote_protocol_error"),
    (Step.HTTP, ConnectionResetError(104, "Connection reset by peer"), httpx.ReadError, "connection_reset"),
    (Step.DECODE, zlib.error("Error -3 while decompressing data: incorrect header check"),
     httpx.DecodingError, "httpx.DecodingError"),
]


def _entry(step: Step, exc: Exception) -> tuple[Step, type[Exception]]:
    """The map entry that catches ``exc`` at ``step`` (the first that matches)."""
    for at, source, _target in EXCEPTION_MAP:
        if at is step and isinstance(exc, source):
            return at, source
    raise AssertionError(f"nothing in the map catches {exc!r} at {step}")


def test_the_cases_go_through_every_entry_of_the_map() -> None:
    """Each (step, source) of the map is reached by exactly one case, and nothing else is."""
    reached = [_entry(step, exc) for step, exc, _target, _type in CASES]
    assert sorted(reached, key=str) == sorted([(at, source) for at, source, _ in EXCEPTION_MAP], key=str)


@pytest.mark.parametrize(("step", "exc", "target", "error_type"), CASES,
                         ids=[f"{s.value}-{type(e).__name__}" for s, e, _t, _n in CASES])
def test_each_source_becomes_its_httpx_error_with_the_cause_attached(
    step: Step, exc: Exception, target: type[httpx.RequestError], error_type: str
) -> None:
    """The mapped error is exactly the httpx class httpcore raises, caused by the original."""
    progress = Progress()
    progress.step = step
    request = httpx.Request("GET", "https://api.example.com/health")
    with pytest.raises(httpx.RequestError) as caught, map_exceptions(progress, request):
        raise exc
    assert type(caught.value) is target
    assert caught.value.__cause__ is exc
    assert caught.value.request is request
    assert str(caught.value) == (str(exc) or f"TimeoutError during {step.value}")
    assert error_type_of(caught.value) == error_type


def test_within_a_step_the_more_specific_entry_comes_first() -> None:
    """No entry is shadowed by an earlier, broader one of the same step."""
    for i, (step, source, _) in enumerate(EXCEPTION_MAP):
        for earlier_step, earlier, _ in EXCEPTION_MAP[:i]:
            assert not (earlier_step is step and issubclass(source, earlier)), (step, source, earlier)


@pytest.mark.parametrize(("step", "exc"), [
    (Step.BUILD, OSError("not a build error")),
    (Step.HTTP, zlib.error("not read from the wire")),
    (Step.DECODE, OSError("not a decoding error")),
    (Step.TLS, RuntimeError("a bug")),
])
def test_what_the_map_does_not_list_propagates_unchanged(step: Step, exc: Exception) -> None:
    """An exception the map has no entry for, at that step, is not disguised."""
    progress = Progress()
    progress.step = step
    with pytest.raises(type(exc)) as caught, map_exceptions(progress):
        raise exc
    assert caught.value is exc


Answer = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@asynccontextmanager
async def raw_server(answer: Answer) -> AsyncIterator[int]:
    """A loopback server that runs ``answer`` on each connection; yields its port."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await answer(reader, writer)
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        yield int(server.sockets[0].getsockname()[1])
    finally:
        server.close()
        await server.wait_closed()


async def garbage(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await reader.read(100)
    writer.write(b"SSH-2.0-OpenSSH\r\n\r\n")
    await writer.drain()


async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Accept, then close without a word (during the TLS handshake for https)."""


async def both_error_types(url: str) -> tuple[str | None, str]:
    """The pinned probe's error.type for ``url`` and the one of ProbeTransport's exception."""
    context = ssl.create_default_context()
    prober = DomainProber(context)
    result = await prober.probe(url, ProbeConfig(path="/health", timeout=2.0, interval=5.0))
    async with httpx.AsyncClient(transport=ProbeTransport(context), trust_env=False) as client:
        with pytest.raises(httpx.TransportError) as caught:
            await client.get(url + "/health", timeout=2.0)
    return result.error_type, error_type_of(caught.value)


async def test_the_pinned_probe_and_the_transport_name_a_failure_alike() -> None:
    """Refused, garbage and a hang-up in the TLS handshake: one exchange, one error.type."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = int(s.getsockname()[1])
    assert await both_error_types(f"http://127.0.0.1:{closed}") == ("connection_refused", "connection_refused")
    async with raw_server(garbage) as port:
        assert await both_error_types(f"http://127.0.0.1:{port}") == ("remote_protocol_error",) * 2
    async with raw_server(hang_up) as port:
        domain, transport = await both_error_types(f"https://127.0.0.1:{port}")
    assert domain == transport and domain in {"tls_error", "connection_reset"}, (domain, transport)


async def test_a_timeout_names_the_step_it_happened_in() -> None:
    """No answer within the probe's timeout: read_timeout, with the step in the detail."""
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(2)

    async with raw_server(silent) as port:
        prober = DomainProber(ssl.create_default_context())
        result = await prober.probe(f"http://127.0.0.1:{port}",
                                    ProbeConfig(path="/", timeout=0.2, interval=5.0))
    assert (result.success, result.error_type) == (False, "read_timeout")
    assert result.detail == "timed out after 0.2 s (http)"
    assert {"dns", "connect"} <= set(result.phases) and "ttfb" not in result.phases


async def test_requests_and_parsed_domains_are_remembered_within_one_bound() -> None:
    """Every memo of the probes is bounded by the one CACHE_SIZE."""
    from failover_agent.checks import domain

    for memo in (wire._ip_literal, domain._domain, domain._head):
        assert memo.cache_parameters()["maxsize"] == wire.CACHE_SIZE
