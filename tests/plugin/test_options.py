"""The plugin's options and its behaviour under pytest-xdist: ``--failover-block-unknown-hosts``
(and its ini twin), ``--failover-otlp-endpoint``, and ``-n 2``."""

from __future__ import annotations

import pytest

from .otlp_receiver import otlp_grpc_receiver, otlp_receiver

BLOCKING_SUITE = """
import socket

import httpx
import pytest
from pytest_failover.simulator import BlockedHostError

def test_unknown_host_fails_loudly():
    with pytest.raises(BlockedHostError, match="neither a fake domain nor loopback"):
        socket.getaddrinfo("www.python.org", 443)

def test_connect_by_address_is_blocked_too():
    with pytest.raises(BlockedHostError):
        socket.create_connection(("203.0.113.7", 443), timeout=0.2)

def test_swallowed_lookup_still_fails_the_test():
    try:
        httpx.get("https://pypi.org/simple/", timeout=0.2)
    except Exception:
        pass  # an application that swallows errors must not hide the escape

def test_fake_domains_and_loopback_are_allowed(fake_domains):
    fake_domains.add("api.example.com")
    assert httpx.get("https://api.example.com/").status_code == 200
    socket.getaddrinfo("localhost", 80)
    socket.getaddrinfo("127.0.0.1", 80)
"""


@pytest.mark.parametrize("how", ["option", "ini"])
def test_block_unknown_hosts(downstream: pytest.Pytester, how: str) -> None:
    """Any other host raises BlockedHostError in every test; a swallowed one still errors at teardown."""
    args: list[str] = []
    if how == "option":
        args.append("--failover-block-unknown-hosts")
    else:
        downstream.makeini(
            """
            [pytest]
            asyncio_default_fixture_loop_scope = function
            addopts = -p no:cacheprovider -p no:hypothesispytest
            failover_block_unknown_hosts = true
            """
        )
    downstream.makepyfile(BLOCKING_SUITE)
    result = downstream.runpytest(*args)
    result.assert_outcomes(passed=4, errors=3)
    result.stdout.fnmatch_lines(
        [
            "*ERROR at teardown of test_unknown_host_fails_loudly*",
            "*test_unknown_host_fails_loudly tried to reach hosts that --failover-block-unknown-hosts*",
            "  www.python.org",
            "Register each with fake_domains.add(host)*",
        ]
    )
    result.stdout.fnmatch_lines(["*ERROR at teardown of test_swallowed_lookup_still_fails_the_test*", "  pypi.org"])


def test_without_the_option_nothing_is_intercepted(downstream: pytest.Pytester) -> None:
    """By default a test that does not use the fixtures runs with the socket module untouched."""
    downstream.makepyfile(
        """
        import socket

        def test_untouched():
            assert socket.getaddrinfo.__module__ == "socket"
            assert socket.socket.connect.__qualname__ == "socket.connect"
        """
    )
    downstream.runpytest().assert_outcomes(passed=1)


XDIST_SUITE = """
import httpx
import pytest
from pytest_failover import ExponentialBackoff, FailoverTransport, Policy, Pool

POLICY = Policy(schedule=ExponentialBackoff(base=0.001, cap=0.01), attempt_timeout=0.5, deadline=2)

@pytest.mark.parametrize("fault", ["dns_nxdomain", "refused", "tls_untrusted", "read_timeout"])
def test_fails_over(fake_domains, failover_telemetry, fault):
    fake_domains.add("api.example.com")
    fake_domains.add("api2.example.com")
    fake_domains.fail("api.example.com", fault)
    pool = Pool("api", ["https://api.example.com", "https://api2.example.com"])
    with httpx.Client(transport=FailoverTransport([pool], POLICY)) as client:
        assert client.get("https://api.example.com/").json()["domain"] == "api2.example.com"
    assert failover_telemetry.outcome == "success"
    assert len(failover_telemetry.attempts()) == 2

@pytest.mark.outage("api.example.com", "status", 503)
async def test_async_marker(fake_domains):
    async with httpx.AsyncClient() as client:
        assert (await client.get("https://api.example.com/")).status_code == 503
    assert len(fake_domains.requests("api.example.com")) == 1
"""


def test_runs_under_xdist(downstream: pytest.Pytester) -> None:
    """Two workers, each with its own servers and ports, run fixture, marker and telemetry tests."""
    downstream.makepyfile(XDIST_SUITE)
    result = downstream.runpytest_subprocess("-n", "2", "-p", "xdist")
    result.assert_outcomes(passed=5)
    result.stdout.fnmatch_lines(["*2 workers*"])


OTLP_SUITE = """
import httpx
import pytest
from pytest_failover import ExponentialBackoff, FailoverTransport, Policy, Pool

def test_fails_over(fake_domains):
    fake_domains.add("api.example.com")
    fake_domains.add("api2.example.com")
    fake_domains.fail("api.example.com", "refused")
    pool = Pool("api", ["https://api.example.com", "https://api2.example.com"])
    policy = Policy(schedule=ExponentialBackoff(base=0.001, cap=0.01), attempt_timeout=0.5)
    with httpx.Client(transport=FailoverTransport([pool], policy)) as client:
        client.get("https://api.example.com/v1/rooms")

@pytest.mark.outage("api.example.com", "status", 500)
def test_that_fails():
    assert httpx.get("https://api.example.com/").status_code == 200
"""


@pytest.mark.parametrize(
    ("protocol", "workers"),
    [("http", 0), ("http", 2), ("grpc", 0)],
    ids=["otlp-http", "otlp-http-xdist", "otlp-grpc"],
)
def test_otlp_endpoint_exports_the_session(
    downstream: pytest.Pytester, protocol: str, workers: int
) -> None:
    """One trace: the session span, a span per test, fault events, the client's spans under their test."""
    downstream.makepyfile(OTLP_SUITE)
    receive = otlp_receiver if protocol == "http" else otlp_grpc_receiver
    with receive() as receiver:
        args = ["--failover-otlp-endpoint", receiver.endpoint]
        if workers:
            args += ["-p", "xdist", "-n", str(workers)]
        result = downstream.runpytest_subprocess(*args)
        result.assert_outcomes(passed=1, failed=1)
        spans = receiver.spans
    assert set(receiver.paths) == {"/v1/traces" if protocol == "http" else "grpc:Export"}
    by_name = {span.name: span for span in spans}
    session = by_name["pytest session"]
    passing = by_name["test_otlp_endpoint_exports_the_session.py::test_fails_over"]
    failing = by_name["test_otlp_endpoint_exports_the_session.py::test_that_fails"]
    assert {span.trace_id for span in spans} == {session.trace_id}
    assert passing.parent_span_id == failing.parent_span_id == session.span_id
    assert (passing.attributes["test.case.result.status"], passing.status_code) == ("pass", 0)
    assert (failing.attributes["pytest.outcome"], failing.status_code) == ("failed", 2)
    assert [
        (name, attributes["failover.fault.host"], attributes["failover.fault.name"])
        for name, attributes in passing.events
    ] == [("failover.fault.injected", "api.example.com", "refused")]
    assert [(name, attributes["failover.fault.name"]) for name, attributes in failing.events] == [
        ("failover.fault.injected", "status")
    ]
    logical = by_name["failover api"]
    assert logical.parent_span_id == passing.span_id
    assert logical.attributes["failover.outcome"] == "success"
    attempts = [span for span in spans if span.name == "GET" and span.parent_span_id == logical.span_id]
    assert sorted(span.attributes["failover.attempt"] for span in attempts) == [1, 2]
    if workers:
        assert {span.resource["pytest.worker"] for span in (passing, failing)} <= {"gw0", "gw1"}


def test_otlp_endpoint_with_unknown_scheme_is_a_usage_error(downstream: pytest.Pytester) -> None:
    """A typo in the endpoint stops the run at start-up with the accepted forms, not at the end."""
    downstream.makepyfile("def test_nothing(): pass")
    result = downstream.runpytest("--failover-otlp-endpoint", "localhost:4318")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*--failover-otlp-endpoint='localhost:4318': expected http://host:4318 (OTLP/HTTP) or grpc://host:4317 (OTLP/gRPC)*"]
    )


@pytest.mark.parametrize("name", ["failover_fresh_state", "failover_testing", "failover_block_unknown_hosts"])
def test_a_flag_that_is_neither_true_nor_false_is_a_usage_error_naming_it(downstream: pytest.Pytester, name: str) -> None:
    """The run stops at start-up with the option's name (pytest's own error names only the
    value), whether or not a test would have read it."""
    downstream.makepyfile("def test_nothing(): pass")
    result = downstream.runpytest("-o", f"{name}=maybe")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: ini option {name}: invalid truth value 'maybe' (expected true or false)"])
