"""The SDK's ``OTEL_*`` variables in the plugin's session trace (``--failover-otlp-endpoint``)."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
    OTLPSpanExporter as GrpcSpanExporter,
)
from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
    OTLPSpanExporter as HttpSpanExporter,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from pytest_failover import __version__
from pytest_failover._plugin_otlp import build_span_exporter, environment_requests_export
from pytest_failover.semconv import PLUGIN_SCOPE, SCHEMA_URL

from .otlp_receiver import ReceivedSpan, _received

SUITE = """
def test_one():
    pass
"""


class _Seen:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.headers: list[dict[str, str]] = []
        self.scopes: set[tuple[str, str, str]] = set()
        self.spans: list[ReceivedSpan] = []


@contextmanager
def receiver() -> Iterator[tuple[str, _Seen]]:
    """An OTLP/HTTP receiver on loopback that also keeps the request headers and the scopes."""
    seen = _Seen()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = ExportTraceServiceRequest.FromString(self.rfile.read(int(self.headers["Content-Length"])))
            with seen.lock:
                seen.headers.append({k.lower(): v for k, v in self.headers.items()})
                seen.scopes |= {(ss.scope.name, ss.scope.version, ss.schema_url)
                                for rs in body.resource_spans for ss in rs.scope_spans}
                seen.spans += _received(body)
            self.send_response(200)  # an empty ExportTraceServiceResponse is zero bytes
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:  # quiet test output
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@pytest.fixture(autouse=True)
def _clean_otel_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test sets the OTEL_* variables it is about, and no others."""
    for name in list(os.environ):
        if name.startswith("OTEL_"):
            monkeypatch.delenv(name)


def test_session_trace_honours_service_resource_and_header_variables(
    downstream: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES name the service (not our default
    "pytest"), OTEL_EXPORTER_OTLP_HEADERS reach the collector, and the tracer's scope carries
    the package version and the schema URL."""
    downstream.makepyfile(SUITE)
    with receiver() as (endpoint, seen):
        monkeypatch.setenv("OTEL_SERVICE_NAME", "checkout-tests")
        monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "ci.pipeline.id=4711,service.namespace=shop")
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-honeycomb-team=secret-key")
        monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
        result = downstream.runpytest_subprocess("--failover-otlp-endpoint", endpoint)
        result.assert_outcomes(passed=1)
    names = {span.name for span in seen.spans}
    assert {"pytest session", "test_session_trace_honours_service_resource_and_header_variables.py::test_one"} <= names
    resources = [span.resource for span in seen.spans]
    assert {r["service.name"] for r in resources} == {"checkout-tests"}
    assert {r["ci.pipeline.id"] for r in resources} == {"4711"}
    assert {r["service.namespace"] for r in resources} == {"shop"}
    assert {r["pytest.worker"] for r in resources} == {"main"}
    assert {h["x-honeycomb-team"] for h in seen.headers} == {"secret-key"}
    assert seen.scopes == {(PLUGIN_SCOPE, __version__, SCHEMA_URL)}


def test_sdk_disabled_sends_nothing(downstream: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """OTEL_SDK_DISABLED=true: the run passes and the collector receives no span."""
    downstream.makepyfile(SUITE)
    with receiver() as (endpoint, seen):
        monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
        result = downstream.runpytest_subprocess("--failover-otlp-endpoint", endpoint)
        result.assert_outcomes(passed=1)
    assert seen.spans == []


def test_the_option_wins_over_the_endpoint_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    """The option's endpoint is the one used; the variables' is not."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://127.0.0.1:1/elsewhere")
    exporter = build_span_exporter("http://127.0.0.1:4318")
    assert isinstance(exporter, HttpSpanExporter)
    assert exporter._endpoint == "http://127.0.0.1:4318/v1/traces"


@pytest.mark.parametrize(
    ("variables", "kind", "endpoint"),
    [
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, HttpSpanExporter,
         "http://127.0.0.1:4318/v1/traces"),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/otlp/spans"}, HttpSpanExporter,
         "http://127.0.0.1:4318/otlp/spans"),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
         GrpcSpanExporter, "127.0.0.1:4317"),
    ],
    ids=["base-endpoint", "traces-endpoint", "grpc"],
)
def test_without_the_option_the_environment_chooses(
    monkeypatch: pytest.MonkeyPatch, variables: dict[str, str], kind: type, endpoint: str
) -> None:
    """No option: the endpoint and protocol variables ask for the export and say where and how."""
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    assert environment_requests_export()
    exporter: HttpSpanExporter | GrpcSpanExporter = build_span_exporter(None)
    assert type(exporter) is kind
    assert exporter._endpoint == endpoint  # the exporters keep it private


@pytest.mark.parametrize(
    "variables",
    [{}, {"OTEL_TRACES_EXPORTER": "none"}, {"OTEL_SDK_DISABLED": "true"}],
    ids=["no-endpoint", "exporter-none", "sdk-disabled"],
)
def test_the_environment_does_not_ask_for_export(monkeypatch: pytest.MonkeyPatch, variables: dict[str, str]) -> None:
    """No endpoint variable, OTEL_TRACES_EXPORTER=none or OTEL_SDK_DISABLED=true: no export."""
    if variables:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    assert not environment_requests_export()


def test_an_unknown_protocol_variable_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """A protocol the exporters cannot speak names the variable and its value."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/json")
    with pytest.raises(pytest.UsageError, match=r"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL='http/json'"):
        build_span_exporter(None)


# --- the environment alone turns the session trace on ----------------------------------


def test_the_endpoint_variable_alone_exports_the_session_trace(
    downstream: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No option, no ini: OTEL_EXPORTER_OTLP_ENDPOINT exports the session span and each
    test's span (its child) to that collector."""
    downstream.makepyfile(SUITE)
    with receiver() as (endpoint, seen):
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
        monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
        result = downstream.runpytest_subprocess()
        result.assert_outcomes(passed=1)
    by_name = {span.name: span for span in seen.spans}
    session = by_name["pytest session"]
    test = by_name["test_the_endpoint_variable_alone_exports_the_session_trace.py::test_one"]
    assert test.parent_span_id == session.span_id and test.trace_id == session.trace_id
    assert {span.resource["service.name"] for span in seen.spans} == {"pytest"}


@pytest.mark.parametrize("where", ["option", "ini"])
def test_none_turns_the_session_trace_off_whatever_the_environment_says(
    downstream: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """--failover-otlp-endpoint=none (or the ini value none) exports nothing although
    OTEL_EXPORTER_OTLP_ENDPOINT is set."""
    downstream.makepyfile(SUITE)
    args = ["--failover-otlp-endpoint=none"] if where == "option" else []
    if where == "ini":
        downstream.makeini("[pytest]\nfailover_otlp_endpoint = none\naddopts = -p no:cacheprovider\n")
    with receiver() as (endpoint, seen):
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
        monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
        result = downstream.runpytest_subprocess(*args)
        result.assert_outcomes(passed=1)
    assert seen.spans == [] and seen.headers == []


def test_the_environment_joins_a_provider_the_suite_installed_without_exporting_twice(
    downstream: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A suite that sets up its own SDK provider and OTLP exporter from the same variables:
    the session and test spans go through that exporter, and every span arrives once."""
    downstream.makeconftest(
        """
        from opentelemetry import trace
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        provider = TracerProvider(resource=Resource.create({"service.name": "shop-tests"}))
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        trace.set_tracer_provider(provider)
        """
    )
    downstream.makepyfile(
        """
        from opentelemetry import trace

        def test_one():
            with trace.get_tracer("shop").start_as_current_span("checkout"):
                pass
        """
    )
    with receiver() as (endpoint, seen):
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
        monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
        result = downstream.runpytest_subprocess()
        result.assert_outcomes(passed=1)
    names = sorted(span.name for span in seen.spans)
    assert names == sorted(["pytest session", "checkout",
                            "test_the_environment_joins_a_provider_the_suite_installed_without_exporting_twice.py::test_one"])
    assert len({span.span_id for span in seen.spans}) == 3
    assert {span.resource["service.name"] for span in seen.spans} == {"shop-tests"}
    by_name = {span.name: span for span in seen.spans}
    assert by_name["checkout"].parent_span_id == by_name[names[2]].span_id  # the test span is its parent


BLOCK_THE_EXPORTER = """
import sys

sys.modules["opentelemetry.exporter.otlp.proto.http.trace_exporter"] = None  # as if not installed
"""


def test_the_environment_without_the_exporter_installed_warns_and_runs_on(
    downstream: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """OTEL_EXPORTER_OTLP_ENDPOINT set for the code under test, no OTLP exporter installed:
    the run passes with a warning that says what to install; the option would be a usage error."""
    downstream.makeconftest(BLOCK_THE_EXPORTER)
    downstream.makepyfile(SUITE)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    result = downstream.runpytest_subprocess()
    result.assert_outcomes(passed=1, warnings=1)
    result.stdout.fnmatch_lines(["*PytestConfigWarning: pytest-failover: no session trace over OTLP: "
                                 "the session trace * needs the OpenTelemetry SDK and OTLP exporter: pip install*"])
    refused = downstream.runpytest_subprocess("--failover-otlp-endpoint", "http://127.0.0.1:9")
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    refused.stderr.fnmatch_lines(["*needs the OpenTelemetry SDK and OTLP exporter: pip install*"])
