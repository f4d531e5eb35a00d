"""Fixtures of the docs runner."""

from __future__ import annotations

import importlib

import pytest

# In-process pytester runs drop the modules a run imported, and re-importing cryptography's
# Rust bindings (through trustme) in a later run breaks; imported here first, they stay in
# the snapshot pytester restores (as in tests/plugin/conftest.py).
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


def pytest_configure(config: pytest.Config) -> None:
    if not config.pluginmanager.has_plugin("pytester"):
        config.pluginmanager.import_plugin("pytester")


@pytest.fixture(scope="session")
def _preloaded() -> None:
    for name in PRELOAD:
        importlib.import_module(name)
    import pytest_failover

    for name in pytest_failover.__all__:  # the package imports its modules lazily
        getattr(pytest_failover, name)
    import trustme

    trustme.CA().issue_cert("warm-up.example")  # loads the lazily imported OpenSSL backend too


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

