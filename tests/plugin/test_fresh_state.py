"""Each test of a downstream suite starts with what the failover clients learned in earlier
tests forgotten (ini ``failover_fresh_state``, true by default): a session-wide client that
failed over in one test serves the next from its primary, whatever ran before."""

from __future__ import annotations

import pytest

SUITE = """
import httpx
import pytest

from pytest_failover import FailoverTransport, Policy, Pool

PRIMARY, BACKUP = "https://api.example.com", "https://api2.example.com"
POOL = Pool("api", [PRIMARY, BACKUP])
POLICY = Policy(breaker_threshold=1, stale_on_failure=True)


@pytest.fixture(scope="session")
def transport(fake_domains_ssl_context):
    inner = httpx.HTTPTransport(verify=fake_domains_ssl_context)
    return FailoverTransport([POOL], POLICY, transport=inner)


@pytest.fixture(scope="session")
def client(transport):
    with httpx.Client(transport=transport, timeout=5.0) as client:
        yield client


def served_by(client):
    return client.get(PRIMARY + "/v1/rooms").extensions["failover"]


@pytest.mark.outage("api.example.com", "refused")
def test_1_the_primary_refuses(fake_domains, client, transport):
    fake_domains.add("api2.example.com")
    for _ in range(3):
        assert served_by(client).domain == BACKUP
    pool = transport.state().pools["api"]
    assert pool.domain(PRIMARY).breaker == "open" and pool.sticky == BACKUP


def test_2_a_healthy_pool_is_served_by_its_primary(fake_domains, client, transport):
    fake_domains.add("api.example.com")
    fake_domains.add("api2.example.com")
    pool = transport.state().pools["api"]
    assert [d.breaker for d in pool.domains] == ["closed", "closed"] and pool.sticky is None
    assert served_by(client).domain == PRIMARY


def test_3_the_primary_answers_then_both_fail(fake_domains, client):
    fake_domains.add("api.example.com")
    fake_domains.add("api2.example.com")
    assert served_by(client).domain == PRIMARY  # a copy the stale cache keeps


@pytest.mark.outage("api.example.com", "status", 503)
@pytest.mark.outage("api2.example.com", "status", 503)
def test_4_no_stale_copy_of_an_earlier_test(client):
    result = served_by(client)
    assert result.outcome == "failure" and not result.stale

"""


def _run(downstream: pytest.Pytester, *args: str) -> pytest.RunResult:
    downstream.makepyfile(test_fresh_suite=SUITE)
    return downstream.runpytest_subprocess("-p", "no:randomly", *args)


def test_a_session_client_starts_each_test_afresh(downstream: pytest.Pytester) -> None:
    """After a test in which the primary refused (breaker open, backup serving) and one that
    stored a stale copy, the next tests see closed breakers, the primary serving and no copy."""
    result = _run(downstream)
    result.assert_outcomes(passed=4)


def test_without_fresh_state_the_earlier_tests_leak(downstream: pytest.Pytester) -> None:
    """``failover_fresh_state = false`` keeps what earlier tests taught the client (which is
    what the default spares a suite): the second and third tests find the primary's breaker
    open and the backup serving, and the fourth gets a stale copy an earlier test stored."""
    result = _run(downstream, "-o", "failover_fresh_state=false")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines_random([
        "FAILED *test_2_a_healthy_pool_is_served_by_its_primary - AssertionError: assert (?'open', 'closed'? == *",  # (fnmatch: ? for [ and ])
        "FAILED *test_3_the_primary_answers_then_both_fail - AssertionError: assert 'https://api2.example.com' *",
        "FAILED *test_4_no_stale_copy_of_an_earlier_test - AssertionError: assert ('stale' == 'failure'*",
    ])


def test_a_run_that_builds_no_client_never_loads_it(downstream: pytest.Pytester) -> None:
    """The plugin's fixture runs before every test of every suite that has the package
    installed: in one that builds no failover client it finds none, without importing any."""
    downstream.makepyfile(test_plain="""
import sys

def test_one():
    pass

def test_two():
    assert "pytest_failover._state" not in sys.modules
""")
    downstream.runpytest_subprocess("-p", "no:randomly").assert_outcomes(passed=2)
