"""Fixtures of the alerting tests: Alertmanager's binaries (Debian's names), the shipped files."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from dashboards.conftest import require_binary

ROOT = Path(__file__).resolve().parents[2]
ALERTMANAGER_CONFIG = ROOT / "dashboards" / "alertmanager" / "alertmanager.yml"
RULES = ROOT / "dashboards" / "alerts.yml"


@pytest.fixture(scope="session")
def promtool() -> str:
    return require_binary("promtool")


@pytest.fixture(scope="session")
def amtool() -> str:
    return require_binary("amtool")


@pytest.fixture(scope="session")
def alertmanager_bin() -> str:
    """Debian installs Alertmanager as ``prometheus-alertmanager``; upstream as ``alertmanager``."""
    return shutil.which("alertmanager") or require_binary("prometheus-alertmanager")


@pytest.fixture(scope="session")
def prometheus_bin() -> str:
    return require_binary("prometheus")
