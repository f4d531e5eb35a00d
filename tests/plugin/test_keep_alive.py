"""A session-wide client keeps its keep-alive connection from test to test, yet never
meets a stale fault: run as a downstream suite would, in one pytest session."""

from __future__ import annotations

import pytest

SUITE = """
import httpx
import pytest

from pytest_failover import faults

HOST = "api.example.com"
URL = f"https://{HOST}/v1/rooms"
PORTS = []


@pytest.fixture(scope="module")
def client(fake_domains_ssl_context):
    with httpx.Client(verify=fake_domains_ssl_context, timeout=5.0) as client:
        yield client


def get(client, expected):
    response = client.get(URL)
    assert response.status_code == expected
    PORTS.append(response.extensions["network_stream"].get_extra_info("client_addr")[1])


def test_1_status(fake_domains, client):
    fake_domains.add(HOST)
    fake_domains.fail(HOST, faults.status(503))
    get(client, 503)


@pytest.mark.outage(HOST, "status", 429)
def test_2_marker(client):
    get(client, 429)


def test_3_healthy(fake_domains, client):
    fake_domains.add(HOST)
    get(client, 200)


def test_4_one_connection_served_them_all():
    assert len(PORTS) == 3 and len(set(PORTS)) == 1, PORTS


def test_5_a_connect_fault_is_met(fake_domains, client):
    fake_domains.add(HOST)
    fake_domains.fail(HOST, faults.refused())
    with pytest.raises(httpx.ConnectError):
        client.get(URL)


def test_6_open_a_connection(fake_domains, client):
    fake_domains.add(HOST)
    get(client, 200)


def test_7_an_unregistered_host_is_not_served_by_an_old_connection(fake_domains, client):
    with pytest.raises(httpx.RemoteProtocolError):
        client.get(URL)
    assert fake_domains.requests() == []
"""


@pytest.mark.parametrize("workers", [[], ["-n", "2", "--dist", "loadfile"]], ids=["plain", "xdist"])
def test_a_session_client_keeps_its_connection_but_never_a_stale_fault(
    downstream: pytest.Pytester, workers: list[str]
) -> None:
    downstream.makepyfile(test_keep_alive_suite=SUITE)
    result = downstream.runpytest_subprocess("-p", "no:randomly", *workers)
    result.assert_outcomes(passed=7)
