"""The package's face: exactly the intended names, and nothing heavy at import time."""

from __future__ import annotations

import subprocess
import sys

import httpx

import pytest_failover


def test_exported_names_are_exactly_the_intended_ones() -> None:
    assert sorted(pytest_failover.__all__) == [
        "AllDomainsFailed",
        "AsyncFailoverTransport",
        "AttemptRecord",
        "CircuitOpenError",
        "ControlDocument",
        "ControlError",
        "ControlPoller",
        "Domain",
        "DomainState",
        "ExponentialBackoff",
        "FailoverError",
        "FailoverResult",
        "FailoverTransport",
        "Hedging",
        "Policy",
        "Pool",
        "PoolState",
        "RetryBudget",
        "ScheduleTable",
        "SlowCalls",
        "Step",
        "TimeOrder",
        "TransportState",
        "error_type_of",
    ]
    for name in pytest_failover.__all__:
        assert getattr(pytest_failover, name).__module__.startswith("pytest_failover.")


def test_names_load_lazily_and_every_name_resolves() -> None:
    code = (
        "import sys, pytest_failover;"
        "print('pytest_failover._transport' in sys.modules, 'httpx' in sys.modules);"
        "[getattr(pytest_failover, n) for n in pytest_failover.__all__];"
        "print('pytest_failover._transport' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False", "True"]


def test_errors_are_httpx_transport_errors() -> None:
    assert issubclass(pytest_failover.AllDomainsFailed, httpx.TransportError)
    assert issubclass(pytest_failover.CircuitOpenError, pytest_failover.FailoverError)


def test_importing_the_library_loads_only_httpx_and_the_otel_api() -> None:
    code = (
        "import sys, pytest_failover; pytest_failover.FailoverTransport;"
        "heavy = sorted({m.split('.')[0] for m in sys.modules} & "
        "{'trustme', 'cryptography', 'pytest', 'apscheduler', 'pydantic', 'aiohttp', 'anyio'});"
        "sdk = [m for m in sys.modules if m.startswith('opentelemetry.sdk')];"
        "print(heavy + sdk)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_telemetry_starts_when_an_sdk_is_installed_after_the_transport() -> None:
    """Without an SDK a request does no telemetry work; once global providers are set,
    the same transport emits spans, in a fresh process so the globals are clean."""
    code = """
import httpx
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pytest_failover import FailoverTransport, Pool

inner = httpx.MockTransport(lambda request: httpx.Response(200))
transport = FailoverTransport([Pool("api", ["https://api.example"])], transport=inner)
client = httpx.Client(transport=transport)
client.get("https://api.example/x")
exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)
client.get("https://api.example/x")
print(sorted(span.name for span in exporter.get_finished_spans()))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['GET', 'failover api']"
