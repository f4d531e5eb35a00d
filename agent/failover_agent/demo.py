"""``failover-agent demo``: the agent probing fake domains through a scripted outage.

Three fake domains of one pool run on loopback (outage simulator): the primary
``api.example.com``, the backup ``api2.example.com`` and a regional entry
``api-eu.example.com``. The timeline (repeated every minute)::

     0 s  all healthy
     8 s  the primary's DNS fails (NXDOMAIN): probes go red, the client fails
          over to the backup, the primary's breaker opens, the control document
          disables the primary
    20 s  the backup's certificate is replaced by one expiring in 5 days:
          the readiness check flags it
    35 s  the primary recovers: breaker half-open then closed, traffic back
    50 s  the backup gets a fresh certificate

``--outage-at SECONDS`` brings the 8 s and 20 s steps both to SECONDS in (:func:`demo_timeline`).

The agent runs its normal code path; only the targets are fake.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import errno
import logging
import socket
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from pytest_failover import semconv

from .config import AgentConfig, parse_config
from .console import LiveReporter, Reporter, make_reporter
from .listener import listen_error

if TYPE_CHECKING:
    from pytest_failover.simulator import FakeDomains, RecordedRequest, ResponseSpec

    from .runner import Agent

__all__ = ["OUTAGE", "TIMELINE", "Step", "demo_config", "demo_timeline", "run_demo"]

log = logging.getLogger("failover_agent.demo")

PRIMARY = "api.example.com"
BACKUP = "api2.example.com"
REGIONAL = "api-eu.example.com"
CYCLE = 60.0

#: a step of the timeline: (seconds into the cycle, what happens, action name)
Step = tuple[float, str, str]

#: the scripted outage, played again every CYCLE seconds
TIMELINE: tuple[Step, ...] = (
    (0.0, "all domains healthy", "heal"),
    (8.0, f"{PRIMARY}: DNS fails (NXDOMAIN)", "dns_down"),
    (20.0, f"{BACKUP}: certificate replaced by one expiring in 5 days", "cert_expiring"),
    (35.0, f"{PRIMARY}: DNS recovers", "dns_up"),
    (50.0, f"{BACKUP}: fresh certificate installed", "cert_fresh"),
)
#: the outage's steps, one after the other in TIMELINE, that ``--outage-at`` moves
OUTAGE = ("dns_down", "cert_expiring")


def demo_timeline(outage_at: float | None = None) -> tuple[Step, ...]:
    """:data:`TIMELINE` with its :data:`OUTAGE` steps both ``outage_at`` seconds in (None: as
    scripted). ValueError for a time that is not between the steps around them (NaN neither)."""
    if outage_at is None:
        return TIMELINE
    moved = [i for i, (_, _, action) in enumerate(TIMELINE) if action in OUTAGE]
    after, before = TIMELINE[moved[0] - 1][0], TIMELINE[moved[-1] + 1][0]
    if not after < outage_at < before:
        raise ValueError(f"{outage_at:g} is not in the range {after:g}<SECONDS<{before:g}: the outage "
                         f"comes after the timeline's {after:g} s step and before its {before:g} s step")
    return tuple((outage_at if action in OUTAGE else at, text, action) for at, text, action in TIMELINE)


def _handler(request: RecordedRequest) -> ResponseSpec:
    from pytest_failover.simulator import Response

    if request.method == "OPTIONS":
        return Response(
            status=204,
            headers={
                "Access-Control-Allow-Origin": "https://app.example.com",
                "Access-Control-Allow-Methods": "GET, POST",
                "Access-Control-Allow-Headers": "content-type",
            },
        )
    return {"status": "ok", "domain": request.host}


def demo_config(key_file: Path, listen: str, ca_file: str | None) -> AgentConfig:
    """The demo's configuration: short intervals so things happen within seconds."""
    domains = [f"https://{PRIMARY}", f"https://{BACKUP}", f"https://{REGIONAL}"]
    data: dict[str, Any] = {
        "location": "demo",
        "pools": [{
            "name": "api",
            "domains": domains,
            "region_order": {"eu": [f"https://{REGIONAL}"]},
            "policy": {
                "attempt_timeout": 0.8, "deadline": 3.0,
                "breaker_threshold": 2, "breaker_cooldown": 5.0,
                "backoff": {"base": 0.05, "cap": 0.2, "max_attempts": 3},
            },
            "probe": {"path": "/health", "interval": 1.0, "timeout": 0.8,
                      "json_check": {"field": "status", "equals": "ok"}},
            "readiness": {"interval": 3.0, "timeout": 1.0, "cert_warning_days": 14.0,
                          "cors_origins": ["https://app.example.com"], "health_field": "status"},
        }],
        "exporters": {"prometheus": {"listen": listen}},
        "control": {"signing_key_file": key_file, "interval": 2.0, "expires_in": 60.0,
                    "disable_after": 2},
        # for `failover-agent rules` (dashboards/slo-demo.yml): the pool, end to end, and the
        # primary, whose probes fail for 27 s of every minute
        "slo": [{"pool": "api", "objective": 99.9, "window": "30d"},
                {"pool": "api", "domain": f"https://{PRIMARY}", "objective": 99.5, "window": "30d"}],
    }
    if ca_file:
        data["ca_file"] = Path(ca_file)
    return parse_config(data, source="<demo>")


class _SpanPrinter(SpanExporter):
    """Tells the story of the client's spans that show failover: switches and breakers."""

    def __init__(self, reporter: Reporter) -> None:
        self._reporter = reporter

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        for span in spans:
            for event in span.events:
                attrs = dict(event.attributes or {})
                if event.name == semconv.EVENT_SWITCH:
                    self._reporter.event(
                        f"  span {span.name!r}: event {semconv.EVENT_SWITCH} "
                        f"{attrs.get(semconv.FAILOVER_FROM)} -> "
                        f"{attrs.get(semconv.FAILOVER_TO)} ({attrs.get(semconv.FAILOVER_REASON)})")
                elif event.name == semconv.EVENT_BREAKER_TRANSITION:
                    self._reporter.event(
                        f"  span {span.name!r}: event {semconv.EVENT_BREAKER_TRANSITION} "
                        f"{attrs.get(semconv.FAILOVER_DOMAIN)} {attrs.get(semconv.FAILOVER_BREAKER_FROM)} -> "
                        f"{attrs.get(semconv.FAILOVER_BREAKER_TO)}")
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


def _free(listen: str) -> str:
    """``listen`` if it can be bound, else the same host with a free port."""
    host, _, port = listen.rpartition(":")
    with socket.socket() as s:
        try:
            s.bind((host.strip("[]"), int(port)))
            return listen
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:  # not ours to listen on, or no such host
                raise listen_error(host.strip("[]"), int(port), exc) from exc
            s.bind((host.strip("[]"), 0))
            free = s.getsockname()[1]
    log.warning("%s is in use; the demo listens on port %d instead", listen, free)
    return f"{host}:{free}"


async def _timeline(fd: FakeDomains, reporter: Reporter, timeline: Sequence[Step]) -> None:
    from pytest_failover import faults

    now = datetime.datetime.now(datetime.UTC)
    actions: dict[str, Callable[[], object]] = {
        "heal": lambda: fd.heal(),
        "dns_down": lambda: fd.fail(PRIMARY, faults.dns_nxdomain()),
        "dns_up": lambda: fd.heal(PRIMARY),
        "cert_expiring": lambda: fd.add(BACKUP, _handler,
                                        cert_not_after=now + datetime.timedelta(days=5)),
        "cert_fresh": lambda: fd.add(BACKUP, _handler),
    }
    loop = asyncio.get_running_loop()
    start = loop.time()
    cycle = 0
    while True:
        for at, text, action in timeline:
            delay = start + cycle * CYCLE + at - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            if action == "cert_expiring":
                now = datetime.datetime.now(datetime.UTC)
            actions[action]()
            reporter.event(f"[bold magenta]TIMELINE +{at:g}s[/bold magenta]: {text}"
                           if isinstance(reporter, LiveReporter) else f"TIMELINE +{at:g}s: {text}")
        cycle += 1


def run_demo(*, listen: str, duration: float | None, plain: bool, log_level: str,
             timeline: Sequence[Step] = TIMELINE) -> int:
    """Start the fake domains and the agent, then play ``timeline``; return the exit code."""
    from pytest_failover.control import generate_key, save_key
    from pytest_failover.simulator import FakeDomains

    from .logs import setup_logging
    from .service import serve
    from .telemetry import Telemetry

    reporter = make_reporter(force_plain=plain)
    setup_logging(log_level, reporter)
    listen = _free(listen)
    with tempfile.TemporaryDirectory(prefix="failover-demo-") as tmp, FakeDomains() as fd:
        for host in (PRIMARY, BACKUP, REGIONAL):
            fd.add(host, _handler)
        key = save_key(Path(tmp) / "control.key", generate_key("HS256", kid="demo"), private=True)
        config = demo_config(key, listen, fd.ca_bundle)
        telemetry = Telemetry(location=config.location, span_exporters=[_SpanPrinter(reporter)])
        tasks: list[asyncio.Task[None]] = []

        async def started(agent: Agent) -> None:
            assert agent.address is not None  # the demo always listens
            host, port = agent.address
            base = f"http://{host}:{port}"
            reporter.event(
                f"demo: pool 'api' = {PRIMARY} (primary), {BACKUP} (backup), {REGIONAL} (regional), "
                f"all fake, on loopback.\n  metrics: {base}/metrics   status page: {base}/   "
                f"health: {base}/healthz\n  control document (a JWS, application/jose): {base}/control.json; "
                f"to read it: curl -s {base}/control.json | failover-agent control verify - --key {key}\n"
                + ("  Ctrl-C to stop." if duration is None else f"  stopping after {duration:g} s."))
            tasks.append(asyncio.get_running_loop().create_task(_timeline(fd, reporter, timeline)))

        async def main() -> int:
            try:
                return await serve(config, config_path=None, reporter=reporter, listen=listen,
                                   duration=duration, on_started=started, telemetry=telemetry)
            finally:
                for task in tasks:
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task

        return asyncio.run(main())
