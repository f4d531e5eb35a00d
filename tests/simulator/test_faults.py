"""Fault values: built by function or by name, validated when built, frozen."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable

import pytest

from pytest_failover import faults
from pytest_failover.simulator._faults import STAGE_OF, stage_of

PRIMITIVES = [
    cls
    for cls in vars(faults).values()
    if inspect.isclass(cls)
    and issubclass(cls, faults.Fault)
    and cls is not faults.Fault
    and cls not in (faults.Flapping, faults.Rate)
]


def test_every_primitive_fault_has_a_stage() -> None:
    """The simulator knows where each primitive fault strikes, and knows nothing else."""
    assert set(STAGE_OF) == set(PRIMITIVES)


@pytest.mark.parametrize(
    ("name", "args", "expected"),
    [
        ("healthy", (), faults.Healthy()),
        ("dns_nxdomain", (), faults.DnsNxdomain()),
        ("dns_timeout", (0.5,), faults.DnsTimeout(0.5)),
        ("refused", (), faults.Refused()),
        ("connect_timeout", (), faults.ConnectTimeout()),
        ("read_timeout", (), faults.ReadTimeout()),
        ("slow", (2,), faults.Slow(2)),
        ("reset", (), faults.Reset()),
        ("keep_alive_close", (), faults.KeepAliveClose()),
        ("tls_expired", (), faults.TlsExpired()),
        ("tls_wrong_host", (), faults.TlsWrongHost()),
        ("tls_untrusted", (), faults.TlsUntrusted()),
        ("status", (503,), faults.Status(503)),
        ("latency", (0.1,), faults.Latency(0.1, 0.0)),
        ("trickle", (0.1,), faults.Trickle(0.1, None)),
        ("flapping", (2,), faults.Flapping(2, faults.Healthy(), faults.Status(503))),
        ("rate", (0.5, faults.refused()), faults.Rate(0.5, faults.Refused(), None)),
    ],
)
def test_by_name_builds_the_same_fault_as_the_function(
    name: str, args: tuple[object, ...], expected: faults.Fault
) -> None:
    """``by_name`` and the constructor functions agree, and the fault's name round-trips."""
    assert faults.by_name(name, *args) == getattr(faults, name)(*args) == expected
    assert expected.name == str(expected) == name


def test_names_lists_every_constructor() -> None:
    assert set(faults.names()) == {
        "healthy", "dns_nxdomain", "dns_timeout", "refused", "connect_timeout", "read_timeout",
        "slow", "reset", "tls_expired", "tls_wrong_host", "tls_untrusted", "status", "flapping",
        "rate", "latency", "trickle", "dns_poisoned", "address_down", "keep_alive_close",
    }  # fmt: skip


def test_unknown_name_suggests_the_closest() -> None:
    with pytest.raises(
        faults.UnknownFaultError, match=r"'dns_nxdomian'.*Did you mean 'dns_nxdomain'"
    ):
        faults.by_name("dns_nxdomian")


def test_wrong_arguments_name_the_signature() -> None:
    with pytest.raises(TypeError, match=r"faults\.status\(code, body=.*missing"):
        faults.by_name("status")


def test_status_takes_text_and_a_header_mapping() -> None:
    fault = faults.status(429, "slow down", headers={"Retry-After": "2"})
    assert (fault.code, fault.body, fault.headers) == (429, b"slow down", (("Retry-After", "2"),))


@pytest.mark.parametrize(
    "build",
    [
        lambda: faults.status(42),
        lambda: faults.slow(-1),
        lambda: faults.dns_timeout(float("nan")),
        lambda: faults.latency(0.1, jitter=-0.1),
        lambda: faults.rate(1.5, faults.refused()),
        lambda: faults.flapping(-1),
    ],
)
def test_bad_values_are_rejected_when_built(build: Callable[[], object]) -> None:
    with pytest.raises(ValueError, match="must be"):
        build()


def test_composites_take_only_faults() -> None:
    with pytest.raises(TypeError, match=r"rate\(fault\) must be a fault"):
        faults.rate(0.5, "refused")  # type: ignore[arg-type]  # the point of the test
    with pytest.raises(TypeError, match=r"flapping\(then=\) must be a fault"):
        faults.flapping(1, then=200)  # type: ignore[arg-type]  # the point of the test


def test_faults_are_frozen_values() -> None:
    fault = faults.slow(1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        fault.seconds = 2  # type: ignore[misc]  # the point of the test
    assert fault == faults.slow(1)
    assert hash(fault) == hash(faults.slow(1))


def test_composites_strike_where_their_failing_fault_does() -> None:
    assert stage_of(faults.flapping(2, fault=faults.dns_nxdomain())) == "resolve"
    assert stage_of(faults.rate(0.1, faults.tls_expired())) == "handshake"
    assert stage_of(faults.flapping(2)) == "respond"
