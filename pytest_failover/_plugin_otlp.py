"""``--failover-otlp-endpoint``: the test session as a trace in the team's tracing backend.

One trace per session: a ``pytest session`` root span, a span per test (its
result as attributes, its status ERROR when it failed), an event per injected
fault (added by the ``fake_domains`` fixture on the current span) and the
failover client's own spans as children of the test that made them (the test
span is the current span while setup, body and teardown run).

Under pytest-xdist the controller owns the root span and hands its
``traceparent`` to each worker, so every worker's tests land in the same trace.

The SDK's ``OTEL_*`` variables work as it documents them: ``OTEL_SERVICE_NAME`` and
``OTEL_RESOURCE_ATTRIBUTES`` name the service (``pytest`` otherwise); the exporter reads
``OTEL_EXPORTER_OTLP_[TRACES_]HEADERS``, ``_TIMEOUT``, ``_COMPRESSION`` and
``_CERTIFICATE``, the batch processor ``OTEL_BSP_*``; ``OTEL_SDK_DISABLED=true`` records
nothing. The option's endpoint wins over ``OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT``; with
no option, :func:`environment_requests_export` says whether those variables ask for the
export (then the plugin registers ``SessionTraceExporter(config, None)``), and the endpoint
and ``_PROTOCOL`` come from them. The option or ini value ``none`` turns the export off
whatever the environment says. The tracer's scope is ``pytest_failover.plugin`` with the
package version and the semantic-conventions schema URL.

Asked by the environment alone, the export stays out of the way of a suite's own tracing:
when the suite already installed an SDK ``TracerProvider`` (its exporters read the same
variables), the session and test spans join that provider and its exporters, and no second
exporter is added (it would send every span twice); and when the SDK or the OTLP exporter
is not installed, the run goes on without the session trace, with a
:class:`MissingExporterError`'s hint as a ``PytestConfigWarning``.
"""

from __future__ import annotations

import os
from collections.abc import Generator
from typing import Any
from urllib.parse import urlsplit

import pytest

from . import __version__, semconv

__all__ = ["OTLP_OFF", "MissingExporterError", "SessionTraceExporter", "build_span_exporter",
           "environment_requests_export"]

_WORKER_KEY = "failover_otlp_traceparent"
_REPORTS_KEY = pytest.StashKey[dict[str, pytest.TestReport]]()
OTLP_OFF = "none"
"""The option or ini value that turns the session trace off, OTEL_* variables or not."""
_INSTALL_HINT = (
    "the session trace (--failover-otlp-endpoint or OTEL_EXPORTER_OTLP_ENDPOINT) needs the "
    "OpenTelemetry SDK and OTLP exporter: "
    "pip install 'pytest-failover[simulator]' opentelemetry-exporter-otlp-proto-http "
    "(and opentelemetry-exporter-otlp-proto-grpc for grpc:// endpoints)"
)


_TRACES_ENDPOINT = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
_ENDPOINT = "OTEL_EXPORTER_OTLP_ENDPOINT"
_PROTOCOL_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")
_TIMEOUT_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT")
_DEFAULT_TIMEOUT = 5.0


class MissingExporterError(ImportError):
    """The OpenTelemetry SDK or the OTLP exporter the session trace needs is not installed
    (the message says what to install). The plugin makes it a usage error when the option
    asked for the export, a warning when the environment alone did."""


def _variable(*names: str) -> tuple[str, str] | None:
    """The first of ``names`` set to a non-blank value, and that value."""
    for name in names:
        value = os.environ.get(name, "").strip()
        if value:
            return name, value
    return None


def environment_requests_export() -> bool:
    """Whether the OTEL_* environment asks for the session trace without the option: an
    ``OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT``, unless ``OTEL_TRACES_EXPORTER=none`` or
    ``OTEL_SDK_DISABLED=true``."""
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if os.environ.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none":
        return False
    return _variable(_TRACES_ENDPOINT, _ENDPOINT) is not None


def build_span_exporter(endpoint: str | None, *, timeout: float | None = None) -> Any:
    """An OTLP span exporter for ``endpoint``: ``grpc://host:port`` or ``http(s)://host:port[/path]``.

    ``None``: everything from the OTEL_* environment, as the SDK documents it
    (``OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT`` and ``_PROTOCOL``: ``http/protobuf``, the
    default, or ``grpc``). Either way the exporters read ``OTEL_EXPORTER_OTLP_[TRACES_]HEADERS``,
    ``_TIMEOUT`` (else 5 s), ``_COMPRESSION`` and ``_CERTIFICATE`` themselves.
    """
    if timeout is None and _variable(*_TIMEOUT_VARIABLES) is None:
        timeout = _DEFAULT_TIMEOUT
    if endpoint is None:
        return _exporter_from_environment(timeout)
    parts = urlsplit(endpoint)
    if parts.scheme == "grpc":
        return _grpc_exporter()(endpoint=f"http://{parts.netloc}", insecure=True, timeout=timeout)
    if parts.scheme in {"http", "https"}:
        path = parts.path.rstrip("/")
        url = endpoint if path.endswith("/v1/traces") else f"{endpoint.rstrip('/')}/v1/traces"
        return _http_exporter()(endpoint=url, timeout=timeout)
    raise pytest.UsageError(
        f"--failover-otlp-endpoint={endpoint!r}: expected http://host:4318 (OTLP/HTTP) "
        "or grpc://host:4317 (OTLP/gRPC)"
    )


def _exporter_from_environment(timeout: float | None) -> Any:
    protocol = _variable(*_PROTOCOL_VARIABLES)
    if protocol is None or protocol[1] == "http/protobuf":
        return _http_exporter()(timeout=timeout)
    if protocol[1] == "grpc":
        return _grpc_exporter()(timeout=timeout)
    name, value = protocol
    raise pytest.UsageError(f"{name}={value!r}: the session trace is exported with 'http/protobuf' or 'grpc'")


def _http_exporter() -> Any:
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError as exc:
        raise MissingExporterError(f"{_INSTALL_HINT} ({exc})") from exc
    return OTLPSpanExporter


def _grpc_exporter() -> Any:
    try:
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    except ImportError as exc:
        raise MissingExporterError(f"{_INSTALL_HINT} ({exc})") from exc
    return OTLPSpanExporter


class SessionTraceExporter:
    """A plugin object registered by ``pytest_configure`` when the option is given, or when
    the OTEL_* environment asks for the export (``endpoint`` None)."""

    def __init__(self, config: pytest.Config, endpoint: str | None) -> None:
        """``endpoint`` from the option or ini; None: the OTEL_* environment's."""
        try:
            from opentelemetry import trace
            from opentelemetry.sdk.resources import OTELResourceDetector, Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor
            from opentelemetry.trace.propagation.tracecontext import (
                TraceContextTextMapPropagator,
            )
        except ImportError as exc:
            raise MissingExporterError(f"{_INSTALL_HINT} ({exc})") from exc

        self._config = config
        current = trace.get_tracer_provider()
        self._owns_provider = False
        self._processor: BatchSpanProcessor | None = None
        if isinstance(current, TracerProvider) and endpoint is None:
            # The suite's own SDK provider, its exporters configured by the same variables:
            # our spans join it (a second exporter would send each of its spans twice).
            provider = current
        elif isinstance(current, TracerProvider):
            # A provider is already set (the project's own conftest): add our export to it.
            self._processor = BatchSpanProcessor(build_span_exporter(endpoint))
            current.add_span_processor(self._processor)
            provider = current
        else:
            worker = getattr(config, "workerinput", {}).get("workerid", "")
            # "pytest" unless OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES name the service
            resource = (
                Resource.create({semconv.SERVICE_NAME: "pytest"})
                .merge(OTELResourceDetector().detect())
                .merge(Resource({semconv.PYTEST_WORKER: worker or "main"}))
            )
            provider = TracerProvider(resource=resource)
            self._processor = BatchSpanProcessor(build_span_exporter(endpoint))
            provider.add_span_processor(self._processor)
            if isinstance(current, trace.ProxyTracerProvider):
                trace.set_tracer_provider(provider)
            self._owns_provider = True
        self._provider = provider
        self._tracer = provider.get_tracer(semconv.PLUGIN_SCOPE, __version__, schema_url=semconv.SCHEMA_URL)
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
        if self._processor is None:  # joined the suite's provider: flush it, it shuts itself down
            self._provider.force_flush(timeout_millis=10_000)
            return
        self._processor.force_flush(timeout_millis=10_000)  # bounded even if the collector is gone
        if self._owns_provider:
            self._provider.shutdown()
        else:
            self._processor.shutdown()  # type: ignore[no-untyped-call]  # the SDK's method is untyped
