"""Read-only snapshots of a transport's state (``transport.state()``), for applications and the agent.

``transport.state()`` lets an application gate work on a pool, as a UI would do
with ``enabled: breaker.canRequest()``::

    if not transport.state().pools["api"].can_request:
        show_offline_banner()
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

__all__ = ["DomainState", "PoolState", "SharedState", "TransportState"]


@dataclass(frozen=True, slots=True, kw_only=True)
class DomainState:
    domain: str
    breaker: str  # "closed" | "half_open" | "open"
    consecutive_failures: int
    enabled: bool  # not disabled by the control document
    can_request: bool  # a request sent now would be let through
    # An attempt sent to it now would be its breaker's probe (it would take the probe lease):
    # the cooldown is over, or the breaker is open and rested enough for an early probe (sent
    # only when no other domain takes the request).
    probe_due: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class PoolState:
    name: str
    domains: tuple[DomainState, ...]
    sticky: str | None  # the domain that last served the pool
    budget_tokens: float | None

    @property
    def can_request(self) -> bool:
        """True if at least one domain would take a request now."""
        return any(d.can_request for d in self.domains)

    def domain(self, url: str) -> DomainState:
        for state in self.domains:
            if state.domain == url:
                return state
        raise KeyError(f"pool {self.name!r} has no domain {url!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class SharedState:
    """Shared health (``shared=RedisHealth(...)``) as this process sees it."""

    url: str  # the Redis URL, without its password
    state: str  # "connected" (sharing) | "disconnected" (local-only, reconnecting) | "closed"
    since: float  # Unix time of the latest change of ``state``
    fleet_control_version: int | None  # the newest control version any process applied


@dataclass(frozen=True, slots=True, kw_only=True)
class TransportState:
    pools: dict[str, PoolState]
    control_version: int | None = None  # the control document in force, if any
    shared: SharedState | None = None  # shared health, if configured

    def as_dict(self) -> dict[str, object]:
        """JSON-able data."""
        return {
            "control_version": self.control_version,
            "shared": None if self.shared is None else asdict(self.shared),
            "pools": {
                name: {**asdict(p), "can_request": p.can_request} for name, p in self.pools.items()
            },
        }
