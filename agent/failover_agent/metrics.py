"""The agent's own metrics (meter ``failover_agent``), named in :mod:`pytest_failover.semconv`.

Series per domain, like blackbox_exporter's: the last probe's success, status, duration
(``failover.probe.duration``, a gauge as blackbox's ``probe_duration_seconds``: a histogram
was seven series a domain) and one gauge per phase (``failover.probe.phase.duration{phase}``),
the certificate expiry as a Unix time (https), and the readiness, control, serving and
maintenance flags: at most 15 series for an https backup with every check on
(``tests/agent/test_agent_prometheus_text.py`` counts them). All are gauges read from the
agent's state when collected. ``/metrics`` renders them straight from it
(:attr:`PrometheusTextReader.sources <failover_agent.prometheus_text.PrometheusTextReader.sources>`);
they become SDK instruments only when another reader (OTLP) needs them, as the SDK keeps
state for every series between collections (at 1,000 domains, 8,500 series: the agent's
RSS went from 95 to 82 MiB without it). The counters stay SDK instruments: few series, updated as probes run.

A domain is named by its origin: ``url.scheme``, ``server.address`` and ``server.port`` (two
ports of one host are two domains), with ``failover.pool`` and ``probe.location``. Pool-wide
series carry the pool and the location only.

Gauges are observable: their callbacks read :class:`~agent.state.AgentState` at collection
time, so a reload that removes a target also removes its series.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from opentelemetry.metrics import CallbackOptions, MeterProvider, Observation
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

from pytest_failover import Domain, semconv
from pytest_failover import __version__ as AGENT_VERSION
from pytest_failover.semconv import (
    AGENT_CHECK,
    AGENT_SCOPE,
    FAILOVER_POOL,
    PHASE_TOTAL,
    PROBE_LOCATION,
    PROBE_PHASE,
    READINESS_CHECK,
    SERVER_ADDRESS,
    SERVER_PORT,
    TELEMETRY_SIGNAL,
    UNIT_ITEM,
    UNIT_RUN,
    UNIT_SECONDS,
    URL_SCHEME,
)

from .checks.result import ProbeResult
from .maintenance import NOTHING, Decision
from .prometheus_text import Family, PrometheusTextReader
from .state import AgentState, DomainStatus

__all__ = ["METRIC_NAMES", "AgentMetrics", "origin_attributes"]

PROBE_SUCCESS = semconv.FAILOVER_PROBE_SUCCESS
PROBE_DURATION = semconv.FAILOVER_PROBE_DURATION
PHASE_DURATION = semconv.FAILOVER_PROBE_PHASE_DURATION
PROBE_STATUS = semconv.FAILOVER_PROBE_STATUS_CODE
POOL_AVAILABLE = semconv.FAILOVER_POOL_AVAILABLE
POOL_SERVING = semconv.FAILOVER_POOL_SERVING
CERT_EXPIRY = semconv.FAILOVER_TLS_CERT_EXPIRY_TIMESTAMP
READY = semconv.FAILOVER_READINESS_READY
CONTROL_VERSION = semconv.FAILOVER_CONTROL_VERSION
CONTROL_ISSUED = semconv.FAILOVER_CONTROL_ISSUED_TIMESTAMP
CONTROL_DISABLED = semconv.FAILOVER_CONTROL_DOMAIN_DISABLED
OVERRUNS = semconv.FAILOVER_AGENT_JOB_OVERRUNS
DROPPED = semconv.FAILOVER_AGENT_TELEMETRY_DROPPED
MAINTENANCE = semconv.FAILOVER_MAINTENANCE_ACTIVE
DNS_MISMATCH = semconv.FAILOVER_DNS_MISMATCH

METRIC_NAMES = semconv.AGENT_METRIC_NAMES

_SCOPE = InstrumentationScope(AGENT_SCOPE, AGENT_VERSION, semconv.SCHEMA_URL)
"""The agent's meter, as the gauges rendered without the SDK name it (``otel_scope_*``)."""
_NO_OPTIONS = CallbackOptions()

_MAX_REMEMBERED = 100_000  # origins kept; reloads to other targets cannot grow them without end


def origin_attributes(url: str) -> dict[str, Any]:
    """``url.scheme``, ``server.address`` and ``server.port`` of a domain's base URL."""
    domain = Domain.parse(url)
    return {URL_SCHEME: domain.scheme, SERVER_ADDRESS: domain.host, SERVER_PORT: domain.effective_port}


class AgentMetrics:
    """Creates the instruments once and records probe results."""

    def __init__(self, provider: MeterProvider, state_ref: Any, drops: Any,
                 maintenance: Callable[[], Decision] = lambda: NOTHING, *,
                 text: PrometheusTextReader | None = None, sdk: bool = True) -> None:
        """``state_ref()`` returns the current :class:`AgentState` (it changes on reload);
        ``maintenance()`` the maintenance decision now. ``text``: the ``/metrics`` reader, which
        then renders the gauges straight from the state; ``sdk``: register them with the SDK
        too (needed for OTLP or another reader; each series then costs the SDK its state)."""
        self._state_ref = state_ref
        self._maintenance = maintenance
        self._drops = drops
        # each URL's origin (scheme, host, port), parsed once; the attribute mappings are built
        # per observation and dropped: the SDK keeps its own copy of each series' attributes,
        # and a remembered mapping per series and phase was 1.5 MiB more at 1,000 domains for
        # some 3 ms of CPU per collection
        self._origins: dict[str, tuple[str, str, int]] = {}
        # (pool, url) -> (earliest notAfter of the chain, when seen), from the pinned probes
        self._certs: dict[tuple[str, str], tuple[float, float]] = {}
        meter = provider.get_meter(AGENT_SCOPE)
        self._overruns = meter.create_counter(
            OVERRUNS, unit=UNIT_RUN,
            description="Check runs skipped because the previous run was still going (or missed).",
        )
        # name, unit, description, callback: every gauge of the agent, from its state
        self._gauges: tuple[tuple[str, str, str, Callable[[CallbackOptions], Iterable[Observation]]], ...] = (
            (PROBE_SUCCESS, "", "1 if the last pinned probe of the domain succeeded.", self._probe_success),
            (PROBE_DURATION, UNIT_SECONDS, "Duration of the whole last pinned probe of the domain.",
             self._probe_duration),
            (PHASE_DURATION, UNIT_SECONDS, "Duration of each phase of the last pinned probe.", self._phase_duration),
            (PROBE_STATUS, "", "HTTP status of the last pinned probe (0: no response).", self._probe_status),
            (POOL_AVAILABLE, "", "1 if the last request through the failover client succeeded.",
             self._pool_available),
            (POOL_SERVING, "", "1 for the domain that served the last pool probe.", self._pool_serving),
            (CERT_EXPIRY, UNIT_SECONDS, "Unix time the earliest-expiring certificate of the domain's chain expires.",
             self._cert_expiry),
            (READY, "", "1 if the backup passes the readiness check.", self._ready),
            (CONTROL_VERSION, "", "Version of the control document being served.", self._control_version),
            (CONTROL_ISSUED, UNIT_SECONDS, "Unix time the served control document was issued.", self._control_issued),
            (CONTROL_DISABLED, "", "1 if the served control document disables the domain.", self._control_disabled),
            (MAINTENANCE, "", "1 while the domain is in a maintenance window.", self._maintenance_active),
            (DNS_MISMATCH, "", "1 when the system's and the configured resolver's addresses of the domain "
                               "share none.", self._dns_mismatch),
        )
        if sdk:
            for name, unit, description, callback in self._gauges:
                meter.create_observable_gauge(name, [callback], unit=unit, description=description)
        if text is not None:
            text.sources["agent"] = self.gauge_families
        meter.create_observable_counter(DROPPED, [self._dropped], unit=UNIT_ITEM,
                                        description="Spans or metric points lost by the OTLP exporters.")

    def gauge_families(self) -> Iterator[Family]:
        """Every gauge with its observations now (what ``/metrics`` renders without the SDK),
        one at a time: a gauge's observations are made when the renderer reaches it."""
        for name, unit, description, callback in self._gauges:
            yield Family(name, unit, description, callback(_NO_OPTIONS), _SCOPE)

    @property
    def state(self) -> AgentState:
        state: AgentState = self._state_ref()
        return state

    def _pool_attrs(self, pool: str) -> dict[str, Any]:
        return {FAILOVER_POOL: pool, PROBE_LOCATION: self.state.location}

    def _origin(self, pool: str, url: str) -> dict[str, Any]:
        origin = self._origins.get(url)
        if origin is None:
            if len(self._origins) > _MAX_REMEMBERED:
                self._origins.clear()
            domain = Domain.parse(url)
            origin = self._origins[url] = (domain.scheme, domain.host, domain.effective_port)
        return {FAILOVER_POOL: pool, PROBE_LOCATION: self.state.location,
                URL_SCHEME: origin[0], SERVER_ADDRESS: origin[1], SERVER_PORT: origin[2]}

    def _domain_attrs(self, d: DomainStatus) -> dict[str, Any]:
        return self._origin(d.pool, d.url)

    # --- recording -------------------------------------------------------------------

    def record_probe(self, d: DomainStatus, result: ProbeResult) -> None:
        """Note what a gauge cannot read from the state later: the certificate's expiry and when."""
        if result.cert_not_after is not None:
            self._certs[(d.pool, d.url)] = (result.cert_not_after, result.at)

    def overrun(self, kind: str, pool: str, url: str) -> None:
        """Count an overrun of a check: its kind, its pool (if any) and, for a domain's checks
        (``url``), the domain's origin (see :func:`origin_attributes`)."""
        attrs: dict[str, Any] = {AGENT_CHECK: kind}
        if pool:
            attrs[FAILOVER_POOL] = pool
        if url:
            attrs.update(origin_attributes(url))
        self._overruns.add(1, {**attrs, PROBE_LOCATION: self.state.location})

    # --- callbacks -------------------------------------------------------------------

    def _domains(self) -> list[DomainStatus]:
        return list(self.state.domains.values())

    def _probe_success(self, _: CallbackOptions) -> Iterable[Observation]:
        return (Observation(int(d.last.success), self._domain_attrs(d))
                for d in self._domains() if d.last is not None)

    def _probe_duration(self, _: CallbackOptions) -> Iterable[Observation]:
        return (Observation(round(d.last.phases.get(PHASE_TOTAL, d.last.duration), 6), self._domain_attrs(d))
                for d in self._domains() if d.last is not None)

    def _phase_duration(self, _: CallbackOptions) -> Iterable[Observation]:
        phases = semconv.PROBE_PHASES
        for d in self._domains():
            last = d.last
            if last is None:
                continue
            attrs = self._domain_attrs(d)
            # to the microsecond: '0.000107' rather than '0.00010744099927251227' on every line
            for phase, seconds in last.phases.items():
                if phase in phases:
                    yield Observation(round(seconds, 6), {**attrs, PROBE_PHASE: phase})

    def _probe_status(self, _: CallbackOptions) -> Iterable[Observation]:
        return (Observation(d.last.status or 0, self._domain_attrs(d))
                for d in self._domains() if d.last is not None)

    def _pool_available(self, _: CallbackOptions) -> Iterable[Observation]:
        return [Observation(int(p.last.success), self._pool_attrs(p.name))
                for p in list(self.state.pools.values()) if p.last is not None]

    def _pool_serving(self, _: CallbackOptions) -> Iterable[Observation]:
        return (Observation(int(p.last.served_by == url and p.last.success), self._origin(p.name, url))
                for p in list(self.state.pools.values()) if p.last is not None
                for url in p.domains)

    def _cert_expiry(self, _: CallbackOptions) -> Iterable[Observation]:
        """The freshest reading per https domain: its pinned probes' handshakes, or the
        readiness check's (which also reads a certificate that fails verification)."""
        out = []
        current: dict[tuple[str, str], tuple[float, float]] = {}
        for d in self._domains():
            seen = self._certs.get((d.pool, d.url))
            ready = d.readiness
            if ready is not None and ready.cert is not None and (seen is None or ready.at > seen[1]):
                seen = (ready.cert.chain_not_after, ready.at)
            if seen is None:
                continue
            current[(d.pool, d.url)] = seen
            out.append(Observation(seen[0], self._domain_attrs(d)))
        self._certs = {key: current.get(key, value) for key, value in self._certs.items() if key in current}
        return out

    def _ready(self, _: CallbackOptions) -> Iterable[Observation]:
        for d in self._domains():
            readiness = d.readiness
            if readiness is None:
                continue
            attrs = self._domain_attrs(d)
            for check, (ok, _why) in readiness.checks.items():
                yield Observation(int(ok), {**attrs, READINESS_CHECK: check})

    def _control_version(self, _: CallbackOptions) -> Iterable[Observation]:
        c = self.state.control
        if c is None or not c.version:
            return []
        return [Observation(c.version, self._pool_attrs(p.name)) for p in list(self.state.pools.values())]

    def _control_issued(self, _: CallbackOptions) -> Iterable[Observation]:
        c = self.state.control
        if c is None or not c.version:
            return []
        return [Observation(c.issued_at, self._pool_attrs(p.name)) for p in list(self.state.pools.values())]

    def _control_disabled(self, _: CallbackOptions) -> Iterable[Observation]:
        c = self.state.control
        if c is None or not c.version:
            return []
        return (Observation(int(d.url in c.disabled.get(d.pool, frozenset())), self._domain_attrs(d))
                for d in self._domains())

    def _maintenance_active(self, _: CallbackOptions) -> Iterable[Observation]:
        decision = self._maintenance()
        return [Observation(1, self._domain_attrs(d)) for d in self._domains() if decision.is_active(d.pool, d.url)]

    def _dns_mismatch(self, _: CallbackOptions) -> Iterable[Observation]:
        out = []
        for d in self._domains():
            mismatch = None if d.dns is None else d.dns.mismatch
            if mismatch is not None:
                out.append(Observation(int(mismatch), self._domain_attrs(d)))
        return out

    def _dropped(self, _: CallbackOptions) -> Iterable[Observation]:
        location = self.state.location
        return [Observation(n, {TELEMETRY_SIGNAL: signal, PROBE_LOCATION: location})
                for signal, n in self._drops.snapshot().items()]
