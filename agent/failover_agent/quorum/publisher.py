"""The quorum publisher: poll Prometheus, count the votes, sign, serve.

Rules and theory of operation
-----------------------------
Every ``control.interval`` the publisher runs :func:`~failover_agent.quorum.promql.location_votes`
(``for_seconds`` from ``[control.quorum]``) and counts, per configured domain, the distinct
locations that vote it down. Series naming a pool or an origin that is not in the
configuration are ignored: Prometheus cannot add a domain to the document. A domain with
at least ``min_locations`` votes is down (rule 1 of :mod:`failover_agent.control_writer`);
the override file and the pool rule follow, and the document is signed with a
``quorum`` member listing who agreed. A domain is enabled again as soon as fewer locations
vote for it.

Maintenance drains work as on an agent (rule 2b): the publisher reads the ``[[maintenance]]``
tables of its own configuration and ``control.maintenance_file`` (``failover-agent maintenance
start`` run against the publisher's configuration), and a domain draining for a window is
disabled from ``start - drain`` to ``end`` whatever the votes, the pool rule still holding.
It is not listed in ``quorum.agreed``: no location voted it down.

When Prometheus is unreachable, too slow (``timeout``), or answers anything but the
expected vector, nothing is signed: the document already served stays exactly as it was
(until it expires; clients that applied it keep it until a newer one arrives). The state
of the source is the gauge ``failover.control.quorum.up`` and one log line per change
(``ok`` -> ``unreachable`` -> ``invalid`` ...), never one per poll. At start, the document a
previous run left in ``control.output_file`` is served again if it still holds
(:meth:`ControlWriter.restore`), so a restart during an outage of Prometheus keeps it too.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

from opentelemetry.metrics import CallbackOptions, Observation

from pytest_failover import Domain
from pytest_failover.control import Quorum
from pytest_failover.semconv import FAILOVER_CONTROL_QUORUM_UP, PROBE_LOCATION, QUORUM_SCOPE

from ..config import AgentConfig, PoolConfig, QuorumConfig
from ..control_writer import ControlWriter, document_response
from ..listener import Listener, Request, Response, json_response, split_listen
from ..maintenance import Decision, decide, windows_at
from ..maintenance_file import MaintenanceFile
from ..metrics import AgentMetrics
from ..server import prometheus_response
from ..state import AgentState, DomainStatus, PoolStatus
from ..telemetry import Telemetry
from .prometheus import PrometheusQuery, QueryAnswer, QuorumSourceError
from .promql import DOMAIN_LABELS, LOCATION_LABEL, location_votes

__all__ = ["QuorumPublisher", "serve_quorum", "tally"]

log = logging.getLogger("failover_agent.publisher")

Agreed = dict[str, dict[str, tuple[str, ...]]]


def _origins(pools: Sequence[PoolConfig]) -> dict[tuple[str, ...], tuple[str, str]]:
    """(pool, scheme, host, port) as Prometheus labels -> (pool, configured URL)."""
    out: dict[tuple[str, ...], tuple[str, str]] = {}
    for pool in pools:
        for url in pool.domains:
            d = Domain.parse(url)
            out[(pool.name, d.scheme, d.host, str(d.effective_port))] = (pool.name, url)
    return out


def tally(answer: QueryAnswer, pools: Sequence[PoolConfig], min_locations: int) -> tuple[Agreed, int]:
    """The configured domains at least ``min_locations`` locations vote down, with those
    locations (sorted); and how many series named no configured domain (ignored)."""
    origins = _origins(pools)
    votes: dict[tuple[str, str], set[str]] = {}
    ignored = 0
    for sample in answer.data.result:
        key = origins.get(tuple(sample.metric[label] for label in DOMAIN_LABELS))
        if key is None:
            ignored += 1
            continue
        votes.setdefault(key, set()).add(sample.metric[LOCATION_LABEL])
    agreed: Agreed = {}
    for (pool, url), locations in sorted(votes.items()):
        if len(locations) >= min_locations:
            agreed.setdefault(pool, {})[url] = tuple(sorted(locations))
    return agreed, ignored


def _state(config: AgentConfig) -> AgentState:
    """The publisher's state: the configured pools and domains, never probed."""
    state = AgentState(location=config.location)
    for pool in config.pools:
        primary = pool.primary(config.region)
        state.pools[pool.name] = PoolStatus(pool.name, primary, Domain.parse(primary).host, tuple(pool.domains))
        for url in pool.domains:
            state.domains[(pool.name, url)] = DomainStatus(pool.name, url, Domain.parse(url).host,
                                                           is_primary=url == primary)
    return state


class QuorumPublisher:
    """Decides and signs the control document from Prometheus (see the module docstring)."""

    def __init__(self, config: AgentConfig, telemetry: Telemetry,
                 transport: Any = None) -> None:
        if config.control is None or config.control.quorum is None:
            raise ValueError("the quorum publisher needs [control] with a [control.quorum] section")
        self.config = config
        self.settings: QuorumConfig = config.control.quorum
        self.state = _state(config)
        self.writer = ControlWriter(config.control, config.pools, quorum=True)
        self.writer.restore(self.state)  # a restart while Prometheus is down keeps the last decision
        self._maintenance_file = MaintenanceFile.of(config.control)
        self.expr = location_votes(self.settings.for_seconds)
        self.source = PrometheusQuery(self.settings.prometheus_url, timeout=self.settings.timeout,
                                      headers=self.settings.headers, transport=transport)
        #: None before the first poll, "ok", or the reason of the last failure
        self.source_state: str | None = None
        self.agreed: Agreed = {}
        self.metrics = AgentMetrics(telemetry.meter_provider, lambda: self.state, telemetry.drops,
                                    **telemetry.gauge_options())
        meter = telemetry.meter_provider.get_meter(QUORUM_SCOPE)
        meter.create_observable_gauge(
            FAILOVER_CONTROL_QUORUM_UP, [self._up],
            description="1 if the last Prometheus query answered and the document was decided anew; "
                        "0 while the last document stays in force.")

    def _up(self, _: CallbackOptions) -> Iterable[Observation]:
        if self.source_state is None:
            return []
        return [Observation(int(self.source_state == "ok"), {PROBE_LOCATION: self.config.location})]

    def document(self) -> bytes | None:
        c = self.state.control
        return c.document if c is not None and c.document else None

    async def poll(self, now: float | None = None) -> bool:
        """One round: query, count, sign. False (and the document unchanged) if Prometheus failed."""
        try:
            answer = await self.source.query(self.expr)
        except QuorumSourceError as exc:
            self._source(exc.reason, str(exc))
            return False
        agreed, ignored = tally(answer, self.config.pools, self.settings.min_locations)
        if ignored:
            log.debug("quorum: %d series name no configured domain; ignored", ignored)
        before = self.state.control.disabled if self.state.control else None
        quorum = Quorum(min_locations=self.settings.min_locations, for_seconds=self.settings.for_seconds,
                        agreed=agreed)
        self.writer.publish(self.state, {pool: set(d) for pool, d in agreed.items()}, quorum, now,
                            drained=self.maintenance(now).drained())
        self._source("ok", "")
        after = self.state.control.disabled if self.state.control else {}
        if self.agreed != agreed or before != after:
            shown = {pool: {url: list(who) for url, who in d.items()} for pool, d in agreed.items()}
            disabled = {k: sorted(v) for k, v in after.items() if v}
            log.info("quorum: document v%d disables %s (agreed: %s)", self.writer.version,
                     disabled or "nothing", shown or "no domain is down")
        self.agreed = agreed
        return True

    def maintenance(self, now: float | None = None) -> Decision:
        """What the maintenance windows (configured and run-time) mean at ``now``."""
        now = time.time() if now is None else now
        extra = () if self._maintenance_file is None else self._maintenance_file.current()
        return decide(windows_at(self.config, now, extra), now)

    def _source(self, new: str, detail: str) -> None:
        if new == self.source_state:
            return
        old, self.source_state = self.source_state, new
        control = self.state.control
        if new == "ok":
            if old is not None:
                log.info("quorum: Prometheus answers again; the document is decided anew")
            if control is not None:
                control.error = None
            return
        kept = f"the last document (v{self.writer.version}) stays in force" if self.document() else \
            "no document is served until it answers"
        log.warning("quorum: no usable answer from Prometheus (%s): %s; %s", new, detail, kept)
        if control is not None:
            control.error = f"{new}: {detail}"

    async def aclose(self) -> None:
        await self.source.aclose()


def _listener(publisher: QuorumPublisher, telemetry: Telemetry, started: float) -> Listener:
    assert publisher.config.control is not None

    async def metrics(_: Request) -> Response:
        return await prometheus_response(telemetry)

    async def healthz(_: Request) -> Response:
        return json_response({"status": "ok", "uptime": round(time.time() - started, 3),
                              "location": publisher.config.location,
                              "prometheus": publisher.source_state or "not asked yet"})

    async def control(_: Request) -> Response:
        return document_response(publisher.document())

    return Listener({"/metrics": metrics, "/healthz": healthz, publisher.config.control.path: control})


async def serve_quorum(
    config: AgentConfig,
    *,
    listen: str | None = None,
    duration: float | None = None,
    on_started: Callable[[tuple[str, int]], Awaitable[None]] | None = None,
) -> int:
    """Run the publisher until SIGTERM/SIGINT (or ``duration``): poll every ``control.interval``,
    serve the document, ``/metrics`` and ``/healthz``. Returns the exit code (0)."""
    assert config.control is not None
    telemetry = Telemetry(location=config.location, otlp=config.exporters.otlp,
                          service_name="failover-agent-quorum")
    publisher = QuorumPublisher(config, telemetry)
    listener = _listener(publisher, telemetry, time.time())
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    try:
        bound = await listener.start(*split_listen(listen or config.exporters.prometheus.listen))
        log.info("quorum publisher at location %r: %s every %g s (%d location(s) for %d s), "
                 "listening on http://%s:%d", config.location, config.control.quorum.prometheus_url
                 if config.control.quorum else "?", config.control.interval,
                 publisher.settings.min_locations, publisher.settings.for_seconds, bound[0], bound[1])
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        if on_started is not None:
            await on_started((str(bound[0]), int(bound[1])))
        deadline = None if duration is None else loop.time() + duration
        interval = config.control.interval
        next_run = loop.time()
        while not stop.is_set() and (deadline is None or loop.time() < deadline):
            try:
                await publisher.poll()
            except Exception:  # a bug must not stop publishing; the document stays
                log.exception("quorum: poll failed")
            next_run = max(next_run + interval, loop.time())
            wait = next_run - loop.time() if deadline is None else min(next_run, deadline) - loop.time()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), max(wait, 0.0))
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        await publisher.aclose()
        await listener.aclose()
        await asyncio.to_thread(telemetry.shutdown, 5.0)
        log.info("quorum publisher stopped")
    return 0


