"""The package's face: exactly the intended names, and nothing heavy at import time."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

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
        "is_testing",
        "set_testing",
    ]
    for name in pytest_failover.__all__:
        assert getattr(pytest_failover, name).__module__.startswith("pytest_failover.")


def private_imports(source: str) -> list[str]:
    """The names of the package's private modules or objects that ``source`` imports
    (``pytest_failover._pool``, ``from pytest_failover.control import _keys``); dunders
    such as ``__version__`` are public."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module is not None:
            names = [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if parts[0] == "pytest_failover" and any(p.startswith("_") and not p.startswith("__") for p in parts):
                found.append(name)
    return found


def test_the_private_import_finder_finds_them() -> None:
    """Modules, names and nested packages count; public names and dunders do not."""
    source = (
        "import pytest_failover._core\n"
        "from pytest_failover._pool import Domain\n"
        "from pytest_failover.control import _keys, ControlDocument\n"
        "from pytest_failover import Pool, __version__\n"
        "from pytest_failover.integrations.requests import FailoverAdapter\n"
        "import httpx._models\n"
    )
    assert private_imports(source) == [
        "pytest_failover._core", "pytest_failover._pool.Domain", "pytest_failover.control._keys",
    ]


def test_the_agent_and_the_benchmarks_import_only_public_names() -> None:
    """They are the library's first users: what they need of it is public."""
    root = Path(__file__).resolve().parents[2]
    found = {
        str(path.relative_to(root)): names
        for folder in ("agent", "benchmarks")
        for path in sorted((root / folder).rglob("*.py"))
        if (names := private_imports(path.read_text()))
    }
    assert found == {}, f"private names imported (export what they need instead): {found}"


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
    """Nothing heavy beside httpx (what httpx itself imports, as httpx 0.27 does anyio, is httpx's)."""
    code = (
        "import sys, httpx; httpx_s = set(sys.modules);"
        "import pytest_failover; pytest_failover.FailoverTransport;"
        "heavy = sorted({m.split('.')[0] for m in set(sys.modules) - httpx_s} & "
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
