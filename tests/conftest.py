"""Project-wide test configuration.

In CI (``CI`` set) a skipped test fails the run: the tests that need a real
component (Prometheus, promtool, TLS, sockets, the official LLM SDKs) must run there,
and a skip would hide that the component is missing. A module skipped as a whole while
it is collected (``pytest.importorskip``) fails the same way.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Generator

import pytest

pytest_plugins = ["pytester"]

IN_CI = os.environ.get("CI", "").lower() not in ("", "0", "false", "no")

ALONE = (
    "alone: times several processes against a bound with little slack; `make pytest` runs "
    "these after the rest, by themselves (beside another test worker, a fleet of 4 processes "
    "once paid 8 attempts against the bound of 7 it pays 4-7 alone)"
)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", ALONE)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if IN_CI and report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome = "failed"
        report.longrepr = f"skipped in CI, which must run every test: {reason}"
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(
    collector: pytest.Collector,
) -> Generator[None, pytest.CollectReport, pytest.CollectReport]:
    """A whole module skipped at import (``pytest.importorskip("openai")``) fails in CI too."""
    report = yield
    if IN_CI and report.skipped:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome = "failed"
        report.longrepr = f"skipped in CI, which must run every test: {reason}"
    return report


# In-process pytester runs drop the modules a run imported, and re-importing cryptography's
# Rust bindings (through trustme) in a later run breaks; imported once before the first
# run, they stay in the snapshot pytester restores.
PRELOAD = (
    "aiohttp",
    "cryptography.hazmat.primitives.asymmetric.ec",
    "cryptography.hazmat.primitives.asymmetric.rsa",
    "cryptography.x509",
    "httpx",
    "opentelemetry.sdk.metrics",
    "opentelemetry.sdk.trace",
    "pytest_failover.simulator",
    "pytest_failover.telemetry_capture",
    "requests",
    "trustme",
    "urllib3",
)


@pytest.fixture(scope="session")
def _preloaded() -> None:
    """Import what in-process pytester runs must find already imported."""
    for name in PRELOAD:
        importlib.import_module(name)
    import pytest_failover

    for name in pytest_failover.__all__:  # the package imports its modules lazily
        getattr(pytest_failover, name)
    import trustme

    trustme.CA().issue_cert("warm-up.example")  # loads the lazily imported OpenSSL backend too
