"""The process-wide hooks that send fake names to fake servers and make their CA trusted.

Theory of operation
-------------------
Every fake host gets its own address in ``127.77.0.0/16`` (``allocate_address``).
``socket.getaddrinfo`` answers that address for registered fake names (and
raises the DNS faults); every other name goes to the real resolver. Clients then
connect to ``(fake address, 443 or 80)``: the patched ``socket.socket.connect``
and ``connect_ex`` turn that into the real ephemeral port of the right listener
(or a refusing / black-hole port for connect faults). Patching the socket
methods covers blocking clients (``socket.create_connection``, urllib3) and
asyncio, whose selector loop calls ``sock.connect`` itself; this is why
httpx's async path, which ignores the port ``getaddrinfo`` returns, still works.

Trust: while at least one ``FakeDomains`` intercepts, ``SSL_CERT_FILE`` and
``REQUESTS_CA_BUNDLE`` point at a bundle holding certifi's roots (or the
previous ``SSL_CERT_FILE``) plus every active test CA, and aiohttp's
import-time default context is swapped for one built from that bundle. All of
it is undone when the last one stops. The contexts of the opener urllib's
``urlopen()`` keeps get each test CA added instead (``_trust_urllib``).

Hooks are installed once, reference-counted, and protected by one lock; the
hot path reads an immutable tuple of active routers.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import ipaddress
import os
import socket
import ssl
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from ._errors import BlockedHostError, UnsupportedClientError
from ._tls import certifi_roots

__all__ = [
    "FAKE_NETWORK",
    "Router",
    "activate",
    "allocate_address",
    "check_event_loop",
    "normalize_host",
]

FAKE_NETWORK = ipaddress.IPv4Network("127.77.0.0/16")
_FAKE_PREFIX = "127.77."
_TRUST_VARIABLES = ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE")
#: aiohttp builds its verifying default context once, at import (aiohttp/connector.py).
_AIOHTTP_CONTEXT = "_SSL_CONTEXT_VERIFIED"


class Router(Protocol):
    """What an active ``FakeDomains`` tells the hooks."""

    @property
    def block_unknown_hosts(self) -> bool: ...

    @property
    def ca_pem(self) -> bytes: ...

    def resolve(self, host: str) -> str | None:
        """The fake address of ``host``, ``None`` if it is not ours; may raise ``gaierror``."""

    def redirect(self, address: str, port: int) -> tuple[str, int] | None:
        """Where a connect to ``(address, port)`` really goes, ``None`` if not ours."""

    def blocked_host(self, what: str) -> None:
        """Note that ``what`` was blocked (so a test can fail even if the error was swallowed)."""


_lock = threading.Lock()
_routers: tuple[Router, ...] = ()
_next_address = int(FAKE_NETWORK.network_address) + 1
_original: dict[str, Any] = {}
_saved_env: dict[str, str | None] = {}
_saved_aiohttp: list[Any] = []
_bundle_dir: tempfile.TemporaryDirectory[str] | None = None
_bundles: dict[tuple[str | bytes | None, ...], str] = {}
_aiohttp_contexts: dict[str, ssl.SSLContext] = {}


def allocate_address() -> str:
    """A fresh address in ``FAKE_NETWORK``, unique in this process."""
    global _next_address
    with _lock:
        if _next_address >= int(FAKE_NETWORK.broadcast_address):
            raise RuntimeError(f"no fake addresses left in {FAKE_NETWORK}")
        address = str(ipaddress.IPv4Address(_next_address))
        _next_address += 1
        return address


def normalize_host(host: object) -> str | None:
    """``"API.Example.com."`` and ``b"api.example.com"`` -> ``"api.example.com"``."""
    if isinstance(host, bytes | bytearray):
        try:
            host = bytes(host).decode("idna")
        except UnicodeError:
            return None
    if not isinstance(host, str) or not host:
        return None
    return host.rstrip(".").lower()


def _is_local(host: str) -> bool:
    if host in ("localhost", "localhost.localdomain") or host.endswith(".localhost"):
        return True
    if host == socket.gethostname().lower():
        return True
    try:
        ip = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback or ip.is_unspecified  # 0.0.0.0 reaches this machine too


def _is_literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    return True


def _numeric_port(port: object) -> int:
    if port is None:
        return 0
    if isinstance(port, bytes | bytearray):
        port = bytes(port).decode()
    if isinstance(port, str):
        return int(port) if port.isdigit() else socket.getservbyname(port, "tcp")
    return int(str(port))


# -- the hooks ----------------------------------------------------------------------------------


def _getaddrinfo(
    host: Any, port: Any, family: int = 0, type: int = 0, proto: int = 0, flags: int = 0
) -> list[tuple[Any, ...]]:
    real: Callable[..., list[tuple[Any, ...]]] = _original["getaddrinfo"]
    name = normalize_host(host)
    routers = _routers
    if name is not None:
        for router in reversed(routers):  # the innermost FakeDomains wins
            address = router.resolve(name)
            if address is None:
                continue
            if family not in (socket.AF_UNSPEC, socket.AF_INET):
                raise socket.gaierror(
                    getattr(socket, "EAI_NODATA", socket.EAI_NONAME),
                    "No address associated with hostname",
                )
            kind = type or socket.SOCK_STREAM
            protocol = proto or (socket.IPPROTO_TCP if kind == socket.SOCK_STREAM else 0)
            canonical = name if flags & socket.AI_CANONNAME else ""
            return [(socket.AF_INET, kind, protocol, canonical, (address, _numeric_port(port)))]
        if not _is_literal(name) and not _is_local(name):
            _check_not_blocked(routers, name, f"looked up {name!r}")
    return real(host, port, family, type, proto, flags)


def _check_not_blocked(routers: tuple[Router, ...], what: str, action: str) -> None:
    blockers = [r for r in routers if r.block_unknown_hosts]
    if blockers:
        for router in blockers:
            router.blocked_host(what)
        raise BlockedHostError(
            f"the code under test {action}, which is neither a fake domain nor loopback, "
            "while block_unknown_hosts is on. Register it with FakeDomains.add() or "
            "turn blocking off."
        )


def _target(sock: socket.socket, address: Any) -> Any:
    """Where a connect to ``address`` really goes (the hook behind ``connect``/``connect_ex``)."""
    if sock.family not in (socket.AF_INET, socket.AF_INET6) or not isinstance(address, tuple):
        return address
    host, port = address[0], int(address[1])
    routers = _routers
    if isinstance(host, str) and not _is_literal(host):
        # connect(("api.example.com", 443)) resolves inside C, behind getaddrinfo's back
        name = normalize_host(host)
        for router in reversed(routers):
            fake = router.resolve(name) if name is not None else None
            if fake is not None:
                host = fake
                break
    if isinstance(host, str) and host.startswith(_FAKE_PREFIX):
        for router in reversed(routers):
            target = router.redirect(host, port)
            if target is not None:
                return target
        return (host, port, *address[2:])
    if isinstance(host, str) and not _is_local(host):
        _check_not_blocked(routers, host, f"connected to {host}:{port}")
    return address


def _connect(self: socket.socket, address: Any) -> None:
    _original["connect"](self, _target(self, address))


def _connect_ex(self: socket.socket, address: Any) -> int:
    result: int = _original["connect_ex"](self, _target(self, address))
    return result


async def _aiodns_resolve(self: Any, host: str, port: int = 0, family: int = 0) -> Any:
    name = normalize_host(host)
    for router in reversed(_routers):
        if name is not None and (router.resolve(name) is not None or router.block_unknown_hosts):
            raise UnsupportedClientError(
                f"aiohttp's AsyncResolver (aiodns) resolves {host!r} without the socket module, "
                "so the outage simulator cannot reach it. Use "
                "aiohttp.TCPConnector(resolver=aiohttp.ThreadedResolver()) in tests."
            )
    return await _original["aiodns_resolve"](self, host, port, family)


def check_event_loop(loop: asyncio.AbstractEventLoop | None = None) -> None:
    """Raise ``UnsupportedClientError`` if ``loop`` (or the running one / the policy) is uvloop."""
    if loop is None and "uvloop" not in sys.modules:
        return  # uvloop's loops and policies exist only once it is imported (runs per test)
    candidates: list[object] = [asyncio.get_event_loop_policy()]
    if loop is None:
        with contextlib.suppress(RuntimeError):
            loop = asyncio.get_running_loop()
    if loop is not None:
        candidates.append(loop)
    for thing in candidates:
        if type(thing).__module__.split(".")[0] == "uvloop":
            raise UnsupportedClientError(
                "uvloop resolves and connects inside libuv, behind the socket module, so fake "
                "domains cannot be reached (it would query real DNS). Run these tests on "
                "asyncio's default event loop."
            )


# -- installing and removing --------------------------------------------------------------------


def _install() -> None:
    """Install the hooks that are not installed yet (aiohttp's may arrive with a later import)."""
    if "getaddrinfo" not in _original:
        _original["getaddrinfo"] = socket.getaddrinfo
        _original["connect"] = socket.socket.connect
        _original["connect_ex"] = socket.socket.connect_ex
        socket.getaddrinfo = _getaddrinfo
        socket.socket.connect = _connect  # type: ignore[method-assign,assignment]  # the hook itself
        socket.socket.connect_ex = _connect_ex  # type: ignore[method-assign,assignment]  # the hook itself
    resolver = sys.modules.get("aiohttp.resolver")
    if resolver is not None and "aiodns_resolve" not in _original:
        _original["aiodns_resolve"] = resolver.AsyncResolver.resolve
        resolver.AsyncResolver.resolve = _aiodns_resolve


def _uninstall() -> None:
    socket.getaddrinfo = _original.pop("getaddrinfo")
    socket.socket.connect = _original.pop("connect")  # type: ignore[method-assign]  # restoring
    socket.socket.connect_ex = _original.pop("connect_ex")  # type: ignore[method-assign]  # restoring
    resolver = sys.modules.get("aiohttp.resolver")
    if "aiodns_resolve" in _original and resolver is not None:
        resolver.AsyncResolver.resolve = _original.pop("aiodns_resolve")


def _bundle_for(routers: tuple[Router, ...]) -> str:
    """A PEM bundle: the roots clients would trust anyway plus every active CA.

    "Anyway" is the user's ``SSL_CERT_FILE`` if one was set (and is a file), else
    certifi's bundle. Each distinct bundle is written once per process, from the
    user's file as it was then.
    """
    global _bundle_dir
    previous = _saved_env.get("SSL_CERT_FILE")
    key = (previous, *(r.ca_pem for r in routers))
    path = _bundles.get(key)
    if path is None:
        base = previous if previous and os.path.isfile(previous) else None
        if _bundle_dir is None:
            _bundle_dir = tempfile.TemporaryDirectory(prefix="pytest-failover-")
            atexit.register(_bundle_dir.cleanup)
        if base is None:
            roots = certifi_roots()
        else:
            with open(base, "rb") as f:
                roots = f.read()
        fd, path = tempfile.mkstemp(suffix=".pem", dir=_bundle_dir.name)
        with os.fdopen(fd, "wb") as f:
            f.write(roots.rstrip(b"\n") + b"\n" + b"".join(r.ca_pem for r in routers))
        _bundles[key] = path
    return path


def _trust(routers: tuple[Router, ...]) -> None:
    """Point the trust variables (and aiohttp's default context) at the bundle of ``routers``."""
    if not _saved_env:
        _saved_env.update({name: os.environ.get(name) for name in _TRUST_VARIABLES})
    path = _bundle_for(routers)
    for name in _TRUST_VARIABLES:
        os.environ[name] = path
    connector = sys.modules.get("aiohttp.connector")
    if connector is not None and hasattr(connector, _AIOHTTP_CONTEXT):
        if not _saved_aiohttp:
            _saved_aiohttp.append(getattr(connector, _AIOHTTP_CONTEXT))
        if path not in _aiohttp_contexts:  # building a context costs ~30 ms: once per bundle
            ctx = ssl.create_default_context(cafile=path)
            ctx.set_alpn_protocols(["http/1.1"])  # as aiohttp's own
            _aiohttp_contexts[path] = ctx
        setattr(connector, _AIOHTTP_CONTEXT, _aiohttp_contexts[path])
    _trust_urllib(routers)


def _trust_urllib(routers: tuple[Router, ...]) -> None:
    """Add the CAs of ``routers`` to the TLS contexts of urllib's installed opener.

    ``urlopen()`` keeps the opener it builds at its first call, and since Python 3.12 that
    opener's ``HTTPSHandler`` makes its context then, with the trust store of that moment: a
    test that calls ``urlopen()`` before fake domains are up (or under another ``FakeDomains``,
    with its own CA) would leave every later one untrusted. An opener the caller installed
    is treated alike. A CA is added, never swapped in: the context keeps the caller's own
    settings, and (a context cannot drop a CA) the test CA stays trusted there afterwards, a
    CA whose key never left this process."""
    request = sys.modules.get("urllib.request")
    opener = getattr(request, "_opener", None)
    for handler in getattr(opener, "handlers", ()):
        context = getattr(handler, "_context", None)  # (None: a context per connection, before 3.12)
        if isinstance(context, ssl.SSLContext):
            for router in routers:  # (a CA the context holds already is skipped: the ssl module ignores it)
                context.load_verify_locations(cadata=router.ca_pem.decode("ascii"))


def _untrust() -> None:
    for name, value in _saved_env.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    _saved_env.clear()
    connector = sys.modules.get("aiohttp.connector")
    if connector is not None and hasattr(connector, _AIOHTTP_CONTEXT):
        if _saved_aiohttp:
            setattr(connector, _AIOHTTP_CONTEXT, _saved_aiohttp.pop())
        else:  # aiohttp was imported while the test CA was trusted: rebuild without it
            setattr(connector, _AIOHTTP_CONTEXT, connector._make_ssl_context(True))


@contextlib.contextmanager
def activate(router: Router) -> Iterator[None]:
    """Route ``router``'s fake names and trust its CA until the block ends."""
    global _routers
    check_event_loop()
    with _lock:
        _install()
        _routers = (*_routers, router)
        _trust(_routers)
    try:
        yield
    finally:
        with _lock:
            _routers = tuple(r for r in _routers if r is not router)
            if _routers:
                _trust(_routers)
            else:
                _untrust()
                _uninstall()
