"""Each client against each fault, run as a downstream suite through pytester.

The example files in ``tests/examples`` are what a user writes: they mark tests
with ``@pytest.mark.outage`` or use ``fake_domains``, and assert the exact
exception type their client raises. Running them through pytester proves the
plugin loads from its entry point with no configuration and does its job there.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import copy_example

EXAMPLES = {
    "httpx (sync)": ("example_httpx_sync.py", 18),
    "httpx (async)": ("example_httpx_async.py", 15),
    "requests": ("example_requests.py", 15),
    "urllib3": ("example_urllib3.py", 14),
    "urllib.request": ("example_urllib.py", 13),
    "aiohttp": ("example_aiohttp.py", 14),
}


def test_httpx2_clients_fail_over_with_the_plugin(downstream: pytest.Pytester) -> None:
    """httpx2's clients, sync and async, fail over through ``pytest_failover.httpx2`` in a
    downstream suite: faults from the marker and the fixture, TLS through the test CA (a
    client built before the domains trusts it through ``fake_domains_ssl_context``)."""
    copy_example(downstream, "example_httpx2.py")
    result = downstream.runpytest("-v", "example_httpx2.py")
    result.assert_outcomes(passed=8)
    result.stdout.fnmatch_lines(["*test_a_client_built_before_the_domains_trusts_their_ca PASSED*"])


@pytest.mark.parametrize("client", list(EXAMPLES))
def test_client_sees_each_fault(downstream: pytest.Pytester, client: str) -> None:
    """Every fault reaches the client through its own stack and raises that client's own exception."""
    filename, expected = EXAMPLES[client]
    copy_example(downstream, filename)
    result = downstream.runpytest("-v", filename)
    result.assert_outcomes(passed=expected)
    result.stdout.fnmatch_lines(
        [f"*{filename}::test_failure_raises?dns_nxdomain? PASSED*", f"*{filename}::test_failure_raises?tls_expired? PASSED*"]
    )


def test_first_test_of_the_docs_passes(downstream: pytest.Pytester) -> None:
    """The ten-line first test in docs/plugin.md runs green as written."""
    copy_example(downstream, "example_first.py")
    downstream.runpytest("example_first.py").assert_outcomes(passed=1)


def test_the_docs_show_the_first_test_as_it_is() -> None:
    """docs/plugin.md prints tests/examples/example_first.py: the two never drift apart."""
    root = Path(__file__).resolve().parents[2]
    example = (root / "tests" / "examples" / "example_first.py").read_text(encoding="utf-8")
    assert f"```python\n{example}```" in (root / "docs" / "plugin.md").read_text(encoding="utf-8")
