"""The ``fake_domains`` fixture: one test's view of the session's fake domains.

Theory of operation
-------------------
One :class:`~pytest_failover.simulator.FakeDomains` per session (per xdist
worker) holds the test CA and the loopback servers; it is started by the first
test that needs it and closed at ``pytest_unconfigure``. A test only flips
state, so it costs milliseconds:

    test start   interception on (fake names resolve, the test CA is trusted)
    test body    add / fail / heal / requests; outage markers applied first
    test end     checks run, then (in ``finally``) every domain is healed and
                 unregistered, records are cleared, interception is off

Interception is reference-counted per test because two things may want it:
the ``fake_domains`` fixture and ``--failover-block-unknown-hosts`` (which
intercepts every test, used fixture or not, so a lookup of an unknown host
raises ``BlockedHostError``).
"""

from __future__ import annotations

import contextlib
import datetime
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pytest

from . import semconv
from ._plugin_outage import Outage, OutageMarkerError, build_fault

if TYPE_CHECKING:
    from opentelemetry.trace import Span

    from .faults import Fault
    from .simulator import FakeDomain, FakeDomains, FaultEvent, Handler, RecordedRequest

__all__ = ["FakeDomainsFixture", "SessionDomains"]

FAULT_EVENT = semconv.EVENT_FAULT_INJECTED
HEAL_EVENT = semconv.EVENT_FAULT_HEALED


class SessionDomains:
    """The session's ``FakeDomains`` and the per-test interception around it."""

    def __init__(self, *, block_unknown_hosts: bool = False) -> None:
        self._block_unknown_hosts = block_unknown_hosts
        self._domains: FakeDomains | None = None
        self._depth = 0
        self._intercepting: contextlib.ExitStack | None = None

    @property
    def domains(self) -> FakeDomains:
        """The session's fake domains, started on first use."""
        if self._domains is None:
            try:
                from .simulator import FakeDomains
            except ImportError as exc:  # pragma: no cover - depends on the environment
                raise ImportError(
                    "fake_domains needs the simulator extra: pip install 'pytest-failover[simulator]'"
                ) from exc
            self._domains = FakeDomains(block_unknown_hosts=self._block_unknown_hosts).start()
        return self._domains

    def begin_test(self) -> None:
        """Intercept name resolution and trust the test CA (nested calls are counted)."""
        if self._depth == 0:
            stack = contextlib.ExitStack()
            stack.enter_context(self.domains.intercept())
            self._intercepting = stack
        self._depth += 1

    def end_test(self) -> None:
        """Undo one ``begin_test``; the last one resets every domain and stops intercepting."""
        if self._depth == 0:
            return
        self._depth -= 1
        if self._depth:
            return
        try:
            self.domains.reset()
        finally:
            stack, self._intercepting = self._intercepting, None
            if stack is not None:
                stack.close()

    @property
    def blocked(self) -> list[str]:
        """What the current test tried to reach while blocking is on."""
        return [] if self._domains is None else self._domains.blocked

    def close(self) -> None:
        """Stop intercepting and stop the servers (end of the session)."""
        self._depth = 0
        try:
            if self._intercepting is not None:
                self._intercepting.close()
                self._intercepting = None
        finally:
            if self._domains is not None:
                self._domains.close()
                self._domains = None


def _recording_span() -> Span | None:
    """The current span if it records (the test's span under ``--failover-otlp-endpoint``)."""
    from opentelemetry import trace

    span = trace.get_current_span()
    return span if span.is_recording() else None


class FakeDomainsFixture:
    """What the ``fake_domains`` fixture gives a test.

    ``add(host, handler=None)`` registers a healthy fake domain; ``fail(host, fault)``
    gives it a fault (a ``faults`` object, or a fault name and its arguments);
    ``heal(host=None)``; ``requests(host=None)`` lists what the servers received;
    ``ca`` / ``ca_bundle`` / ``ssl_context()`` are for clients built with explicit
    trust. Everything is undone when the test ends.
    """

    def __init__(self, session: SessionDomains, node: pytest.Item) -> None:
        self._session = session
        self._node = node
        self._scheduled: list[Outage] = []
        self._outages: list[Outage] = []
        self._active = False

    # -- lifetime (called by the plugin) -------------------------------------------

    def activate(self) -> None:
        self._session.begin_test()
        self._active = True

    def deactivate(self) -> None:
        """End of the test: check markers, then always reset and stop intercepting."""
        try:
            self._check_outages_struck()
        finally:
            self._active = False
            self._session.end_test()

    @property
    def _domains(self) -> FakeDomains:
        if not self._active:
            raise RuntimeError(
                "fake_domains is only usable while its test runs; do not keep it "
                "in a module-level variable or a wider-scoped fixture"
            )
        return self._session.domains

    # -- the test's API --------------------------------------------------------------

    def add(
        self,
        host: str,
        handler: Handler | None = None,
        *,
        cert_not_after: datetime.datetime | None = None,
        addresses: int = 1,
    ) -> FakeDomain:
        """Register ``host`` as a healthy fake domain (http on port 80, https on 443).

        ``handler(request) -> dict | list | str | bytes | int | Response`` (sync or
        async) or an ASGI app answers healthy requests; the default answers 200
        with a small JSON body naming the domain. ``addresses``: how many loopback
        addresses it has (``FakeDomain.addresses``; the system's lookup answers the first).
        """
        return self._domains.add(host, handler, cert_not_after=cert_not_after, addresses=addresses)

    def fail(self, host: str, fault: Fault | str, *args: Any, **kwargs: Any) -> None:
        """Give ``host`` a fault from now on: ``fail(host, faults.refused())`` or
        ``fail(host, "status", 503, headers={"Retry-After": "1"})``."""
        self._require_registered(host, f"fake_domains.fail({host!r}, ...)")
        try:
            built = build_fault(fault, args, kwargs)
        except OutageMarkerError as exc:
            raise ValueError(f"fake_domains.fail({host!r}, {fault!r}, ...): {exc}") from None
        self._domains.fail(host, built)
        if (span := _recording_span()) is not None:
            span.add_event(
                FAULT_EVENT,
                {semconv.FAILOVER_FAULT_HOST: host, semconv.FAILOVER_FAULT_NAME: built.name,
                 semconv.FAILOVER_FAULT: repr(built)},
            )

    def heal(self, host: str | None = None) -> None:
        """Make ``host`` (or every fake domain) healthy again."""
        if host is not None:
            self._require_registered(host, f"fake_domains.heal({host!r})")
        self._domains.heal(host)
        if (span := _recording_span()) is not None:
            span.add_event(HEAL_EVENT, {semconv.FAILOVER_FAULT_HOST: host or "*"})

    def requests(self, host: str | None = None) -> list[RecordedRequest]:
        """The requests ``host`` (or any fake domain) received in this test, oldest first."""
        if host is not None:
            self._require_registered(host, f"fake_domains.requests({host!r})")
        return self._domains.requests(host)

    def events(self, host: str | None = None) -> list[FaultEvent]:
        """The faults that struck ``host`` (or any fake domain) in this test, oldest first."""
        if host is not None:
            self._require_registered(host, f"fake_domains.events({host!r})")
        return self._domains.events(host)

    def domain(self, host: str) -> FakeDomain:
        """The registered fake domain ``host`` (its ``url``, ``fault``, loopback ports)."""
        self._require_registered(host, f"fake_domains.domain({host!r})")
        return self._domains.domain(host)

    @property
    def domains(self) -> tuple[FakeDomain, ...]:
        """Every fake domain registered in this test."""
        return self._domains.domains

    @property
    def ca(self) -> Any:
        """The session's ``trustme.CA``, e.g. ``ca.configure_trust(ssl_context)``."""
        return self._domains.ca

    @property
    def ca_bundle(self) -> str:
        """Path of a PEM bundle with the test CA and certifi's roots."""
        return self._domains.ca_bundle

    def ssl_context(self) -> Any:
        """A client ``ssl.SSLContext`` trusting the test CA and certifi's roots."""
        return self._domains.ssl_context()

    @property
    def blocked(self) -> list[str]:
        """What this test tried to reach under ``--failover-block-unknown-hosts``."""
        return self._session.blocked

    def __repr__(self) -> str:
        return f"<fake_domains of {self._node.nodeid}: {self._session.domains!r}>"

    # -- the outage marker -----------------------------------------------------------

    def schedule_outages(self, outages: Sequence[Outage]) -> None:
        """Register the markers' hosts now; their faults strike when the test body starts."""
        for outage in outages:
            if not any(domain.host == outage.host for domain in self._domains.domains):
                self._domains.add(outage.host)
        self._scheduled = list(outages)

    def apply_scheduled_outages(self) -> None:
        """Inject the markers' faults (after every fixture ran, so they cannot undo them)."""
        scheduled, self._scheduled = self._scheduled, []
        for outage in scheduled:
            if not any(domain.host == outage.host for domain in self._domains.domains):
                self._domains.add(outage.host)  # a fixture reset it; the marker still holds
            self.fail(outage.host, outage.fault)
            self._outages.append(outage)

    def _check_outages_struck(self) -> None:
        """A marked outage that no request or lookup ever met means the test tests nothing."""
        missed = [
            outage
            for outage in self._outages
            if self._is_registered(outage.host)
            and not self._domains.events(outage.host)
            and not self._domains.requests(outage.host)
        ]
        if missed:
            lines = "\n".join(f"  {outage.description}" for outage in missed)
            pytest.fail(
                f"{self._node.nodeid}: the code under test never contacted the marked host(s), "
                f"so the outage was not exercised:\n{lines}\n"
                "Check the host name against the URLs the code uses, or remove the marker.",
                pytrace=False,
            )

    # -- helpers ---------------------------------------------------------------------

    def _is_registered(self, host: str) -> bool:
        name = host.strip().rstrip(".").lower() if isinstance(host, str) else host
        return any(domain.host == name for domain in self._domains.domains)

    def _require_registered(self, host: str, call: str) -> None:
        if not self._is_registered(host):
            from .simulator import UnknownDomainError

            known = ", ".join(domain.host for domain in self._domains.domains) or "none"
            raise UnknownDomainError(
                f"{call}: {host!r} is not a fake domain in this test (registered: {known}). "
                f"Call fake_domains.add({host!r}) first, or mark the test "
                f"@pytest.mark.outage({host!r}, ...), which registers it."
            )
