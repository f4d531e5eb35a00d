"""The fault decisions, driven directly: which fault strikes at which stage, without sockets."""

from __future__ import annotations

import random
import socket

import pytest

from pytest_failover import faults
from pytest_failover.simulator._faults import (
    Answer,
    Certificate,
    FaultState,
    Route,
    on_connect,
    on_handshake,
    on_resolve,
    on_respond,
)
from pytest_failover.simulator._record import Stage

ATTEMPT: tuple[Stage, ...] = ("resolve", "connect", "handshake", "respond")


def attempt(state: FaultState) -> list[faults.Fault]:
    """The faults one attempt meets on its way through the stages, up to the first failure."""
    met: list[faults.Fault] = []
    for stage in ATTEMPT:
        fault = state.strike(stage)
        if fault is not None:
            met.append(fault)
            if fault != faults.healthy():
                break
    return met


def test_a_primitive_fault_strikes_only_at_its_stage() -> None:
    state = FaultState(faults.refused())
    assert [state.strike(stage) for stage in ATTEMPT] == [None, faults.refused(), None, None]


def test_flapping_fails_the_first_n_attempts_then_recovers() -> None:
    state = FaultState(faults.flapping(2, fault=faults.status(503)))
    assert [attempt(state) for _ in range(4)] == [
        [faults.status(503)],
        [faults.status(503)],
        [faults.healthy()],
        [faults.healthy()],
    ]


def test_flapping_counts_where_its_fault_strikes() -> None:
    """A DNS fault counts lookups; ``then`` takes over at every stage afterwards."""
    state = FaultState(faults.flapping(1, fault=faults.dns_nxdomain(), then=faults.status(500)))
    assert attempt(state) == [faults.dns_nxdomain()]
    assert attempt(state) == [faults.status(500)]


def test_rate_is_reproducible_with_a_seed() -> None:
    def outcomes(seed: int) -> list[bool]:
        state = FaultState(faults.rate(0.3, faults.reset(), seed=seed))
        return [state.strike("respond") == faults.reset() for _ in range(200)]

    first = outcomes(7)
    assert first == outcomes(7)
    assert first != outcomes(8)
    assert 40 <= sum(first) <= 80  # about 30 %


@pytest.mark.parametrize(("p", "hits"), [(0.0, 0), (1.0, 50)])
def test_rate_bounds(p: float, hits: int) -> None:
    state = FaultState(faults.rate(p, faults.refused()))
    assert sum(state.strike("connect") is not None for _ in range(50)) == hits


def test_a_new_fault_state_starts_counting_afresh() -> None:
    fault = faults.flapping(1)
    used = FaultState(fault)
    attempt(used)
    assert attempt(used) == [faults.healthy()]
    assert attempt(FaultState(fault)) == [faults.status(503)]


def test_foreign_objects_are_rejected() -> None:
    with pytest.raises(TypeError, match="not a fault"):
        FaultState("refused")  # type: ignore[arg-type]  # the point of the test


def test_each_fault_maps_to_one_behaviour() -> None:
    rng = random.Random(0)
    nx = on_resolve(faults.dns_nxdomain())
    slow_dns = on_resolve(faults.dns_timeout(0.2))
    assert nx is not None
    assert (nx.code, nx.after) == (socket.EAI_NONAME, 0)
    assert slow_dns is not None
    assert (slow_dns.code, slow_dns.after) == (socket.EAI_AGAIN, 0.2)
    assert on_resolve(None) is None
    assert on_connect(faults.refused()) is Route.CLOSED_PORT
    assert on_connect(faults.connect_timeout()) is Route.BLACKHOLE
    assert on_connect(None) is Route.LISTENER
    assert on_handshake(faults.tls_expired()) is Certificate.EXPIRED
    assert on_handshake(faults.tls_wrong_host()) is Certificate.WRONG_HOST
    assert on_handshake(faults.tls_untrusted()) is Certificate.UNTRUSTED
    assert on_handshake(None) is Certificate.GOOD
    assert on_respond(faults.read_timeout(), rng) == Answer(hold=True)
    assert on_respond(faults.slow(0.3), rng) == Answer(delay=0.3)
    assert on_respond(faults.reset(), rng) == Answer(reset=True)
    assert on_respond(faults.status(418), rng) == Answer(status=faults.status(418))
    assert on_respond(None, rng) == on_respond(faults.healthy(), rng) == Answer()
    delays = {on_respond(faults.latency(0.1, jitter=0.05), rng).delay for _ in range(100)}
    assert 0.05 <= min(delays) < max(delays) <= 0.15
    assert len(delays) > 50


def test_the_record_keeps_the_newest_entries_only() -> None:
    """A long-running demo cannot grow the record without bound."""
    from pytest_failover.simulator._record import Recorder

    recorder = Recorder(limit=3)
    for n in range(5):
        recorder.event(f"host{n}", "connect", faults.refused())
    assert [e.host for e in recorder.events()] == ["host2", "host3", "host4"]
