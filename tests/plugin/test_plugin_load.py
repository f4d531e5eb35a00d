"""The plugin loads in every pytest run of anyone who installs the package: no configuration
needed, nothing heavy imported until a fixture or an option asks for it."""

from __future__ import annotations

import subprocess
import sys

import pytest

HEAVY = ("trustme", "cryptography", "opentelemetry.sdk", "pytest_failover.simulator", "aiohttp", "requests")


def test_importing_the_plugin_imports_nothing_heavy() -> None:
    """``import pytest_failover.plugin`` leaves trustme, cryptography, the OTel SDK and the simulator alone."""
    code = (
        "import sys, pytest_failover.plugin\n"
        f"heavy = {HEAVY!r}\n"
        "print(sorted(m for m in sys.modules if m.startswith(heavy)))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


def test_a_session_that_uses_no_fixture_stays_light(pytester: pytest.Pytester) -> None:
    """With no configuration at all the plugin is active, and a plain test session never loads the heavy parts."""
    pytester.makepyfile(
        f"""
        import sys

        def test_plain():
            assert [m for m in sys.modules if m.startswith({HEAVY[:4]!r})] == []
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:hypothesispytest", "-p", "no:respx")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["plugins:*failover-0.1.0*"])
