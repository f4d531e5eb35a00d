"""The ``outage`` marker and the ``fake_domains`` fixture: semantics and clear errors on misuse."""

from __future__ import annotations

import pytest


def test_marker_is_registered_with_its_signature(downstream: pytest.Pytester) -> None:
    """``pytest --markers`` documents the marker, so ``--strict-markers`` suites accept it."""
    result = downstream.runpytest("--markers")
    result.stdout.fnmatch_lines(["@pytest.mark.outage(host, fault, /, *args, **kwargs):*"])


@pytest.mark.parametrize(
    ("marker", "message"),
    [
        pytest.param(
            "'api.example.com', 'dns_nxdomian'",
            "unknown fault 'dns_nxdomian'. Did you mean 'dns_nxdomain'? Known faults: healthy, *",
            id="unknown-fault",
        ),
        pytest.param(
            "'api.example.com', 'status'",
            "wrong arguments for fault 'status': faults.status(code, body=b'', headers=None): missing a required argument: 'code'",
            id="missing-fault-argument",
        ),
        pytest.param(
            "'api.example.com', 'refused', 3",
            "wrong arguments for fault 'refused': faults.refused(): too many positional arguments*",
            id="extra-fault-argument",
        ),
        pytest.param(
            "'api.example.com', 'status', 999",
            "wrong arguments for fault 'status': status(code) must be an HTTP status code 100..599, got 999*",
            id="bad-fault-value",
        ),
        pytest.param(
            "'https://api.example.com/v1', 'refused'",
            "give the hostname, not a URL: 'https://api.example.com/v1' -> 'api.example.com'*",
            id="url-not-host",
        ),
        pytest.param(
            "'api.example.com'",
            "the host and the fault come first, as positional arguments; usage: @pytest.mark.outage(host, fault, *",
            id="missing-fault",
        ),
        pytest.param(
            "'api.example.com', 503",
            "the fault must be a fault name (str) such as 'refused' or a pytest_failover.faults object*got 503*",
            id="fault-not-a-name",
        ),
        pytest.param(
            "42, 'refused'",
            "the first argument must be a hostname (str), got 42*",
            id="host-not-a-string",
        ),
    ],
)
def test_bad_marker_is_a_setup_error_naming_the_fix(
    downstream: pytest.Pytester, marker: str, message: str
) -> None:
    """A marker with wrong arguments errors at setup, names the test and the marker, and says why."""
    downstream.makepyfile(
        f"""
        import pytest

        @pytest.mark.outage({marker})
        def test_app():
            pass
        """
    )
    result = downstream.runpytest()
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        [f"invalid @pytest.mark.outage(*) on test_bad_marker_is_a_setup_error_naming_the_fix.py::test_app: {message}"]
    )
    result.stdout.no_fnmatch_line("*Traceback*")


def test_fixture_misuse_gives_clear_errors(downstream: pytest.Pytester) -> None:
    """Unregistered domains, unknown fault names and a fixture kept past its test each raise a clear error."""
    downstream.makepyfile(
        """
        import pytest
        from pytest_failover import faults
        from pytest_failover.simulator import UnknownDomainError

        KEPT = []

        def test_fault_on_unregistered_domain(fake_domains):
            fake_domains.add("api.example.com")
            with pytest.raises(UnknownDomainError) as caught:
                fake_domains.fail("api2.example.com", faults.refused())
            print("MESSAGE1", caught.value)

        def test_unknown_fault_name(fake_domains):
            fake_domains.add("api.example.com")
            with pytest.raises(ValueError) as caught:
                fake_domains.fail("api.example.com", "refuse")
            print("MESSAGE2", caught.value)

        def test_keeps_the_fixture(fake_domains):
            KEPT.append(fake_domains)

        def test_uses_it_later():
            with pytest.raises(RuntimeError) as caught:
                KEPT[0].add("api.example.com")
            print("MESSAGE3", caught.value)
        """
    )
    result = downstream.runpytest("-s")
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(
        [
            "*MESSAGE1 fake_domains.fail('api2.example.com', ...): 'api2.example.com' is not a fake domain "
            "in this test (registered: api.example.com). Call fake_domains.add('api2.example.com') first, "
            "or mark the test @pytest.mark.outage('api2.example.com', ...), which registers it.",
            "*MESSAGE2 fake_domains.fail('api.example.com', 'refuse', ...): unknown fault 'refuse'. "
            "Did you mean 'refused'?*",
            "*MESSAGE3 fake_domains is only usable while its test runs*",
        ]
    )


def test_outage_never_met_is_a_teardown_error(downstream: pytest.Pytester) -> None:
    """A marked outage that the code under test never contacted fails the test: it tested nothing."""
    downstream.makepyfile(
        """
        import httpx
        import pytest

        @pytest.mark.outage("api.example.com", "refused")
        def test_typo_in_host():
            pass  # the application talks to api.exmaple.com, say

        @pytest.mark.outage("api.example.com", "dns_nxdomain")
        def test_dns_fault_is_met():
            with pytest.raises(httpx.ConnectError):
                httpx.get("https://api.example.com/")
        """
    )
    result = downstream.runpytest()
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*ERROR at teardown of test_typo_in_host*",
            "*the code under test never contacted the marked host(s), so the outage was not exercised:",
            "*@pytest.mark.outage('api.example.com', 'refused')",
            "Check the host name against the URLs the code uses, or remove the marker.",
        ]
    )


def test_markers_merge_closest_first_and_apply_after_fixtures(downstream: pytest.Pytester) -> None:
    """The function's marker beats the module's for the same host; other hosts' markers still apply;
    a fixture may register a marked host with its own handler and the fault still strikes."""
    downstream.makepyfile(
        """
        import httpx
        import pytest
        from pytest_failover.simulator import Response

        pytestmark = [
            pytest.mark.outage("api.example.com", "refused"),
            pytest.mark.outage("api2.example.com", "status", 503),
        ]

        @pytest.fixture
        def backend(fake_domains):
            fake_domains.add("api3.example.com", handler=lambda request: Response(201, "made"))
            return fake_domains

        @pytest.mark.outage("api.example.com", "status", 418)
        @pytest.mark.outage("api3.example.com", "latency", 0.01)
        def test_closest_marker_wins(backend):
            assert httpx.get("https://api.example.com/").status_code == 418
            assert httpx.get("https://api2.example.com/").status_code == 503
            response = httpx.get("https://api3.example.com/")
            assert (response.status_code, response.text) == (201, "made")
            assert [str(r.fault) for r in backend.requests("api3.example.com")] == ["latency"]

        def test_module_markers_alone():
            with pytest.raises(httpx.ConnectError):
                httpx.get("https://api.example.com/")
            assert httpx.get("https://api2.example.com/").status_code == 503
        """
    )
    downstream.runpytest().assert_outcomes(passed=2)


def test_each_test_starts_clean_and_leaves_nothing_patched(downstream: pytest.Pytester) -> None:
    """Domains, faults and records do not leak between tests; interception and trust end with the test."""
    downstream.makepyfile(
        """
        import os
        import socket

        import httpx
        import pytest

        ORIGINAL = socket.getaddrinfo
        BEFORE = os.environ.get("SSL_CERT_FILE")

        def test_first(fake_domains):
            fake_domains.add("api.example.com")
            fake_domains.fail("api.example.com", "status", 500)
            assert httpx.get("https://api.example.com/").status_code == 500
            assert socket.getaddrinfo is not ORIGINAL
            assert os.environ["SSL_CERT_FILE"] != BEFORE

        def test_outside_any_fake_domain():
            assert socket.getaddrinfo is ORIGINAL
            assert os.environ.get("SSL_CERT_FILE") == BEFORE

        def test_second(fake_domains):
            assert fake_domains.domains == ()
            assert fake_domains.requests() == []
            fake_domains.add("api.example.com")
            assert httpx.get("https://api.example.com/").status_code == 200
        """
    )
    downstream.runpytest("-p", "no:randomly").assert_outcomes(passed=3)


def test_session_ssl_context_serves_clients_built_once(downstream: pytest.Pytester) -> None:
    """A client built once per module trusts the fake domains through ``fake_domains_ssl_context``."""
    downstream.makepyfile(
        """
        import httpx
        import pytest

        @pytest.fixture(scope="module")
        def client(fake_domains_ssl_context):
            with httpx.Client(verify=fake_domains_ssl_context, timeout=1) as client:
                yield client

        @pytest.mark.parametrize("n", range(3))
        def test_reuses_client(client, fake_domains, n):
            fake_domains.add("api.example.com")
            assert client.get("https://api.example.com/").json()["domain"] == "api.example.com"
        """
    )
    downstream.runpytest().assert_outcomes(passed=3)
