"""The agent's own metrics (meter ``failover_agent``), named in :mod:`pytest_failover.semconv`.

Gauges are observable: their callbacks read :class:`~agent.state.AgentState` at
collection time, so a reload that removes a target also removes its series, and
certificate expiry is "seconds left" at the moment of the scrape.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any

from opentelemetry.metrics import CallbackOptions, MeterProvider, Observation

from pytest_failover import semconv
from pytest_failover.semconv import (
    AGENT_SCOPE,
    FAILOVER_DOMAIN,
    FAILOVER_POOL,
    PROBE_LOCATION,
    PROBE_PHASE,
    READINESS_CHECK,
    SERVER_ADDRESS,
    TELEMETRY_SIGNAL,
    TLS_CERT,
    TLS_CERT_CHAIN,
    TLS_CERT_LEAF,
    UNIT_SECONDS,
)

from .checks.result import PHASES, ProbeResult
from .state import AgentState, DomainStatus

__all__ = ["METRIC_NAMES", "AgentMetrics"]

PROBE_SUCCESS = semconv.FAILOVER_PROBE_SUCCESS
PROBE_DURATION = semconv.FAILOVER_PROBE_DURATION
PROBE_STATUS = semconv.FAILOVER_PROBE_STATUS_CODE
POOL_AVAILABLE = semconv.FAILOVER_POOL_AVAILABLE
POOL_SERVING = semconv.FAILOVER_POOL_SERVING
CERT_EXPIRY = semconv.FAILOVER_TLS_CERT_EXPIRY
READY = semconv.FAILOVER_READINESS_READY
CONTROL_VERSION = semconv.FAILOVER_CONTROL_VERSION
CONTROL_ISSUED = semconv.FAILOVER_CONTROL_ISSUED_TIMESTAMP
CONTROL_DISABLED = semconv.FAILOVER_CONTROL_DOMAIN_DISABLED
OVERRUNS = semconv.FAILOVER_AGENT_JOB_OVERRUNS
DROPPED = semconv.FAILOVER_AGENT_TELEMETRY_DROPPED

METRIC_NAMES = semconv.AGENT_METRIC_NAMES


class AgentMetrics:
    """Creates the instruments once and records probe results."""

    def __init__(self, provider: MeterProvider, state_ref: Any, drops: Any) -> None:
        """``state_ref()`` returns the current :class:`AgentState` (it changes on reload)."""
        self._state_ref = state_ref
        self._drops = drops
        # the attribute dicts of each domain's phases, built once and never mutated
        self._phase_attrs: dict[tuple[str, str, str], dict[str, dict[str, Any]]] = {}
        meter = provider.get_meter(AGENT_SCOPE)
        self._duration = meter.create_histogram(
            PROBE_DURATION, unit=UNIT_SECONDS, description="Duration of a pinned domain probe, per phase."
        )
        self._overruns = meter.create_counter(
            OVERRUNS, description="Job runs skipped because the previous run was still going (or missed)."
        )
        meter.create_observable_gauge(PROBE_SUCCESS, [self._probe_success],
                                      description="1 if the last pinned probe of the domain succeeded.")
        meter.create_observable_gauge(PROBE_STATUS, [self._probe_status],
                                      description="HTTP status of the last pinned probe (0: no response).")
        meter.create_observable_gauge(POOL_AVAILABLE, [self._pool_available],
                                      description="1 if the last request through the failover client succeeded.")
        meter.create_observable_gauge(POOL_SERVING, [self._pool_serving],
                                      description="1 for the domain that served the last pool probe.")
        meter.create_observable_gauge(CERT_EXPIRY, [self._cert_expiry], unit=UNIT_SECONDS,
                                      description="Seconds until the certificate expires (leaf, or earliest of the chain).")
        meter.create_observable_gauge(READY, [self._ready],
                                      description="1 if the backup passes the readiness check.")
        meter.create_observable_gauge(CONTROL_VERSION, [self._control_version],
                                      description="Version of the control document being served.")
        meter.create_observable_gauge(CONTROL_ISSUED, [self._control_issued], unit=UNIT_SECONDS,
                                      description="Unix time the served control document was issued.")
        meter.create_observable_gauge(CONTROL_DISABLED, [self._control_disabled],
                                      description="1 if the served control document disables the domain.")
        meter.create_observable_counter(DROPPED, [self._dropped],
                                        description="Spans or metric points lost by the OTLP exporters.")

    @property
    def state(self) -> AgentState:
        state: AgentState = self._state_ref()
        return state

    def _base(self, pool: str, host: str) -> dict[str, Any]:
        return {FAILOVER_POOL: pool, SERVER_ADDRESS: host, PROBE_LOCATION: self.state.location}

    def _domain_attrs(self, d: DomainStatus) -> dict[str, Any]:
        return {**self._base(d.pool, d.host), FAILOVER_DOMAIN: d.url}

    # --- recording -------------------------------------------------------------------

    def record_probe(self, d: DomainStatus, result: ProbeResult) -> None:
        key = (d.pool, d.url, self.state.location)
        per_phase = self._phase_attrs.get(key)
        if per_phase is None:
            if len(self._phase_attrs) > 100_000:  # reloads changed the targets many times
                self._phase_attrs.clear()
            attrs = self._domain_attrs(d)
            per_phase = self._phase_attrs[key] = {p: {**attrs, PROBE_PHASE: p} for p in PHASES}
        record = self._duration.record
        for phase, seconds in result.phases.items():
            record(seconds, per_phase.get(phase) or {**self._domain_attrs(d), PROBE_PHASE: phase})

    def overrun(self, attrs: Mapping[str, Any]) -> None:
        self._overruns.add(1, {**attrs, PROBE_LOCATION: self.state.location})

    # --- callbacks -------------------------------------------------------------------

    def _domains(self) -> list[DomainStatus]:
        return list(self.state.domains.values())

    def _probe_success(self, _: CallbackOptions) -> Iterable[Observation]:
        return [Observation(int(d.last.success), self._domain_attrs(d))
                for d in self._domains() if d.last is not None]

    def _probe_status(self, _: CallbackOptions) -> Iterable[Observation]:
        return [Observation(d.last.status or 0, self._domain_attrs(d))
                for d in self._domains() if d.last is not None]

    def _pool_available(self, _: CallbackOptions) -> Iterable[Observation]:
        return [Observation(int(p.last.success), self._base(p.name, p.primary_host))
                for p in list(self.state.pools.values()) if p.last is not None]

    def _pool_serving(self, _: CallbackOptions) -> Iterable[Observation]:
        out = []
        for p in list(self.state.pools.values()):
            if p.last is None:
                continue
            for url in p.domains:
                host = url.split("://", 1)[1].split(":")[0]
                out.append(Observation(int(p.last.served_by == url and p.last.success),
                                       {**self._base(p.name, host), FAILOVER_DOMAIN: url}))
        return out

    def _cert_expiry(self, _: CallbackOptions) -> Iterable[Observation]:
        now = time.time()
        out = []
        for d in self._domains():
            cert = d.readiness.cert if d.readiness is not None else None
            if cert is None:
                continue
            attrs = self._domain_attrs(d)
            out.append(Observation(cert.leaf_not_after - now, {**attrs, TLS_CERT: TLS_CERT_LEAF}))
            out.append(Observation(cert.chain_not_after - now, {**attrs, TLS_CERT: TLS_CERT_CHAIN}))
        return out

    def _ready(self, _: CallbackOptions) -> Iterable[Observation]:
        out = []
        for d in self._domains():
            if d.readiness is None:
                continue
            attrs = self._domain_attrs(d)
            for check, (ok, _why) in d.readiness.checks.items():
                out.append(Observation(int(ok), {**attrs, READINESS_CHECK: check}))
        return out

    def _control_version(self, _: CallbackOptions) -> Iterable[Observation]:
        c = self.state.control
        if c is None or not c.version:
            return []
        return [Observation(c.version, self._base(p.name, p.primary_host))
                for p in list(self.state.pools.values())]

    def _control_issued(self, _: CallbackOptions) -> Iterable[Observation]:
        c = self.state.control
        if c is None or not c.version:
            return []
        return [Observation(c.issued_at, self._base(p.name, p.primary_host))
                for p in list(self.state.pools.values())]

    def _control_disabled(self, _: CallbackOptions) -> Iterable[Observation]:
        c = self.state.control
        if c is None or not c.version:
            return []
        return [Observation(int(d.url in c.disabled.get(d.pool, frozenset())), self._domain_attrs(d))
                for d in self._domains()]

    def _dropped(self, _: CallbackOptions) -> Iterable[Observation]:
        location = self.state.location
        return [Observation(n, {TELEMETRY_SIGNAL: signal, PROBE_LOCATION: location})
                for signal, n in self._drops.snapshot().items()]
