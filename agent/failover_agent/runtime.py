"""Everything that depends on the configuration and is rebuilt on reload: the targets'
state, the probers and the checks (see :mod:`agent.schedule`) that run them."""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

import httpx

from pytest_failover import Domain, Policy
from pytest_failover.semconv import (
    BREAKER_CLOSED,
    BREAKER_OPEN,
    CHECK_HEALTH,
    JOB_CONTROL,
    JOB_POOL,
    JOB_PROBE,
    JOB_READY,
)

from .checks.dns import DnsComparer
from .checks.domain import DomainProber
from .checks.pool import PoolProber, pool_probers
from .checks.readiness import ReadinessResult, check_readiness
from .config import AgentConfig, PoolConfig, ProbeConfig
from .control_writer import ControlWriter
from .maintenance import Window
from .maintenance_file import MaintenanceFile
from .schedule import Check, CheckGroup, group_by_interval
from .state import AgentState, DomainStatus, PoolStatus
from .wire import ProbeTransport, ssl_context

if TYPE_CHECKING:
    from .runner import Agent

__all__ = ["Runtime"]

log = logging.getLogger("failover_agent")


class Runtime:
    """The targets of one configuration: their state, probers and check groups."""

    def __init__(self, agent: Agent, config: AgentConfig) -> None:
        self.agent = agent
        self.config = config
        self.context: ssl.SSLContext = ssl_context(str(config.ca_file) if config.ca_file else None)
        self.state = AgentState(location=config.location)
        self.prober = DomainProber(self.context)
        # the readiness checks' requests (CORS preflight, health answer) go over the probes'
        # own wire too: an httpx default transport would import httpcore, anyio (and trio when
        # installed) for a few requests per backup and interval
        self.http = httpx.AsyncClient(transport=ProbeTransport(self.context), trust_env=False)
        # pools with [pools.resolver]: each pinned probe also compares the system's answer with it
        self.dns: dict[str, DnsComparer] = {}
        self.groups: list[CheckGroup] = []
        # pools with equal policy settings share one Policy (a frozen value): 1 KB a pool
        policies: dict[str, Policy] = {}
        for pool in config.pools:
            primary = pool.primary(config.region)
            self.state.pools[pool.name] = PoolStatus(
                pool.name, primary, Domain.parse(primary).host, tuple(pool.domains)
            )
            for url in pool.domains:
                self.state.domains[(pool.name, url)] = DomainStatus(
                    pool.name, url, Domain.parse(url).host, is_primary=url == primary
                )
            settings = pool.policy.model_dump_json()
            if settings not in policies:
                policies[settings] = pool.policy.to_policy()
        self.pool_probers: dict[str, PoolProber] = pool_probers(
            [(pool, policies[pool.policy.model_dump_json()]) for pool in config.pools],
            region=config.region,
            context=self.context,
            tracer_provider=agent.telemetry.client_tracer_provider,
            meter_provider=agent.telemetry.client_meter_provider,
        )
        for pool in config.pools:
            primary = self.state.pools[pool.name].primary
            if pool.resolver is not None:
                self.dns[pool.name] = DnsComparer(pool.resolver.to_resolver(verify=self.context),
                                                  timeout=pool.resolver.timeout)
            self.groups += group_by_interval(pool.name, self._pool_checks(pool, primary))
        self.control: ControlWriter | None = None
        self._maintenance_file: MaintenanceFile | None = None
        if config.control is not None:
            self.control = ControlWriter(config.control, config.pools)
            self._maintenance_file = MaintenanceFile.of(config.control)
            interval = config.control.interval
            check = Check(JOB_CONTROL, "", "", interval, interval, self._control_run)
            self.groups.append(CheckGroup("control", interval, (check,)))

    def maintenance_windows(self) -> Sequence[Window]:
        """The maintenance windows started at run time (``failover-agent maintenance start``)."""
        return () if self._maintenance_file is None else self._maintenance_file.current()

    @property
    def checks(self) -> list[Check]:
        return [check for group in self.groups for check in group.checks]

    def carry_over(self, previous: Runtime) -> None:
        """Keep what the previous runtime learnt about targets that still exist."""
        for key, status in self.state.domains.items():
            old = previous.state.domains.get(key)
            if old is not None:
                status.last, status.consecutive_failures = old.last, old.consecutive_failures
                status.consecutive_successes, status.readiness = old.consecutive_successes, old.readiness
                status.dns = old.dns
        if self.control is not None and previous.control is not None:
            self.control.version = max(self.control.version, previous.control.version)
        if self._maintenance_file is not None and previous._maintenance_file is not None:
            self._maintenance_file.version = max(self._maintenance_file.version, previous._maintenance_file.version)
        self.state.control = previous.state.control
        self.state.overruns = previous.state.overruns

    async def aclose(self) -> None:
        await self.prober.aclose()
        await self.http.aclose()
        for prober in self.pool_probers.values():
            await prober.aclose()  # a client shared by pools closes once
        for comparer in self.dns.values():
            await comparer.aclose()

    # --- checks -------------------------------------------------------------------------

    def _pool_checks(self, pool: PoolConfig, primary: str) -> list[Check]:
        """A pool's checks: a pinned probe per domain, the pool probe, readiness per backup."""
        checks = []
        for url in pool.domains:
            cfg = pool.probe.for_domain(url)
            checks.append(Check(JOB_PROBE, pool.name, url, cfg.interval, cfg.timeout,
                                self._domain_run(pool, url, cfg)))
        checks.append(Check(
            JOB_POOL, pool.name, "", pool.probe.interval,
            self.pool_probers[pool.name].policy.deadline + pool.probe.timeout, self._pool_run(pool),
        ))
        if pool.readiness.enabled:
            checks += [
                Check(JOB_READY, pool.name, url, pool.readiness.interval, pool.readiness.timeout * 3,
                      self._ready_run(pool, primary, url))
                for url in pool.domains if url != primary
            ]
        return checks

    def _domain_run(self, pool: PoolConfig, url: str, cfg: ProbeConfig) -> Callable[[], Awaitable[None]]:
        key = (pool.name, url)
        status = self.state.domains[key]
        comparer = self.dns.get(pool.name)

        async def run() -> None:
            if comparer is None:
                result = await self.prober.probe(url, cfg)
            else:
                result, status.dns = await asyncio.gather(self.prober.probe(url, cfg), comparer.compare(status.host))
            before = status.last
            status.record(result)
            self.agent.metrics.record_probe(status, result)
            self.agent.on_result(key, result)
            if before is None or before.success != result.success:
                if result.success:
                    self.agent.reporter.event(
                        f"{pool.name}: {url} is UP ({result.status}, {result.duration * 1000:.0f} ms)")
                else:
                    self.agent.reporter.event(
                        f"{pool.name}: {url} is DOWN ({result.error_type}: {result.detail})",
                        level=logging.WARNING)

        return run

    def _pool_run(self, pool: PoolConfig) -> Callable[[], Awaitable[None]]:
        prober = self.pool_probers[pool.name]
        status = self.state.pools[pool.name]
        key = (pool.name, "")

        async def run() -> None:
            result = await prober.probe()
            before = status.last
            status.last = result
            self.agent.on_result(key, result)
            breakers = prober.breakers()
            for url, new in breakers.items():
                old = status.breakers.get(url, BREAKER_CLOSED)
                if old != new:
                    self.agent.reporter.event(
                        f"{pool.name}: breaker of {url} {old} -> {new}",
                        level=logging.WARNING if new == BREAKER_OPEN else logging.INFO)
            status.breakers = breakers
            for url, state in breakers.items():
                d = self.state.domains.get((pool.name, url))
                if d is not None:
                    d.breaker = state
            if before is None or before.success != result.success or (
                result.success and before.served_by != result.served_by
            ):
                if result.success:
                    self.agent.reporter.event(
                        f"{pool.name}: pool served by {result.served_by} "
                        f"({result.attempts} attempt{'s' if result.attempts != 1 else ''}, "
                        f"{result.duration * 1000:.0f} ms)")
                else:
                    self.agent.reporter.event(
                        f"{pool.name}: pool UNAVAILABLE to users ({result.error_type}: {result.detail})",
                        level=logging.ERROR)

        return run

    def _ready_run(self, pool: PoolConfig, primary: str, url: str) -> Callable[[], Awaitable[None]]:
        status = self.state.domains[(pool.name, url)]

        async def run() -> None:
            try:
                result = await check_readiness(self.http, self.context, primary, url,
                                               pool.readiness, pool.probe)
            except Exception as exc:  # never a dead check
                result = ReadinessResult({CHECK_HEALTH: (False, f"check failed: {type(exc).__name__}: {exc}")}, None)
            before = status.readiness
            status.readiness = result
            old = None if before is None else {k: ok for k, (ok, _) in before.checks.items()}
            new = {k: ok for k, (ok, _) in result.checks.items()}
            if old != new:
                if result.ready:
                    self.agent.reporter.event(f"{pool.name}: backup {url} is ready")
                else:
                    why = "; ".join(f"{k}: {d}" for k, (ok, d) in result.checks.items() if not ok)
                    self.agent.reporter.event(f"{pool.name}: backup {url} NOT READY ({why})",
                                              level=logging.WARNING)

        return run

    async def _control_run(self) -> None:
        assert self.control is not None
        before = self.state.control.disabled if self.state.control else None
        try:
            self.control.update(self.state, drained=self.agent.maintenance().drained())
        except Exception as exc:
            log.exception("control document not written")
            if self.state.control is not None:
                self.state.control.error = f"{type(exc).__name__}: {exc}"
            return
        after = self.state.control.disabled if self.state.control else {}
        if before != after:
            shown = {k: sorted(v) for k, v in after.items() if v}
            self.agent.reporter.event(
                f"control document v{self.control.version}: "
                + (f"disables {shown}" if shown else "all domains enabled"))
