"""The agent: APScheduler jobs over the checks, state, telemetry and the HTTP listener.

Life cycle (all inside one asyncio loop)::

    agent = Agent(config)
    await agent.start()        # telemetry, listener, scheduler, jobs
    await agent.reload(new)    # swap targets and jobs; telemetry and listener stay
    await agent.stop()         # stop scheduling, finish or cancel probes, flush

Jobs: ``probe`` (per domain, pinned), ``pool`` (per pool, through the failover
client), ``ready`` (per backup), ``control`` (one). Each job has
``max_instances=1``, ``coalesce=True``, a generous ``misfire_grace_time`` and a
stable start offset derived from its id, so targets do not fire in lockstep and
restart at the same phase. A run skipped because the previous one is still
going is counted in ``failover.agent.job.overruns``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import time
import zlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

import httpx
from apscheduler.events import EVENT_JOB_MAX_INSTANCES, EVENT_JOB_MISSED, JobExecutionEvent
from apscheduler.schedulers.asyncio import AsyncIOScheduler
from apscheduler.triggers.interval import IntervalTrigger

from pytest_failover._pool import Domain

from .config import AgentConfig, PoolConfig
from .console import LogReporter, Reporter
from .control_writer import ControlWriter
from .metrics import AgentMetrics
from .pool_probe import PoolProber
from .probes import DomainProber, ReadinessResult, check_readiness, ssl_context
from .state import AgentState, DomainStatus, PoolStatus
from .telemetry import Telemetry

__all__ = ["Agent", "job_offset"]

log = logging.getLogger("agent")

MAX_OFFSET = 120.0  # seconds; like Grafana Synthetic Monitoring's spread


def job_offset(job_id: str, interval: float) -> float:
    """A stable start offset in ``[0, min(interval, 120 s))`` derived from the job id."""
    return (zlib.crc32(job_id.encode()) / 2**32) * min(interval, MAX_OFFSET)


@dataclass
class _Job:
    id: str
    kind: str
    interval: float
    timeout: float
    run: Callable[[], Awaitable[None]]
    attrs: dict[str, Any]


class _Runtime:
    """Everything that depends on the configuration and is rebuilt on reload."""

    def __init__(self, agent: Agent, config: AgentConfig) -> None:
        self.agent = agent
        self.config = config
        self.context: ssl.SSLContext = ssl_context(str(config.ca_file) if config.ca_file else None)
        self.state = AgentState(location=config.location)
        self.prober = DomainProber(self.context)
        self.http = httpx.AsyncClient(verify=self.context, trust_env=False)
        self.pool_probers: dict[str, PoolProber] = {}
        self.jobs: list[_Job] = []
        for pool in config.pools:
            primary = pool.primary(config.region)
            self.state.pools[pool.name] = PoolStatus(
                pool.name, primary, Domain.parse(primary).host, tuple(pool.domains)
            )
            for url in pool.domains:
                self.state.domains[(pool.name, url)] = DomainStatus(
                    pool.name, url, Domain.parse(url).host, is_primary=url == primary
                )
            self.pool_probers[pool.name] = PoolProber(
                pool,
                region=config.region,
                context=self.context,
                tracer_provider=agent.telemetry.client_tracer_provider,
                meter_provider=agent.telemetry.client_meter_provider,
            )
        self.control: ControlWriter | None = None
        if config.control is not None:
            self.control = ControlWriter(config.control, config.pools)
        self._build_jobs()

    def carry_over(self, previous: _Runtime) -> None:
        """Keep what the previous runtime learnt about targets that still exist."""
        for key, status in self.state.domains.items():
            old = previous.state.domains.get(key)
            if old is not None:
                status.last, status.consecutive_failures = old.last, old.consecutive_failures
                status.consecutive_successes, status.readiness = old.consecutive_successes, old.readiness
        if self.control is not None and previous.control is not None:
            self.control.version = max(self.control.version, previous.control.version)
        self.state.control = previous.state.control
        self.state.overruns = previous.state.overruns

    # --- jobs ---------------------------------------------------------------------------

    def _build_jobs(self) -> None:
        for pool in self.config.pools:
            primary = pool.primary(self.config.region)
            for url in pool.domains:
                cfg = pool.probe.for_domain(url)
                self.jobs.append(_Job(
                    f"probe:{pool.name}:{url}", "probe", cfg.interval, cfg.timeout,
                    self._domain_job(pool, url),
                    {"job": "probe", "failover.pool": pool.name, "failover.domain": url,
                     "server.address": Domain.parse(url).host},
                ))
            prober = self.pool_probers[pool.name]
            self.jobs.append(_Job(
                f"pool:{pool.name}", "pool", pool.probe.interval,
                prober.policy.deadline + pool.probe.timeout,
                self._pool_job(pool),
                {"job": "pool", "failover.pool": pool.name, "server.address": Domain.parse(primary).host},
            ))
            if pool.readiness.enabled:
                for url in pool.domains:
                    if url == primary:
                        continue
                    self.jobs.append(_Job(
                        f"ready:{pool.name}:{url}", "ready", pool.readiness.interval,
                        pool.readiness.timeout * 3,
                        self._ready_job(pool, primary, url),
                        {"job": "ready", "failover.pool": pool.name, "failover.domain": url,
                         "server.address": Domain.parse(url).host},
                    ))
        control = self.config.control
        if self.control is not None and control is not None:
            self.jobs.append(_Job("control", "control", control.interval, control.interval,
                                  self._control_job, {"job": "control"}))

    def _domain_job(self, pool: PoolConfig, url: str) -> Callable[[], Awaitable[None]]:
        cfg = pool.probe.for_domain(url)
        status = self.state.domains[(pool.name, url)]

        async def run() -> None:
            result = await self.prober.probe(url, cfg)
            before = status.last
            status.record(result)
            self.agent.metrics.record_probe(status, result)
            if before is None or before.success != result.success:
                if result.success:
                    self.agent.reporter.event(
                        f"{pool.name}: {url} is UP ({result.status}, {result.duration * 1000:.0f} ms)")
                else:
                    self.agent.reporter.event(
                        f"{pool.name}: {url} is DOWN ({result.error_type}: {result.detail})",
                        level=logging.WARNING)

        return run

    def _pool_job(self, pool: PoolConfig) -> Callable[[], Awaitable[None]]:
        prober = self.pool_probers[pool.name]
        status = self.state.pools[pool.name]

        async def run() -> None:
            result = await prober.probe()
            before = status.last
            status.last = result
            breakers = prober.breakers()
            for url, new in breakers.items():
                old = status.breakers.get(url, "closed")
                if old != new:
                    self.agent.reporter.event(
                        f"{pool.name}: breaker of {url} {old} -> {new}",
                        level=logging.WARNING if new == "open" else logging.INFO)
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

    def _ready_job(self, pool: PoolConfig, primary: str, url: str) -> Callable[[], Awaitable[None]]:
        status = self.state.domains[(pool.name, url)]

        async def run() -> None:
            try:
                result = await check_readiness(self.http, self.context, primary, url,
                                               pool.readiness, pool.probe)
            except Exception as exc:  # never a dead job
                result = ReadinessResult({"health": (False, f"check failed: {type(exc).__name__}: {exc}")}, None)
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

    async def _control_job(self) -> None:
        assert self.control is not None
        before = self.state.control.disabled if self.state.control else None
        try:
            self.control.update(self.state)
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

    async def aclose(self) -> None:
        await self.prober.aclose()
        await self.http.aclose()
        for prober in self.pool_probers.values():
            await prober.aclose()


class Agent:
    """One running agent (see the module docstring)."""

    def __init__(
        self,
        config: AgentConfig,
        *,
        telemetry: Telemetry | None = None,
        reporter: Reporter | None = None,
        listen: str | None = None,
    ) -> None:
        self.config = config
        self.telemetry = telemetry or Telemetry(
            location=config.location,
            prometheus=config.exporters.prometheus.enabled,
            otlp=config.exporters.otlp,
        )
        self.reporter = reporter or LogReporter()
        self.listen = listen or (config.exporters.prometheus.listen
                                 if config.exporters.prometheus.enabled else None)
        self.metrics = AgentMetrics(self.telemetry.meter_provider, lambda: self.state, self.telemetry.drops)
        self._runtime: _Runtime | None = None
        self._scheduler: AsyncIOScheduler | None = None
        self._inflight: set[asyncio.Task[Any]] = set()
        self._job_attrs: dict[str, dict[str, Any]] = {}
        self._server: Any = None
        self.address: tuple[str, int] | None = None
        self.running = False
        self._stopping = False
        self._reload_lock = asyncio.Lock()

    @property
    def state(self) -> AgentState:
        if self._runtime is None:
            return AgentState(location=self.config.location)
        return self._runtime.state

    # --- life cycle ---------------------------------------------------------------------

    async def start(self) -> None:
        """Start the listener, the scheduler and every job (inside a running loop)."""
        self._runtime = _Runtime(self, self.config)
        if self.listen is not None:
            from .server import start_server

            self._server, self.address = await start_server(self, self.listen)
        self._scheduler = AsyncIOScheduler(
            event_loop=asyncio.get_running_loop(),
            job_defaults={"max_instances": 1, "coalesce": True},
            timezone=timezone.utc,
        )
        self._scheduler.add_listener(self._on_skipped, EVENT_JOB_MAX_INSTANCES | EVENT_JOB_MISSED)
        self._scheduler.start()
        self._add_jobs(self._runtime)
        self.running = True
        self.reporter.start()
        jobs = len(self._runtime.jobs)
        where = f", listening on http://{self.address[0]}:{self.address[1]}" if self.address else ""
        log.info("agent started at location %r: %d jobs%s", self.config.location, jobs, where)

    def _add_jobs(self, runtime: _Runtime) -> None:
        assert self._scheduler is not None
        now = datetime.now(timezone.utc)
        for job in runtime.jobs:
            offset = job_offset(job.id, job.interval)
            self._job_attrs[job.id] = job.attrs
            self._scheduler.add_job(
                self._run_job,
                IntervalTrigger(seconds=job.interval, start_date=now + timedelta(seconds=offset),
                                timezone=timezone.utc),
                args=(job,),
                id=job.id,
                name=job.id,
                max_instances=1,
                coalesce=True,
                misfire_grace_time=max(1, int(job.interval * 2)),
                next_run_time=now + timedelta(seconds=offset),
                replace_existing=True,
            )

    async def _run_job(self, job: _Job) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._inflight.add(task)
        try:
            await job.run()
        except asyncio.CancelledError:
            if self._stopping:  # cancelled by stop()/reload() after its grace time
                log.info("check %s cancelled (still running after its timeout)", job.id)
                return
            raise
        except Exception:  # the last safety net: a job never dies
            log.exception("job %s failed", job.id)
        finally:
            if task is not None:
                self._inflight.discard(task)
            if self._runtime is not None:
                self.reporter.refresh(self._runtime.state)

    def _on_skipped(self, event: JobExecutionEvent) -> None:
        attrs = self._job_attrs.get(event.job_id, {"job": event.job_id})
        self.metrics.overrun(attrs)
        self.state.overruns += 1
        log.warning("job %s overran its interval; run skipped", event.job_id)

    async def _drain(self, timeout: float) -> None:
        """Let in-flight jobs finish within ``timeout``, then cancel the rest."""
        pending = {t for t in self._inflight if not t.done()}
        if not pending:
            return
        _done, still = await asyncio.wait(pending, timeout=timeout)
        for task in still:
            task.cancel()
        if still:
            await asyncio.wait(still, timeout=1.0)
            log.info("cancelled %d in-flight check(s) at shutdown", len(still))

    def _max_timeout(self, runtime: _Runtime) -> float:
        return min(30.0, max((j.timeout for j in runtime.jobs if j.kind != "control"), default=1.0))

    async def reload(self, config: AgentConfig) -> None:
        """Replace the targets and jobs with those of ``config`` (already validated)."""
        async with self._reload_lock:
            if not self.running or self._scheduler is None or self._runtime is None:
                raise RuntimeError("the agent is not running")
            if config.exporters != self.config.exporters:
                log.warning("exporter settings changed: they take effect after a restart")
            if config.location != self.config.location:
                log.warning("location changed: it takes effect after a restart")
                config = config.model_copy(update={"location": self.config.location})
            old = self._runtime
            try:
                new = _Runtime(self, config)  # may fail (key file gone...): nothing changed yet
            except Exception:
                log.exception("reload rejected, the running configuration stays")
                return
            for job in old.jobs:
                with contextlib.suppress(Exception):
                    self._scheduler.remove_job(job.id)
            self._stopping = True
            try:
                await self._drain(self._max_timeout(old))
            finally:
                self._stopping = False
            new.carry_over(old)
            self._runtime = new
            self.config = config
            self._job_attrs.clear()
            self._add_jobs(self._runtime)
            await old.aclose()
            log.info("configuration reloaded: %d jobs", len(self._runtime.jobs))

    async def stop(self, flush_timeout: float = 5.0) -> None:
        """Stop scheduling, finish or cancel in-flight checks, close, flush telemetry."""
        if not self.running:
            return
        self.running = False
        self._stopping = True
        if self._scheduler is not None:
            self._scheduler.pause()  # no new runs; shutdown() would cancel the running ones
        if self._runtime is not None:
            await self._drain(self._max_timeout(self._runtime))
        if self._scheduler is not None:
            self._scheduler.shutdown(wait=False)
        if self._runtime is not None:
            await self._runtime.aclose()
        if self._server is not None:
            await self._server.cleanup()
            self._server = None
        self.reporter.stop()
        otlp = self.config.exporters.otlp
        timeout = min(flush_timeout, otlp.timeout) if otlp else flush_timeout
        await asyncio.to_thread(self.telemetry.shutdown, timeout)
        log.info("agent stopped")

    # --- read by the HTTP listener ---------------------------------------------------------

    def control_document(self) -> bytes | None:
        c = self.state.control
        return c.document if c is not None and c.document else None

    def healthy(self) -> bool:
        return self.running and self._scheduler is not None and self._scheduler.running

    @property
    def uptime(self) -> float:
        return time.time() - self.state.started_at
