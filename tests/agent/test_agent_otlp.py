"""OTLP export arrives at a real receiver; probing goes on while the receiver is gone."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from agent_support import config, cors_handler, eventually, fake_domains, pick, running, scrape
from aiohttp import web
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from pytest_failover import __version__, faults
from pytest_failover.semconv import SCHEMA_URL
from pytest_failover.simulator import FakeDomains

__all__ = ["fake_domains"]

PRIMARY = "https://api.example.com"
BACKUP = "https://api2.example.com"


@dataclass(frozen=True)
class Scope:
    """An instrumentation scope as the receiver saw it."""

    name: str
    version: str
    schema_url: str


class Receiver:
    """A minimal OTLP/HTTP receiver that decodes the protobuf bodies; any POST path is a
    signal's endpoint, told apart by ``signal_of`` (the path's last part by default)."""

    def __init__(self, signal_of: Mapping[str, str] | None = None) -> None:
        self.metric_names: set[str] = set()
        self.metric_attrs: dict[str, list[dict[str, str]]] = {}
        self.metric_scopes: dict[str, Scope] = {}
        self.span_names: set[str] = set()
        self.span_scopes: dict[str, Scope] = {}
        self.resource: dict[str, str] = {}
        self.paths: set[str] = set()
        self.headers: dict[str, str] = {}
        self.signal_of = dict(signal_of or {})
        self.runner: web.AppRunner | None = None
        self.port = 0
        self.delay = 0.0  # seconds before answering: a slow collector

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def receive(self, request: web.Request) -> web.Response:
        await asyncio.sleep(self.delay)
        self.paths.add(request.path)
        self.headers.update({k.lower(): v for k, v in request.headers.items()})
        body = await request.read()
        signal = self.signal_of.get(request.path, request.path.rpartition("/")[2])
        if signal == "traces":
            self._traces(ExportTraceServiceRequest.FromString(body))
            return web.Response(body=ExportTraceServiceResponse().SerializeToString(),
                                content_type="application/x-protobuf")
        self._metrics(ExportMetricsServiceRequest.FromString(body))
        return web.Response(body=ExportMetricsServiceResponse().SerializeToString(),
                            content_type="application/x-protobuf")

    def _traces(self, body: ExportTraceServiceRequest) -> None:
        for rs in body.resource_spans:
            self.resource.update({a.key: a.value.string_value for a in rs.resource.attributes})
            for ss in rs.scope_spans:
                for span in ss.spans:
                    self.span_names.add(span.name)
                    self.span_scopes[span.name] = Scope(ss.scope.name, ss.scope.version, ss.schema_url)

    def _metrics(self, body: ExportMetricsServiceRequest) -> None:
        for rm in body.resource_metrics:
            self.resource.update({a.key: a.value.string_value for a in rm.resource.attributes})
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    self.metric_names.add(metric.name)
                    self.metric_scopes[metric.name] = Scope(sm.scope.name, sm.scope.version, sm.schema_url)
                    points = metric.gauge.data_points or metric.sum.data_points or metric.histogram.data_points
                    for point in points:
                        self.metric_attrs.setdefault(metric.name, []).append(
                            {a.key: a.value.string_value for a in point.attributes})

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/{path:.*}", self.receive)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", self.port)
        await site.start()
        self.port = int(self.runner.addresses[0][1])

    async def stop(self) -> None:
        assert self.runner is not None
        await self.runner.cleanup()


@asynccontextmanager
async def receiving(signal_of: Mapping[str, str] | None = None) -> AsyncIterator[Receiver]:
    """A started :class:`Receiver`, stopped at the end of the block."""
    receiver = Receiver(signal_of)
    await receiver.start()
    try:
        yield receiver
    finally:
        await receiver.stop()


@asynccontextmanager
async def grpc_receiving() -> AsyncIterator[tuple[int, dict[str, set[str]]]]:
    """A real OTLP/gRPC receiver on loopback: its port and the span and metric names it got."""
    import grpc
    from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2_grpc
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc

    seen: dict[str, set[str]] = {"spans": set(), "metrics": set()}

    class Traces(trace_service_pb2_grpc.TraceServiceServicer):
        async def Export(self, request: ExportTraceServiceRequest, context: object) -> ExportTraceServiceResponse:
            seen["spans"].update(s.name for rs in request.resource_spans for ss in rs.scope_spans
                                 for s in ss.spans)
            return ExportTraceServiceResponse()

    class Metrics(metrics_service_pb2_grpc.MetricsServiceServicer):
        async def Export(self, request: ExportMetricsServiceRequest, context: object) -> ExportMetricsServiceResponse:
            seen["metrics"].update(m.name for rm in request.resource_metrics for sm in rm.scope_metrics
                                   for m in sm.metrics)
            return ExportMetricsServiceResponse()

    server = grpc.aio.server()
    # grpc's generated registration functions carry no annotations
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Traces(), server)  # type: ignore[no-untyped-call]  # generated code
    metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(Metrics(), server)  # type: ignore[no-untyped-call]  # generated code
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield port, seen
    finally:
        await server.stop(None)


async def test_otlp_http_export_arrives_and_probing_survives_a_dead_receiver(
    fake_domains: FakeDomains, tmp_path: Path
) -> None:
    """Spans and metrics reach an OTLP/HTTP receiver; with the receiver stopped, probes go on,
    the queue stays bounded and the losses are counted."""
    fd = fake_domains
    fd.add("api.example.com", cors_handler())
    fd.add("api2.example.com", cors_handler())
    fd.fail("api.example.com", faults.refused())  # so the client emits failover spans and events
    receiver = Receiver()
    await receiver.start()
    otlp = {"endpoint": f"http://127.0.0.1:{receiver.port}", "protocol": "http", "timeout": 0.3,
            "export_interval": 0.3, "schedule_delay": 0.1, "max_queue_size": 64,
            "max_export_batch_size": 16}
    cfg = config(fd, tmp_path, [PRIMARY, BACKUP], exporters={
        "prometheus": {"listen": "127.0.0.1:0"}, "otlp": otlp})
    async with running(cfg) as agent:
        await eventually(lambda: {"failover.probe.success", "failover.probe.duration",
                                  "failover.pool.available", "failover.attempts"} <= receiver.metric_names)
        await eventually(lambda: {"failover api", "GET"} <= receiver.span_names)
        assert receiver.resource["probe.location"] == "test-lab"
        assert receiver.resource["service.name"] == "failover-agent"
        success = receiver.metric_attrs["failover.probe.success"]
        assert receiver.paths == {"/v1/traces", "/v1/metrics"}
        # the agent's meter and the client's tracer are named in full
        assert receiver.metric_scopes["failover.probe.success"] == Scope("failover_agent", __version__, SCHEMA_URL)
        assert receiver.span_scopes["failover api"] == Scope("pytest_failover", __version__, SCHEMA_URL)
        wanted = {"failover.pool": "api", "server.address": "api.example.com", "probe.location": "test-lab"}
        assert any(point.items() >= wanted.items() for point in success), success

        await receiver.stop()
        status = agent.state.domains[("api", BACKUP)]
        before = status.last.at if status.last else 0.0
        # Still probing, several rounds later, with nobody receiving the telemetry.
        await eventually(lambda: status.last is not None and status.last.at > before + 1.0)

        async def dropped() -> bool:
            s = await scrape(agent)
            return sum(pick(s, "failover_agent_telemetry_dropped_total")) > 0

        await eventually(dropped)
        queues = [p._batch_processor._queue for p in
                  agent.telemetry.tracer_provider._active_span_processor._span_processors
                  if hasattr(p, "_batch_processor")]
        assert queues and all(q.maxlen == 64 and len(q) <= 64 for q in queues)


async def test_a_slow_otlp_receiver_never_slows_probing(fake_domains: FakeDomains, tmp_path: Path) -> None:
    """A collector slower than the export timeout: exports fail and are counted, probes keep
    their pace."""
    fd = fake_domains
    fd.add("api.example.com", cors_handler())
    receiver = Receiver()
    receiver.delay = 1.0  # five times the export timeout
    await receiver.start()
    otlp = {"endpoint": f"http://127.0.0.1:{receiver.port}", "protocol": "http", "timeout": 0.2,
            "export_interval": 0.2, "schedule_delay": 0.1, "max_queue_size": 16,
            "max_export_batch_size": 4}
    cfg = config(fd, tmp_path, [PRIMARY], exporters={
        "prometheus": {"listen": "127.0.0.1:0"}, "otlp": otlp})
    try:
        async with running(cfg) as agent:
            status = agent.state.domains[("api", PRIMARY)]
            await eventually(lambda: status.last is not None)
            assert status.last is not None
            first = status.last.at

            async def dropped() -> bool:
                s = await scrape(agent)
                return (sum(pick(s, "failover_agent_telemetry_dropped_total", signal="metrics")) > 0
                        and sum(pick(s, "failover_agent_telemetry_dropped_total", signal="spans")) > 0)

            await eventually(dropped)
            await eventually(lambda: status.last is not None and status.last.at > first + 1.0)
            assert status.last is not None and status.last.success
    finally:
        await receiver.stop()


async def test_otlp_grpc_export_arrives(fake_domains: FakeDomains, tmp_path: Path) -> None:
    """With protocol = "grpc", spans and metrics reach a real gRPC OTLP receiver."""
    async with grpc_receiving() as (port, seen):
        fd = fake_domains
        fd.add("api.example.com", cors_handler())
        otlp = {"endpoint": f"http://127.0.0.1:{port}", "protocol": "grpc", "timeout": 2.0,
                "export_interval": 0.3, "schedule_delay": 0.1}
        cfg = config(fd, tmp_path, [PRIMARY], exporters={
            "prometheus": {"listen": "127.0.0.1:0"}, "otlp": otlp})
        async with running(cfg):
            await eventually(lambda: {"failover.probe.success", "failover.requests"} <= seen["metrics"])
            await eventually(lambda: "failover api" in seen["spans"])
