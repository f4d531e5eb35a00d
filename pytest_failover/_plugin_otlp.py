"""``--failover-otlp-endpoint``: the test session as a trace in the team's tracing backend.

One trace per session: a ``pytest session`` root span, a span per test (its
result as attributes, its status ERROR when it failed), an event per injected
fault (added by the ``fake_domains`` fixture on the current span) and the
failover client's own spans as children of the test that made them (the test
span is the current span while setup, body and teardown run).

Under pytest-xdist the controller owns the root span and hands its
``traceparent`` to each worker, so every worker's tests land in the same trace.
"""

from __future__ import annotations

import os
from collections.abc import Generator
from typing import Any
from urllib.parse import urlsplit

import pytest

from . import semconv

__all__ = ["SessionTraceExporter", "build_span_exporter"]

_WORKER_KEY = "failover_otlp_traceparent"
_REPORTS_KEY = pytest.StashKey[dict[str, pytest.TestReport]]()
_INSTALL_HINT = (
    "--failover-otlp-endpoint needs the OpenTelemetry SDK and OTLP exporter: "
    "pip install 'pytest-failover[simulator]' opentelemetry-exporter-otlp-proto-http "
    "(and opentelemetry-exporter-otlp-proto-grpc for grpc:// endpoints)"
)


def build_span_exporter(endpoint: str, *, timeout: float = 5.0) -> Any:
    """An OTLP span exporter for ``endpoint``: ``grpc://host:port`` or ``http(s)://host:port[/path]``."""
    parts = urlsplit(endpoint)
    try:
        if parts.scheme == "grpc":
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
                OTLPSpanExporter as GrpcSpanExporter,
            )

            return GrpcSpanExporter(endpoint=f"http://{parts.netloc}", insecure=True, timeout=timeout)
        if parts.scheme in {"http", "https"}:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            path = parts.path.rstrip("/")
            url = endpoint if path.endswith("/v1/traces") else f"{endpoint.rstrip('/')}/v1/traces"
            return OTLPSpanExporter(endpoint=url, timeout=timeout)
    except ImportError as exc:
        raise pytest.UsageError(f"{_INSTALL_HINT} ({exc})") from exc
    raise pytest.UsageError(
        f"--failover-otlp-endpoint={endpoint!r}: expected http://host:4318 (OTLP/HTTP) "
        "or grpc://host:4317 (OTLP/gRPC)"
    )


class SessionTraceExporter:
    """A plugin object registered by ``pytest_configure`` when the option is given."""

    def __init__(self, config: pytest.Config, endpoint: str) -> None:
        try:
            from opentelemetry import trace
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor
            from opentelemetry.trace.propagation.tracecontext import (
                TraceContextTextMapPropagator,
            )
        except ImportError as exc:
            raise pytest.UsageError(f"{_INSTALL_HINT} ({exc})") from exc

        self._config = config
        self._processor = BatchSpanProcessor(build_span_exporter(endpoint))
        current = trace.get_tracer_provider()
        self._owns_provider = False
        if isinstance(current, TracerProvider):
            # A provider is already set (the project's own conftest): add our export to it.
            current.add_span_processor(self._processor)
            provider = current
        else:
            worker = getattr(config, "workerinput", {}).get("workerid", "")
            service = os.environ.get("OTEL_SERVICE_NAME", "pytest")
            provider = TracerProvider(
                resource=Resource.create({semconv.SERVICE_NAME: service, semconv.PYTEST_WORKER: worker or "main"})
            )
            provider.add_span_processor(self._processor)
            if isinstance(current, trace.ProxyTracerProvider):
                trace.set_tracer_provider(provider)
            self._owns_provider = True
        self._provider = provider
        self._tracer = provider.get_tracer(semconv.PLUGIN_SCOPE)
        self._propagator = TraceContextTextMapPropagator()

        workerinput = getattr(config, "workerinput", None)
        if workerinput is not None and workerinput.get(_WORKER_KEY):
            # An xdist worker: the controller's session span is the parent of our tests.
            self._session_span = None
            self._session_context = self._propagator.extract({"traceparent": workerinput[_WORKER_KEY]})
        else:
            self._session_span = self._tracer.start_span(
                semconv.SESSION_SPAN,
                attributes={semconv.TEST_SUITE_NAME: str(config.rootpath.name)},
            )
            self._session_context = trace.set_span_in_context(self._session_span)

    # -- pytest-xdist ------------------------------------------------------------

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        """Hand the session span's traceparent to each xdist worker."""
        carrier: dict[str, str] = {}
        self._propagator.inject(carrier, context=self._session_context)
        if "traceparent" in carrier:
            node.workerinput[_WORKER_KEY] = carrier["traceparent"]

    # -- one span per test -------------------------------------------------------

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_protocol(
        self, item: pytest.Item, nextitem: pytest.Item | None
    ) -> Generator[None, object, object]:
        from opentelemetry import context, trace

        span = self._tracer.start_span(
            item.nodeid,
            context=self._session_context,
            attributes={
                semconv.TEST_CASE_NAME: item.nodeid,
                semconv.CODE_FUNCTION_NAME: item.name,
                semconv.CODE_FILE_PATH: str(item.path),
            },
        )
        item.stash[_REPORTS_KEY] = {}
        token = context.attach(trace.set_span_in_context(span))
        try:
            return (yield)
        finally:
            context.detach(token)
            self._finish_test_span(span, item.stash[_REPORTS_KEY])

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        reports = item.stash.get(_REPORTS_KEY, None)
        if reports is not None:
            reports[report.when] = report
        return report

    @staticmethod
    def _finish_test_span(span: Any, reports: dict[str, pytest.TestReport]) -> None:
        from opentelemetry.trace import Status, StatusCode

        failed = [report for report in reports.values() if report.failed]
        skipped = any(report.skipped for report in reports.values())
        if failed:
            outcome = "failed" if failed[0].when == "call" else "error"
            span.set_status(Status(StatusCode.ERROR, f"{failed[0].when}: {failed[0].longreprtext[-500:]}"))
        else:
            outcome = "skipped" if skipped else "passed"
        span.set_attribute(
            semconv.TEST_CASE_RESULT_STATUS, semconv.TEST_RESULT_FAIL if failed else semconv.TEST_RESULT_PASS
        )
        span.set_attribute(semconv.PYTEST_OUTCOME, outcome)
        call = reports.get("call")
        if call is not None:
            span.set_attribute(semconv.PYTEST_DURATION, call.duration)
        span.end()

    # -- the end -----------------------------------------------------------------

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if self._session_span is not None:
            self._session_span.end()
        self._processor.force_flush(timeout_millis=10_000)  # bounded even if the collector is gone
        if self._owns_provider:
            self._provider.shutdown()
        else:
            self._processor.shutdown()  # type: ignore[no-untyped-call]  # the SDK's method is untyped
