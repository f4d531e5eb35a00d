"""``FakeDomains``: the public face of the simulator."""

from __future__ import annotations

import contextlib
import datetime
import os
import random
import ssl
import tempfile
import threading
from collections.abc import Iterator
from types import TracebackType
from typing import Any

from .. import faults as _faults_module
from ..faults import Fault, Healthy
from ._errors import UnknownDomainError
from ._faults import Certificate, FaultState, Route, on_connect, on_resolve, poisoned
from ._handlers import Handler, default_handler
from ._intercept import activate, allocate_address, check_event_loop
from ._record import FaultEvent, RecordedRequest, Recorder, Stage
from ._server import Servers
from ._tls import Certificates, certifi_roots

__all__ = ["FakeDomain", "FakeDomains"]


class FakeDomain:
    """One registered fake host. Get it from ``FakeDomains.add``; do not build it yourself."""

    def __init__(
        self, owner: FakeDomains, host: str, address: str, http_port: int, https_port: int
    ) -> None:
        self._owner = owner
        self.host = host
        #: The address ``socket.getaddrinfo`` answers for the name (in 127.77.0.0/16).
        self.address = address
        #: The real loopback ports of the listeners (for clients that connect by IP).
        self.http_port = http_port
        self.https_port = https_port

    @property
    def addresses(self) -> tuple[str, ...]:
        """Every address of the domain (``add(..., addresses=n)``), ``address`` first; a
        connect to any of them reaches the domain's listeners."""
        return tuple(self._owner._site(self.host).addresses)

    @property
    def url(self) -> str:
        return f"https://{self.host}"

    @property
    def http_url(self) -> str:
        return f"http://{self.host}"

    @property
    def fault(self) -> Fault:
        return self._owner._site(self.host).state.fault

    def fail(self, fault: Fault | str) -> None:
        self._owner.fail(self.host, fault)

    def heal(self) -> None:
        self._owner.heal(self.host)

    def requests(self) -> list[RecordedRequest]:
        return self._owner.requests(self.host)

    def events(self) -> list[FaultEvent]:
        return self._owner.events(self.host)

    def __repr__(self) -> str:
        site = self._owner._sites.get(self.host)
        state = site.state.fault if site is not None and site.registered else "unregistered"
        return f"<FakeDomain {self.host} {state!r}>"


class _Site:
    """The mutable state behind one fake host (lives as long as its ``FakeDomains``)."""

    def __init__(
        self,
        owner: FakeDomains,
        host: str,
        handler: Handler | None,
        not_after: datetime.datetime | None,
    ) -> None:
        self._owner = owner
        self.host = host
        self.address = allocate_address()
        self.addresses = [self.address]  # grown by add(..., addresses=n), never shrunk
        self.registered = True
        self._handler = handler
        self.not_after = not_after
        # ``state`` is replaced, never changed in place, under the owner's lock; the
        # servers' threads read it per connection stage and per request.
        self.state = FaultState(Healthy())
        self.generation = 0  # bumped with every new state (see _server._respond)
        self.domain: FakeDomain | None = None

    # -- what the servers ask (see _server.Site)

    @property
    def handler(self) -> Handler:
        return self._handler or default_handler

    def strike(self, stage: Stage) -> tuple[Fault | None, random.Random]:
        with self._owner._lock:
            fault = self.state.strike(stage)
            rng = self.state.rng()
        if fault is not None and not isinstance(fault, Healthy):
            self._owner._recorder.event(self.host, stage, fault)
        return fault, rng

    def serves(self) -> bool:
        if self.registered:
            return True
        if self._owner.block_unknown_hosts:
            with self._owner._lock:
                self._owner._blocked.append(
                    f"{self.host} (a keep-alive connection opened while it was a fake domain)"
                )
        return False

    def keeps_alive(self) -> bool:
        with self._owner._lock:
            return self.registered and not self.state.needs_fresh_connections()

    def tls_context(self, kind: Certificate) -> ssl.SSLContext:
        return self._owner._certificates.context(self.host, kind, self.not_after)

    def record(self, request: RecordedRequest) -> None:
        self._owner._recorder.request(request)


class FakeDomains:
    """Real loopback servers standing in for real domain names, with outages on demand.

    ``with FakeDomains() as fd:`` starts the servers and, inside the block,
    sends registered names to them and trusts their test CA. For a longer-lived
    set of servers with shorter interception windows (what the pytest plugin
    does), call ``start()`` once, use ``with fd.intercept():`` per test,
    ``reset()`` between tests and ``close()`` at the end.

    ``block_unknown_hosts=True`` makes any lookup or connect to a host that is
    neither fake nor loopback raise ``BlockedHostError`` while intercepting.
    """

    def __init__(self, *, block_unknown_hosts: bool = False) -> None:
        self.block_unknown_hosts = block_unknown_hosts
        self._lock = threading.RLock()
        self._sites: dict[str, _Site] = {}
        self._by_address: dict[str, _Site] = {}
        self._recorder = Recorder()
        self._blocked: list[str] = []
        self._closing = threading.Event()
        self._servers: Servers | None = None
        self._certs: Certificates | None = None
        self._bundle_dir: tempfile.TemporaryDirectory[str] | None = None
        self._intercepting: contextlib.ExitStack | None = None
        self._sinkhole_address: str | None = None

    # -- lifetime

    def start(self) -> FakeDomains:
        """Make the CA and the connect-fault sockets (idempotent); listeners start with ``add``."""
        with self._lock:
            if self._closing.is_set():
                raise RuntimeError("this FakeDomains is closed; make a new one")
            if self._servers is None:
                self._certs = Certificates()
                self._servers = Servers()
        return self

    @contextlib.contextmanager
    def intercept(self) -> Iterator[FakeDomains]:
        """Inside the block, fake names resolve to the fake servers and the test CA is trusted."""
        self.start()
        with activate(_Router(self)):
            yield self

    def close(self) -> None:
        """Stop intercepting, stop the servers and forget the CA (idempotent)."""
        self._closing.set()
        if self._intercepting is not None:
            self._intercepting.close()
            self._intercepting = None
        if self._servers is not None:
            self._servers.close()
        if self._bundle_dir is not None:
            self._bundle_dir.cleanup()
            self._bundle_dir = None

    def __enter__(self) -> FakeDomains:
        stack = contextlib.ExitStack()
        try:
            stack.enter_context(self.intercept())
        except BaseException:
            self.close()
            raise
        self._intercepting = stack
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- domains

    def add(
        self,
        host: str,
        handler: Handler | None = None,
        *,
        cert_not_after: datetime.datetime | None = None,
        addresses: int = 1,
    ) -> FakeDomain:
        """Register ``host`` (healthy). Adding it again replaces its handler and certificate date.

        ``addresses``: how many loopback addresses the domain has (``FakeDomain.addresses``,
        each in 127.77.0.0/16; the system's lookup answers the first), for resolvers that
        answer several and the ``address_down`` fault.

        ``handler`` answers healthy requests: ``handler(request) -> dict | list | str |
        bytes | int | Response`` (sync or async) or an ASGI app. ``cert_not_after`` makes
        the domain serve a valid certificate that expires then.
        """
        name = _host_name(host)
        if isinstance(addresses, bool) or not isinstance(addresses, int) or not 1 <= addresses <= 16:
            raise ValueError(f"add(addresses=) is a number of addresses from 1 to 16, got {addresses!r}")
        if handler is not None and not callable(handler):
            raise TypeError(
                f"a handler must be callable (a function or an ASGI app), got {handler!r}"
            )
        servers = self.start()._servers
        assert servers is not None
        with self._lock:
            site = self._sites.get(name)
            if site is not None:
                site.registered = True
                site._handler = handler  # read per request: open connections may stay
                certificate_changed = site.not_after != cert_not_after
                site.not_after = cert_not_after
        if site is not None:
            if certificate_changed:  # open connections carry the old certificate
                servers.drop(name)
            self._grow(site, addresses)
            assert site.domain is not None
            return site.domain
        # Start the listeners without holding the lock: the servers take it on handshakes.
        fresh = _Site(self, name, handler, cert_not_after)
        http_port, https_port = servers.listen(fresh)
        fresh.domain = FakeDomain(self, name, fresh.address, http_port, https_port)
        with self._lock:
            if name in self._sites:  # another thread added it meanwhile: theirs wins
                return self.add(host, handler, cert_not_after=cert_not_after)
            self._sites[name] = fresh
            self._by_address[fresh.address] = fresh
        self._grow(fresh, addresses)
        return fresh.domain

    def _grow(self, site: _Site, count: int) -> None:
        """Give ``site`` at least ``count`` addresses."""
        while len(site.addresses) < count:
            address = allocate_address()
            with self._lock:
                site.addresses.append(address)
                self._by_address[address] = site

    def _sinkhole(self) -> str:
        """The address a ``dns_poisoned()`` lookup answers: every connect to it is refused."""
        with self._lock:
            if self._sinkhole_address is None:
                self._sinkhole_address = allocate_address()
            return self._sinkhole_address

    def fail(self, host: str, fault: Fault | str) -> None:
        """Give ``host`` a fault (an instance or a name from ``faults.names()``), from now on."""
        if isinstance(fault, str):
            fault = _faults_module.by_name(fault)
        elif not isinstance(fault, Fault):
            raise TypeError(f"fail() takes a fault such as faults.refused(), got {fault!r}")
        self._set(host, fault)

    def heal(self, host: str | None = None) -> None:
        """Make ``host`` (or every domain) healthy again."""
        for name in [host] if host is not None else [s.host for s in self._registered()]:
            self._set(name, Healthy())

    def _set(self, host: str, fault: Fault) -> None:
        site = self._site(host)
        state = FaultState(fault)
        with self._lock:
            site.state = state
            site.generation += 1
        assert self._servers is not None
        if state.needs_fresh_connections() and not isinstance(fault, _faults_module.AddressDown):
            # A pooled connection would skip the stage this fault acts at: drop them all.
            # (Not for one address going down: the connections open to the others stay up,
            # and every answer closes its connection while it lasts, so the next connect
            # meets the fault.)
            self._servers.drop(site.host)
        else:
            # The server applies this fault to every request, pooled or not; only a
            # request held by the previous fault is cut.
            self._servers.release(site.host)

    def reset(self) -> None:
        """Heal and unregister every domain and clear the records; the servers stay for reuse.

        Idle keep-alive connections stay open so that the next test adding the same
        domain (with the same certificate date) reuses them; a request that arrives on
        one while its domain is unregistered is not answered (the connection is closed).
        """
        with self._lock:
            sites = self._registered()
            renewed = [site.host for site in sites if site.not_after is not None]
            for site in sites:
                site.state = FaultState(Healthy())
                site.generation += 1
                site.registered = False
                site._handler = None
                site.not_after = None
            self._blocked.clear()
        assert self._servers is not None or not sites
        for site in sites:
            assert self._servers is not None
            if site.host in renewed:  # open connections carry the old certificate
                self._servers.drop(site.host)
            else:
                self._servers.release(site.host)
        self._recorder.clear()

    def domain(self, host: str) -> FakeDomain:
        """The handle of a registered ``host``."""
        domain = self._site(host).domain
        assert domain is not None
        return domain

    @property
    def domains(self) -> tuple[FakeDomain, ...]:
        """Every registered domain."""
        return tuple(s.domain for s in self._registered() if s.domain is not None)

    def requests(self, host: str | None = None) -> list[RecordedRequest]:
        """The requests ``host`` (or any domain) received, oldest first."""
        return self._recorder.requests(None if host is None else self._site(host).host)

    def events(self, host: str | None = None) -> list[FaultEvent]:
        """The faults that struck ``host`` (or any domain), oldest first."""
        return self._recorder.events(None if host is None else self._site(host).host)

    @property
    def blocked(self) -> list[str]:
        """Hosts the code tried to reach while ``block_unknown_hosts`` was on."""
        with self._lock:
            return list(self._blocked)

    # -- TLS

    @property
    def ca(self) -> Any:
        """The ``trustme.CA`` of these domains, for clients built with an explicit SSL context."""
        return self._certificates.ca

    @property
    def ca_bundle(self) -> str:
        """Path of a PEM bundle with the test CA and certifi's roots."""
        with self._lock:
            if self._bundle_dir is None:
                self._bundle_dir = tempfile.TemporaryDirectory(prefix="pytest-failover-ca-")
                path = os.path.join(self._bundle_dir.name, "ca-bundle.pem")
                with open(path, "wb") as f:
                    f.write(certifi_roots().rstrip(b"\n") + b"\n" + self.ca_pem)
            return os.path.join(self._bundle_dir.name, "ca-bundle.pem")

    def ssl_context(self) -> ssl.SSLContext:
        """A client context that trusts the test CA and certifi's roots."""
        return ssl.create_default_context(cafile=self.ca_bundle)

    @property
    def ca_pem(self) -> bytes:
        """The test CA's certificate, PEM-encoded."""
        return self._certificates.ca_pem

    @staticmethod
    def check_event_loop(loop: Any = None) -> None:
        """Raise ``UnsupportedClientError`` when the event loop is one fake domains cannot reach."""
        check_event_loop(loop)

    # -- helpers

    @property
    def _certificates(self) -> Certificates:
        self.start()
        assert self._certs is not None
        return self._certs

    def _registered(self) -> list[_Site]:
        with self._lock:
            return [s for s in self._sites.values() if s.registered]

    def _site(self, host: str) -> _Site:
        name = _host_name(host)
        site = self._sites.get(name)
        if site is None or not site.registered:
            known = ", ".join(s.host for s in self._registered()) or "none"
            raise UnknownDomainError(
                f"{host!r} is not a fake domain (registered: {known}); call add({name!r}) first"
            )
        return site

    def __repr__(self) -> str:
        hosts = ", ".join(f"{s.host}={s.state.fault!r}" for s in self._registered())
        return f"<FakeDomains {hosts or 'empty'}>"


def _host_name(host: str) -> str:
    if not isinstance(host, str) or not host.strip(". "):
        raise ValueError(f"a fake domain needs a host name such as 'api.example.com', got {host!r}")
    if "/" in host or ":" in host:
        raise ValueError(f"add() takes a bare host name, not a URL: {host!r}")
    return host.strip().rstrip(".").lower()


class _Router:
    """What the interception hooks ask a ``FakeDomains`` (see ``_intercept.Router``)."""

    def __init__(self, owner: FakeDomains) -> None:
        self._owner = owner
        self.block_unknown_hosts = owner.block_unknown_hosts
        self.ca_pem = owner.ca_pem

    def resolve(self, host: str) -> str | None:
        site = self._owner._sites.get(host)
        if site is None or not site.registered:
            return None
        fault, _ = site.strike("resolve")
        poison = poisoned(fault)
        if poison is not None:
            return poison.address or self._owner._sinkhole()
        failure = on_resolve(fault)
        if failure is None:
            return site.address
        if failure.after:
            self._owner._closing.wait(failure.after)  # bounded; cut short by close()
        raise failure.error()

    def redirect(self, address: str, port: int) -> tuple[str, int] | None:
        site = self._owner._by_address.get(address)
        servers = self._owner._servers
        if servers is not None and address == self._owner._sinkhole_address:
            return "127.0.0.1", servers.closed_port
        if site is None or servers is None or site.domain is None:
            return None
        if not site.registered or port not in (80, 443):
            return "127.0.0.1", servers.closed_port
        fault, _ = site.strike("connect")
        match on_connect(fault, address):
            case Route.BLACKHOLE:
                return "127.0.0.1", servers.blackhole_port
            case Route.CLOSED_PORT:
                return "127.0.0.1", servers.closed_port
            case Route.HANG_UP:
                return "127.0.0.1", servers.hang_up_port
            case Route.LISTENER:
                return "127.0.0.1", site.domain.https_port if port == 443 else site.domain.http_port

    def blocked_host(self, what: str) -> None:
        with self._owner._lock:
            self._owner._blocked.append(what)
