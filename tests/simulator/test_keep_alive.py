"""Keep-alive connections: kept where they cannot hide a fault, dropped where they could.

Which connection served a request is read from the client's side: the local port
of the stream httpx used (``response.extensions["network_stream"]``).
"""

from __future__ import annotations

import datetime
import ssl
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from pytest_failover import faults
from pytest_failover.simulator import FakeDomains

HOST = "keepalive.example.com"
URL = f"https://{HOST}/v1/rooms"


@pytest.fixture
def site(fd: FakeDomains) -> FakeDomains:
    fd.add(HOST)
    return fd


@pytest.fixture
def client(site: FakeDomains) -> Iterator[httpx.Client]:
    with httpx.Client(timeout=5.0) as client:
        yield client


def get(client: httpx.Client) -> tuple[int, int]:
    """GET ``URL``: the status and the client's local port (which connection served it)."""
    response = client.get(URL)
    port: int = response.extensions["network_stream"].get_extra_info("client_addr")[1]
    return response.status_code, port


@pytest.mark.parametrize(
    ("fault", "struck"),
    [
        (faults.status(503), faults.status(503)),
        (faults.latency(0.001), faults.latency(0.001)),
        (faults.flapping(fail=1, fault=faults.status(500)), faults.status(500)),
        (faults.rate(1.0, faults.status(429), seed=1), faults.status(429)),
    ],
    ids=["status", "latency", "flapping", "rate"],
)
def test_a_fault_acting_per_request_keeps_the_pooled_connection(
    site: FakeDomains, client: httpx.Client, fault: faults.Fault, struck: faults.Fault
) -> None:
    """The server applies it to every request, so the pooled connection shows it."""
    status, port = get(client)
    assert status == 200
    site.fail(HOST, fault)
    assert get(client)[1] == port
    site.heal(HOST)
    assert get(client) == (200, port)
    assert [r.fault for r in site.requests(HOST)] == [faults.healthy(), struck, faults.healthy()]


@pytest.mark.parametrize(
    "fault",
    [faults.refused(), faults.dns_nxdomain(), faults.tls_expired()],
    ids=["refused", "dns_nxdomain", "tls_expired"],
)
def test_a_fault_acting_before_the_request_is_never_hidden_by_a_pooled_connection(
    site: FakeDomains, client: httpx.Client, fault: faults.Fault
) -> None:
    assert get(client)[0] == 200
    site.fail(HOST, fault)
    with pytest.raises(httpx.ConnectError):
        client.get(URL)


def test_a_composite_that_turns_into_a_connect_fault_closes_every_answer(
    site: FakeDomains, client: httpx.Client
) -> None:
    """``flapping(then=refused())``: the 503s close their connection, so ``refused`` is met."""
    assert get(client)[0] == 200
    site.fail(HOST, faults.flapping(fail=2, fault=faults.status(503), then=faults.refused()))
    first = client.get(URL)
    second = client.get(URL)
    assert [first.status_code, second.status_code] == [503, 503]
    assert first.headers["connection"] == "close"
    with pytest.raises(httpx.ConnectError):
        client.get(URL)
    site.heal(HOST)
    assert client.get(URL).headers.get("connection") != "close"


def test_a_rate_of_connect_faults_rolls_for_every_attempt(
    site: FakeDomains, client: httpx.Client
) -> None:
    """With ``rate(p, refused())`` no attempt may skip the roll on a pooled connection."""
    site.fail(HOST, faults.rate(0.5, faults.refused(), seed=7))
    outcomes = []
    for _ in range(12):  # bounded
        try:
            outcomes.append(client.get(URL).headers["connection"])
        except httpx.ConnectError:
            outcomes.append("refused")
    assert set(outcomes) == {"close", "refused"}


def test_reset_keeps_idle_connections_for_the_next_test(fd: FakeDomains) -> None:
    """The plugin resets between tests; a session client then reuses its connection."""
    fd.add(HOST)
    with httpx.Client(timeout=5.0) as client:
        status, port = get(client)
        assert status == 200
        fd.reset()
        fd.add(HOST)
        fd.fail(HOST, faults.status(503))
        assert get(client) == (503, port)
        assert [r.fault for r in fd.requests(HOST)] == [faults.status(503)]


def test_a_pooled_connection_to_an_unregistered_domain_is_not_answered(
    fd: FakeDomains,
) -> None:
    """After ``reset()`` a request on an old connection is cut, never served by the fake."""
    fd.add(HOST)
    with httpx.Client(timeout=5.0) as client:
        assert client.get(URL).status_code == 200
        fd.reset()
        with pytest.raises(httpx.RemoteProtocolError):
            client.get(URL)
        assert fd.requests() == []


def test_a_pooled_connection_to_an_unregistered_domain_counts_as_blocked() -> None:
    with FakeDomains(block_unknown_hosts=True) as fake:
        fake.add(HOST)
        with httpx.Client(timeout=5.0) as client:
            assert client.get(URL).status_code == 200
            fake.reset()
            with pytest.raises(httpx.RemoteProtocolError):
                client.get(URL)
            assert fake.blocked == [
                f"{HOST} (a keep-alive connection opened while it was a fake domain)"
            ]


def test_a_new_certificate_date_drops_the_pooled_connection(
    site: FakeDomains, client: httpx.Client
) -> None:
    port = get(client)[1]
    expires = datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=3)
    site.add(HOST, cert_not_after=expires)
    status, new_port = get(client)
    assert (status, new_port != port) == (200, True)
    peer = client.get(URL).extensions["network_stream"].get_extra_info("ssl_object")
    not_after = ssl.cert_time_to_seconds(peer.getpeercert()["notAfter"])
    assert abs(not_after - expires.timestamp()) < 60


def test_a_connect_fault_set_while_another_thread_requests_is_met_at_once(
    site: FakeDomains,
) -> None:
    """Another thread keeps requesting on its pooled connection while the fault flips between
    a status and a connect fault: once ``fail(refused)`` has returned, that connection serves
    nothing more (one request in flight as it ran may still be answered)."""
    stop = threading.Event()
    seen: list[str] = []

    def hammer() -> None:
        with httpx.Client(timeout=5.0) as client:
            for _ in range(5000):  # bounded
                if stop.is_set():
                    return
                try:
                    seen.append(str(client.get(URL).status_code))
                except httpx.HTTPError as exc:
                    seen.append(type(exc).__name__)

    def wait_for(count: int) -> None:
        for _ in range(500):  # bounded: 5 s
            if len(seen) >= count:
                return
            time.sleep(0.01)

    worker = threading.Thread(target=hammer)
    worker.start()
    late: list[list[str]] = []
    try:
        for _ in range(10):  # bounded
            site.fail(HOST, faults.status(503))
            for _ in range(500):  # bounded: until the other thread has a pooled 503
                if seen[-2:] == ["503", "503"]:
                    break
                time.sleep(0.01)
            site.fail(HOST, faults.refused())
            done = len(seen)
            wait_for(done + 3)
            late.append(seen[done + 1 : done + 3])
    finally:
        stop.set()
        worker.join(10)
    assert not worker.is_alive()
    assert late == [["ConnectError", "ConnectError"]] * 10, late
