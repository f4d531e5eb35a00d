"""Project-wide test configuration.

In CI (``CI`` set) a skipped test fails the run: the tests that need a real
component (Prometheus, promtool, TLS, sockets, the official LLM SDKs) must run there,
and a skip would hide that the component is missing. A module skipped as a whole while
it is collected (``pytest.importorskip``) fails the same way.

The transport's behaviour tests run against httpx and httpx2 alike (the ``make_client``
kinds, ``tests/client/frontends.py``). In CI a run that ran the httpx half and not the
httpx2 one fails too, however the httpx2 half was left out (skipped, deselected with
``-k``, or its kinds taken off the list).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Generator

import httpcore  # noqa: F401  (see below)
import httpcore2  # noqa: F401  (as httpcore, below)
import pytest

# Imported here, before any test: a pytester run in this process puts sys.modules back as it
# found it afterwards, dropping what it imported first. httpx2 imports httpcore2 at its first
# request and keeps the exception map it builds then; had that happened in a pytester run,
# the next test would import httpcore2 anew, whose errors that map no longer knows (they
# escaped httpx2 unmapped, for whichever test came next on that worker).
pytest_plugins = ["pytester"]

IN_CI = os.environ.get("CI", "").lower() not in ("", "0", "false", "no")


@pytest.fixture(scope="session")
def in_ci() -> bool:
    """Is this CI's run (``CI`` set), where a skip fails the run? For a test that asks more
    of CI than of a workstation (tests import nothing from this file: pytester copies it)."""
    return IN_CI


ALONE = (
    "alone: times several processes against a bound with little slack; `make pytest` runs "
    "these after the rest, by themselves (beside another test worker, a fleet of 4 processes "
    "once paid 8 attempts against the bound of 7 it pays 4-7 alone)"
)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", ALONE)
    if IN_CI and not hasattr(config, "workerinput"):  # an xdist worker sends its reports on
        config.pluginmanager.register(BothHalves(), "failover-both-halves")


class BothHalves:
    """Counts the tests of each half that ran (their call phase passed or failed: not
    skipped); at the end, in CI, a run with httpx tests and no httpx2 one fails. With
    xdist the reports reach the controller, which counts them."""

    HTTPX = ("[sync]", "[async]", "[httpx]")  # the ids of the httpx kinds, the sync/async pairs, ``http``
    HTTPX2 = ("[httpx2]", "[httpx2-async]")

    def __init__(self) -> None:
        self.ran = {"httpx": 0, "httpx2": 0}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when != "call" or report.skipped:
            return
        for half, ids in (("httpx", self.HTTPX), ("httpx2", self.HTTPX2)):
            if report.nodeid.endswith(ids):
                self.ran[half] += 1

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.ran["httpx"] and not self.ran["httpx2"]:
            reporter = session.config.pluginmanager.get_plugin("terminalreporter")
            message = (
                f"{self.ran['httpx']} transport tests ran against httpx and none against httpx2: "
                "CI must run both halves (install httpx2: pip install -e '.[dev]'; do not deselect them)"
            )
            if reporter is not None:
                reporter.write_line(message, red=True)
            session.exitstatus = pytest.ExitCode.TESTS_FAILED


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
    "httpx2",
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
