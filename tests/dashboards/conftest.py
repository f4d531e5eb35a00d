"""Fixtures of the dashboard tests: Prometheus' binaries, the files under test."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DASHBOARDS = ROOT / "dashboards"


def require_binary(name: str) -> str:
    """Path of ``name``; skip without it (in CI a skip fails the run: tests/conftest.py)."""
    path = shutil.which(name)
    if path is not None:
        return path
    pytest.skip(f"{name} is not installed: apt-get install prometheus (Debian's package has prometheus and promtool)")


@pytest.fixture(scope="session")
def promtool() -> str:
    return require_binary("promtool")


@pytest.fixture(scope="session")
def prometheus_bin() -> str:
    return require_binary("prometheus")
