"""Project-wide test configuration.

In CI (``CI`` set) a skipped test fails the run: the tests that need a real
component (Prometheus, promtool, TLS, sockets) must run there, and a skip would
hide that the component is missing.
"""

from __future__ import annotations

import os
from collections.abc import Generator

import pytest

pytest_plugins = ["pytester"]

IN_CI = os.environ.get("CI", "").lower() not in ("", "0", "false", "no")


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
