"""The agent: an APScheduler job per check group, state, telemetry and the HTTP listener.

Life cycle (all inside one asyncio loop)::

    agent = Agent(config)
    await agent.start()        # telemetry, listener, scheduler, jobs
    await agent.reload(new)    # swap targets and jobs; telemetry and listener stay
    await agent.stop()         # stop scheduling, finish or cancel probes, flush

Checks (:mod:`failover_agent.schedule`): ``probe`` (per domain, pinned), ``pool`` (per pool,
through the failover client), ``ready`` (per backup), ``control`` (one). The checks of a
pool that share an interval are one job, with ``max_instances=1``, ``coalesce=True``, a
generous ``misfire_grace_time`` and a stable start offset derived from its id, so pools do
not fire in lockstep and restart at the same phase. Each check runs one at a time: a run
skipped because the previous one is still going (or missed by the scheduler) is counted in
``failover.agent.job.overruns``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from apscheduler.events import EVENT_JOB_MAX_INSTANCES, EVENT_JOB_MISSED, JobExecutionEvent
from apscheduler.schedulers.asyncio import AsyncIOScheduler
from apscheduler.triggers.interval import IntervalTrigger

from .config import AgentConfig
from .console import LogReporter, Reporter
from .maintenance import Decision, decide, windows_at
from .metrics import AgentMetrics
from .runtime import Runtime
from .schedule import Check, CheckGroup
from .state import AgentState
from .telemetry import Telemetry

if TYPE_CHECKING:
    from .checks.result import ProbeResult
    from .server import AgentServer

__all__ = ["Agent", "ResultKey", "ResultListener"]

ResultKey = tuple[str, str]
"""A check's key in :meth:`Agent.on_result`: ``(pool, url)`` of a pinned domain probe,
``(pool, "")`` of a pool probe."""
ResultListener = Callable[[ResultKey, "ProbeResult"], None]

log = logging.getLogger("failover_agent")


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
            prometheus_scope_info=config.exporters.prometheus.scope_info_enabled,
            otlp=config.exporters.otlp,
        )
        self.reporter = reporter or LogReporter()
        self.listen = listen or (config.exporters.prometheus.listen
                                 if config.exporters.prometheus.enabled else None)
        self.clock: Callable[[], float] = time.time
        """The wall clock the maintenance windows are read against (tests move it)."""
        self.metrics = AgentMetrics(self.telemetry.meter_provider, lambda: self.state, self.telemetry.drops,
                                    self.maintenance, **self.telemetry.gauge_options())
        self._runtime: Runtime | None = None
        self._scheduler: AsyncIOScheduler | None = None
        self._groups: dict[str, CheckGroup] = {}  # the scheduled ones, by job id
        self._server: AgentServer | None = None
        self.address: tuple[str, int] | None = None
        self.running = False
        self._stopping = False
        self._reload_lock = asyncio.Lock()
        self.result_listeners: list[ResultListener] = []
        """Called by :meth:`on_result`, in order (the status page's recorder is one)."""

    @property
    def state(self) -> AgentState:
        if self._runtime is None:
            return AgentState(location=self.config.location)
        return self._runtime.state

    # --- life cycle ---------------------------------------------------------------------

    async def start(self) -> None:
        """Start the listener, the scheduler and every job (inside a running loop)."""
        self._runtime = Runtime(self, self.config)
        if self.listen is not None:
            from .server import start_server

            self._server, self.address = await start_server(self, self.listen)
        self._scheduler = AsyncIOScheduler(
            event_loop=asyncio.get_running_loop(),
            job_defaults={"max_instances": 1, "coalesce": True},
            timezone=UTC,
        )
        self._scheduler.add_listener(self._on_skipped, EVENT_JOB_MAX_INSTANCES | EVENT_JOB_MISSED)
        self._scheduler.start()
        self._add_jobs(self._runtime)
        self.running = True
        self.reporter.start()
        where = f", listening on http://{self.address[0]}:{self.address[1]}" if self.address else ""
        log.info("agent started at location %r: %s%s", self.config.location, self._runtime_size(), where)

    def _runtime_size(self) -> str:
        assert self._runtime is not None
        return f"{len(self._runtime.checks)} checks in {len(self._runtime.groups)} jobs"

    def _add_jobs(self, runtime: Runtime) -> None:
        assert self._scheduler is not None
        now = datetime.now(UTC)
        for group in runtime.groups:
            first = now + timedelta(seconds=group.offset)
            self._groups[group.id] = group
            self._scheduler.add_job(
                self._fire,
                IntervalTrigger(seconds=group.interval, start_date=first, timezone=UTC),
                args=(group,),
                id=group.id,
                name=group.id,
                max_instances=1,
                coalesce=True,
                misfire_grace_time=max(1, int(group.interval * 2)),
                next_run_time=first,
                replace_existing=True,
            )

    async def _fire(self, group: CheckGroup) -> None:
        """Start each check of ``group`` that is not still running; the others overran."""
        if self._groups.get(group.id) is not group:  # removed by reload() or stop() meanwhile
            return
        for check in group.checks:
            if check.in_flight is not None:
                self._overran(check)
            else:
                check.task = asyncio.create_task(self._run(check), name=check.id)

    async def _run(self, check: Check) -> None:
        try:
            await check.run()
        except asyncio.CancelledError:
            if self._stopping:  # cancelled by stop()/reload() after its grace time
                log.info("check %s cancelled (still running after its timeout)", check.id)
                return
            raise
        except Exception:  # the last safety net: a check never dies
            log.exception("check %s failed", check.id)
        finally:
            # a finished run is let go: a done task, its coroutine and its name kept by every
            # check were 1 MiB of the agent's memory at 1,000 domains
            check.task = None
            if self._runtime is not None:
                self.reporter.refresh(self._runtime.state)

    def _on_skipped(self, event: JobExecutionEvent) -> None:
        """APScheduler skipped a run of a job: each of its checks missed one."""
        group = self._groups.get(event.job_id)
        for check in group.checks if group is not None else ():
            self._overran(check)

    def _overran(self, check: Check) -> None:
        self.metrics.overrun(check.kind, check.pool, check.url)
        self.state.overruns += 1
        log.warning("job %s overran its interval; run skipped", check.id)

    async def _drain(self, runtime: Runtime, timeout: float) -> None:
        """Let the checks in flight finish within ``timeout``, then cancel the rest."""
        pending = {task for check in runtime.checks if (task := check.in_flight) is not None}
        if not pending:
            return
        _done, still = await asyncio.wait(pending, timeout=timeout)
        for task in still:
            task.cancel()
        if still:
            await asyncio.wait(still, timeout=1.0)
            log.info("cancelled %d in-flight check(s) at shutdown", len(still))

    @staticmethod
    def _max_timeout(runtime: Runtime) -> float:
        return min(30.0, max((c.timeout for c in runtime.checks if c.kind != "control"), default=1.0))

    async def _unschedule(self, runtime: Runtime) -> None:
        """Remove the jobs of ``runtime``, then let its checks in flight finish (bounded)."""
        assert self._scheduler is not None
        for group in runtime.groups:
            with contextlib.suppress(Exception):
                self._scheduler.remove_job(group.id)
        self._groups.clear()
        self._stopping = True
        try:
            await self._drain(runtime, self._max_timeout(runtime))
        finally:
            self._stopping = False

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
                new = Runtime(self, config)  # may fail (key file gone...): nothing changed yet
            except Exception:
                log.exception("reload rejected, the running configuration stays")
                return
            await self._unschedule(old)
            new.carry_over(old)
            self._runtime = new
            self.config = config
            self._add_jobs(self._runtime)
            await old.aclose()
            log.info("configuration reloaded: %s", self._runtime_size())

    async def stop(self, flush_timeout: float = 5.0) -> None:
        """Stop scheduling, finish or cancel in-flight checks, close, flush telemetry."""
        if not self.running:
            return
        self.running = False
        self._stopping = True
        if self._scheduler is not None:
            self._scheduler.pause()  # no new runs; shutdown() would cancel the running ones
        self._groups.clear()  # nor any run already submitted
        if self._runtime is not None:
            await self._drain(self._runtime, self._max_timeout(self._runtime))
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

    def on_result(self, key: ResultKey, result: ProbeResult) -> None:
        """A check's new result, just stored in :attr:`state`: tell every listener (on the
        loop; a listener that raises is logged and the others still hear of it)."""
        for listener in self.result_listeners:
            try:
                listener(key, result)
            except Exception:
                log.exception("result listener %r failed on %s", listener, key)

    def maintenance(self, now: float | None = None) -> Decision:
        """What the maintenance windows mean at ``now`` (default: :attr:`clock`)."""
        now = self.clock() if now is None else now
        extra = self._runtime.maintenance_windows() if self._runtime is not None else ()
        return decide(windows_at(self.config, now, extra), now)

    # --- read by the HTTP listener ---------------------------------------------------------

    def control_document(self) -> bytes | None:
        c = self.state.control
        return c.document if c is not None and c.document else None

    def healthy(self) -> bool:
        return self.running and self._scheduler is not None and self._scheduler.running

    @property
    def uptime(self) -> float:
        return time.time() - self.state.started_at
