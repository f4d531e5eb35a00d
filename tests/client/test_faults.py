"""Every fault of the outage simulator, through every front-end: the same classification, the same move."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from pytest_failover import ExponentialBackoff, Policy, Pool, faults
from pytest_failover.simulator import FakeDomains

PRIMARY = "primary.faults.test"
BACKUP = "backup.faults.test"
ATTEMPT = 0.3  # seconds: each timeout fault costs one attempt time
LONG = 5.0  # every other fault's attempt time: a loaded machine cannot fake a timeout
HOLD = 4.0  # how long a slow or trickled answer holds an attempt that is not cut
POLICY = Policy(
    schedule=ExponentialBackoff(base=0.001, cap=0.01, max_attempts=3),
    attempt_timeout=LONG,
    deadline=2 * LONG,
    sticky=False,
)
# the faults that end in a timeout: they get ATTEMPT, and their attempt must end at it
TIMEOUTS = {"connect_timeout", "read_timeout", "slow", "trickle"}

# fault on the primary -> (error.type of its attempt, whether a request byte may have left);
# None: the primary answers, nothing moves.
RESET = {"remote_protocol_error", "read_error", "connection_reset"}  # how each stack reports an RST mid-body
CASES: dict[str, tuple[Any, set[str] | None, bool]] = {
    "healthy": (faults.healthy(), None, True),
    "latency": (faults.latency(0.01), None, True),
    "dns_nxdomain": (faults.dns_nxdomain(), {"dns_error"}, False),
    "dns_timeout": (faults.dns_timeout(0.05), {"dns_error"}, False),
    "refused": (faults.refused(), {"connection_refused"}, False),
    "connect_timeout": (faults.connect_timeout(), {"connect_timeout"}, False),
    "read_timeout": (faults.read_timeout(), {"read_timeout"}, True),
    "slow": (faults.slow(HOLD), {"read_timeout"}, True),
    "trickle": (faults.trickle(0.2, b"x" * int(HOLD / 0.2)), {"read_timeout"}, True),
    "reset": (faults.reset(), RESET, True),
    # a new client's first request opens a connection, which is answered
    "keep_alive_close": (faults.keep_alive_close(reset=True), None, True),
    "tls_expired": (faults.tls_expired(), {"server_certificate_invalid"}, False),
    "tls_wrong_host": (faults.tls_wrong_host(), {"server_certificate_invalid"}, False),
    "tls_untrusted": (faults.tls_untrusted(), {"server_certificate_invalid"}, False),
    "status": (faults.status(503, headers={"Retry-After": "0"}), {"503"}, True),
    "flapping": (faults.flapping(1, fault=faults.refused()), {"connection_refused"}, False),
    "rate": (faults.rate(1.0, faults.refused(), seed=7), {"connection_refused"}, False),
    # the system's lookup answers an address where every connect is refused
    "dns_poisoned": (faults.dns_poisoned(), {"connection_refused"}, False),
    # the primary's one address refuses (the address is the fake domain's: see the test)
    "address_down": (faults.address_down("127.0.0.1"), {"connection_refused"}, False),
}


def test_every_fault_of_the_simulator_is_covered() -> None:
    """No fault kind is left out of the table below."""
    assert set(faults.names()) == set(CASES)


@pytest.fixture(scope="module")
def domains() -> Iterator[FakeDomains]:
    with FakeDomains(block_unknown_hosts=True) as fd:
        fd.add(PRIMARY)
        fd.add(BACKUP)
        yield fd


@pytest.mark.parametrize("name", list(CASES))
def test_a_fault_on_the_primary_moves_the_request_to_the_backup(
    make_client: Any, domains: FakeDomains, name: str
) -> None:
    """Each fault is classified alike by every client (error type, whether bytes left)
    and the GET is answered by the healthy backup; a healthy primary keeps it."""
    fault, error_types, sent = CASES[name]
    if isinstance(fault, faults.AddressDown):
        fault = faults.address_down(domains.domain(PRIMARY).addresses[0])
    domains.heal()
    domains.fail(PRIMARY, fault)
    policy = replace(POLICY, attempt_timeout=ATTEMPT) if name in TIMEOUTS else POLICY
    client = make_client([Pool("api", [f"https://{PRIMARY}", f"https://{BACKUP}"])], policy)
    response = client.request("GET", f"https://{PRIMARY}/v1/rooms")
    assert response.status_code == 200
    result = response.failover
    assert result is not None
    first = result.attempts[0]
    if error_types is None:
        assert (result.domain, len(result.attempts)) == (f"https://{PRIMARY}", 1)
        return
    assert result.domain == f"https://{BACKUP}"
    assert first.error_type in error_types, first
    assert first.sent is sent
    if name in TIMEOUTS:
        # cut at the attempt's time: an attempt that is not cut waits for the whole slow
        # answer (HOLD), or for the client library's own timeout (5 s and more); half of
        # that leaves a loaded machine's lag room without hiding either
        assert first.duration < HOLD / 2, first
