"""A real OTLP/HTTP trace receiver on loopback, for the ``--failover-otlp-endpoint`` tests."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


@dataclass(frozen=True)
class ReceivedSpan:
    """One span as the collector received it."""

    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    attributes: dict[str, Any]
    events: list[tuple[str, dict[str, Any]]]
    status_code: int
    resource: dict[str, Any]


def _value(any_value: Any) -> Any:
    kind = any_value.WhichOneof("value")
    return getattr(any_value, kind) if kind else None


def _attributes(key_values: Any) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in key_values}


def _received(request: ExportTraceServiceRequest) -> list[ReceivedSpan]:
    spans = []
    for resource_spans in request.resource_spans:
        resource = _attributes(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                spans.append(
                    ReceivedSpan(
                        name=span.name,
                        trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(),
                        parent_span_id=span.parent_span_id.hex(),
                        attributes=_attributes(span.attributes),
                        events=[(e.name, _attributes(e.attributes)) for e in span.events],
                        status_code=span.status.code,
                        resource=resource,
                    )
                )
    return spans


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        with self.server.lock:
            self.server.paths.append(self.path)
            self.server.spans.extend(_received(request))
        payload = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: Any) -> None:
        """Keep the test output quiet."""


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.lock = threading.Lock()
        self.spans: list[ReceivedSpan] = []
        self.paths: list[str] = []


@dataclass
class Receiver:
    """The running receiver: its endpoint and what it received."""

    server: _Server
    endpoint: str

    @property
    def spans(self) -> list[ReceivedSpan]:
        with self.server.lock:
            return list(self.server.spans)

    @property
    def paths(self) -> list[str]:
        with self.server.lock:
            return list(self.server.paths)


@contextmanager
def otlp_receiver() -> Iterator[Receiver]:
    """Serve OTLP/HTTP on an ephemeral loopback port while the block runs."""
    server = _Server()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield Receiver(server, f"http://127.0.0.1:{server.server_address[1]}")
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@contextmanager
def otlp_grpc_receiver() -> Iterator[Receiver]:
    """Serve OTLP/gRPC on an ephemeral loopback port while the block runs."""
    from concurrent import futures

    import grpc
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc

    store = _Server.__new__(_Server)  # only its lock and lists are used
    store.lock = threading.Lock()
    store.spans = []
    store.paths = []

    class Servicer(trace_service_pb2_grpc.TraceServiceServicer):
        def Export(self, request: ExportTraceServiceRequest, context: Any) -> ExportTraceServiceResponse:
            with store.lock:
                store.paths.append("grpc:Export")
                store.spans.extend(_received(request))
            return ExportTraceServiceResponse()

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(  # type: ignore[no-untyped-call]  # generated code
        Servicer(), server
    )
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield Receiver(store, f"grpc://127.0.0.1:{port}")
    finally:
        server.stop(grace=None).wait(5)
