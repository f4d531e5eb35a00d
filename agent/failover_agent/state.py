"""What the agent currently knows: the latest result of every check.

Jobs write here, everything else reads: the metric callbacks, the console, the
status page and the control-document writer. Only the event loop thread writes;
readers on other threads (the OTLP metric reader) only take snapshots of dicts.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pytest_failover.semconv import BREAKER_CLOSED

from .checks.readiness import ReadinessResult
from .checks.result import ProbeResult

if TYPE_CHECKING:
    from .checks.dns import DnsCheck

__all__ = ["AgentState", "ControlStatus", "DomainStatus", "PoolStatus"]


@dataclass(slots=True)
class DomainStatus:
    pool: str
    url: str
    host: str
    last: ProbeResult | None = None
    consecutive_failures: int = 0
    consecutive_successes: int = 0
    readiness: ReadinessResult | None = None
    breaker: str = BREAKER_CLOSED
    is_primary: bool = False
    dns: DnsCheck | None = None  # the last DNS comparison, with [pools.resolver] only

    def record(self, result: ProbeResult) -> None:
        self.last = result
        if result.success:
            self.consecutive_failures = 0
            self.consecutive_successes += 1
        else:
            self.consecutive_successes = 0
            self.consecutive_failures += 1


@dataclass(slots=True)
class PoolStatus:
    name: str
    primary: str
    primary_host: str
    domains: tuple[str, ...]
    last: ProbeResult | None = None
    breakers: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class ControlStatus:
    version: int = 0
    issued_at: float = 0.0
    disabled: dict[str, frozenset[str]] = field(default_factory=dict)
    document: bytes = b""
    error: str | None = None

    @property
    def version_time(self) -> float | None:
        """The version as what it is: the agent's writer numbers documents by the Unix time of
        signing in milliseconds, so a version within a minute of ``issued_at`` is that time (in
        seconds); any other (``control sign``'s ``8``) is a plain number (None)."""
        seconds = self.version / 1000
        return seconds if abs(seconds - self.issued_at) < 60 else None


@dataclass(slots=True)
class AgentState:
    location: str
    started_at: float = field(default_factory=time.time)
    domains: dict[tuple[str, str], DomainStatus] = field(default_factory=dict)
    pools: dict[str, PoolStatus] = field(default_factory=dict)
    control: ControlStatus | None = None
    overruns: int = 0

    def as_dict(self) -> dict[str, object]:
        """JSON-able snapshot for the status page."""
        def result(r: ProbeResult | None) -> dict[str, object] | None:
            if r is None:
                return None
            return {
                "success": r.success, "status": r.status, "error_type": r.error_type,
                "duration": round(r.duration, 6), "at": r.at, "detail": r.detail,
                "phases": {k: round(v, 6) for k, v in r.phases.items()},
                "served_by": r.served_by, "attempts": r.attempts,
            }

        return {
            "location": self.location,
            "started_at": self.started_at,
            "pools": {
                name: {
                    "primary": p.primary,
                    "last": result(p.last),
                    "breakers": dict(p.breakers),
                    "domains": {
                        url: {
                            "last": result(d.last),
                            "consecutive_failures": d.consecutive_failures,
                            "breaker": d.breaker,
                            "readiness": None if d.readiness is None else {
                                "ready": d.readiness.ready,
                                "checks": {k: {"ready": ok, "detail": why}
                                           for k, (ok, why) in d.readiness.checks.items()},
                                "leaf_not_after": d.readiness.cert and d.readiness.cert.leaf_not_after,
                                "chain_not_after": d.readiness.cert and d.readiness.cert.chain_not_after,
                            },
                            "dns": None if d.dns is None else {
                                "system": list(d.dns.system), "resolver": list(d.dns.resolver),
                                "mismatch": d.dns.mismatch, "error": d.dns.error,
                            },
                        }
                        for (pool, url), d in list(self.domains.items()) if pool == name
                    },
                }
                for name, p in list(self.pools.items())
            },
            "control": None if self.control is None else {
                "version": self.control.version,
                "version_time": self.control.version_time,
                "issued_at": self.control.issued_at,
                "disabled": {k: sorted(v) for k, v in self.control.disabled.items()},
                "error": self.control.error,
            },
            "overruns": self.overruns,
        }
