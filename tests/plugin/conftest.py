"""Fixtures of the plugin's own tests: pytester, run as a downstream user would run pytest."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest


def pytest_configure(config: pytest.Config) -> None:
    # pytester is pytest's own plugin for testing plugins; the top-level conftest may
    # already enable it, and ``pytest_plugins`` is not allowed in a nested conftest.
    if not config.pluginmanager.has_plugin("pytester"):
        config.pluginmanager.import_plugin("pytester")




@pytest.fixture
def downstream(pytester: pytest.Pytester, _preloaded: None) -> pytest.Pytester:
    """A pytester project configured like a downstream suite (asyncio auto mode, no cache)."""
    pytester.makeini(
        """
        [pytest]
        asyncio_mode = auto
        asyncio_default_fixture_loop_scope = function
        addopts = -p no:cacheprovider -p no:hypothesispytest
        """
    )
    return pytester


EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def copy_example(pytester: pytest.Pytester, name: str) -> Path:
    """Copy ``tests/examples/<name>`` into the pytester project (works however pytester was loaded)."""
    target = pytester.path / name
    shutil.copyfile(EXAMPLES / name, target)
    return target
