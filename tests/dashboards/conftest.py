"""Fixtures of the dashboard tests: Prometheus' binaries, the files under test."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DASHBOARDS = ROOT / "dashboards"


def ci_is_set() -> bool:
    """True when running in CI (``CI`` set to anything but empty, 0 or false)."""
    return os.environ.get("CI", "").strip().lower() not in {"", "0", "false", "no"}


def require_binary(name: str) -> str:
    """Path of ``name``; skip without it on a workstation, fail without it in CI."""
    path = shutil.which(name)
    if path is not None:
        return path
    hint = f"{name} is not installed: apt-get install prometheus (Debian's package has prometheus and promtool)"
    if ci_is_set():
        pytest.fail(f"CI is set but {hint}")
    pytest.skip(hint)


@pytest.fixture(scope="session")
def promtool() -> str:
    return require_binary("promtool")


@pytest.fixture(scope="session")
def prometheus_bin() -> str:
    return require_binary("prometheus")
