"""Fixtures of the docs runner."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    if not config.pluginmanager.has_plugin("pytester"):
        config.pluginmanager.import_plugin("pytester")


@pytest.fixture
def downstream(_preloaded: None, pytester: pytest.Pytester) -> pytest.Pytester:
    """A pytester project set up like a downstream suite that installed the package.

    ``_preloaded`` comes first: through ``request.getfixturevalue`` fixtures are made in the
    order of their arguments, and pytester's module snapshot must already hold those modules.
    """
    pytester.makeini(
        """
        [pytest]
        asyncio_mode = auto
        asyncio_default_fixture_loop_scope = function
        addopts = -p no:hypothesispytest
        """
    )
    return pytester

