"""What the plugin does to the failover clients of a downstream suite between its tests:
each test starts with what they learned in earlier tests forgotten (ini
``failover_fresh_state``, true by default), so a session-wide client that failed over in one
test serves the next from its primary; and a run may put them in testing mode (ini
``failover_testing``), retrying without the waits."""

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


def test_3_the_primary_answers(fake_domains, client):
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
    # -vv: the summary's lines whole, as pytest writes them only under CI otherwise
    result = _run(downstream, "-o", "failover_fresh_state=false", "-vv")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines_random([
        "FAILED *test_2_a_healthy_pool_is_served_by_its_primary - AssertionError: assert (?'open', 'closed'? == *",  # (fnmatch: ? for [ and ])
        "FAILED *test_3_the_primary_answers - AssertionError: assert 'https://api2.example.com' *",
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


TESTING_SUITE = """
import time

import httpx
import pytest_failover
from pytest_failover import FailoverTransport, Pool


def test_retries_go_at_once(fake_domains, fake_domains_ssl_context, monkeypatch):
    for host in ("api.example.com", "api2.example.com"):
        fake_domains.add(host)
        fake_domains.fail(host, "status", 503, headers={"Retry-After": "5"})
    slept = []
    monkeypatch.setattr(time, "sleep", slept.append)
    inner = httpx.HTTPTransport(verify=fake_domains_ssl_context)
    pool = Pool("api", ["https://api.example.com", "https://api2.example.com"])
    with httpx.Client(transport=FailoverTransport([pool], transport=inner)) as client:
        result = client.get("https://api.example.com/v1/rooms").extensions["failover"]
    assert [a.status for a in result.attempts] == [503, 503, 503]
    assert slept == []
    assert pytest_failover.is_testing()
"""


def test_the_ini_turns_testing_mode_on_for_the_run(downstream: pytest.Pytester) -> None:
    """``failover_testing = true``: a pool whose domains both answer 503 with ``Retry-After:
    5`` gets its three attempts without a wait; without it the third waits the 5 s."""
    downstream.makepyfile(test_testing_suite=TESTING_SUITE)
    downstream.runpytest_subprocess("-p", "no:randomly", "-o", "failover_testing=true").assert_outcomes(passed=1)
    result = downstream.runpytest_subprocess("-p", "no:randomly")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["E * assert ?5.0? == ??"])  # it slept Retry-After's 5 s (fnmatch: ? for [ and ])


def test_the_run_gives_back_the_mode_it_found(downstream: pytest.Pytester) -> None:
    """Testing mode set for a run is off again when the run ends (an in-process run here)."""
    import pytest_failover

    downstream.makepyfile(test_on="import pytest_failover\n\ndef test_on():\n    assert pytest_failover.is_testing()\n")
    downstream.runpytest_inprocess("-p", "no:randomly", "-o", "failover_testing=true").assert_outcomes(passed=1)
    assert not pytest_failover.is_testing()
