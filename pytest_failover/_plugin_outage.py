"""The ``@pytest.mark.outage(host, fault, *args, **kwargs)`` marker, parsed into values.

Markers merge closest-first: a function's marker for a host wins over its
class's or module's marker for the same host. Every mistake (a URL instead of
a hostname, an unknown fault name, arguments the fault does not take) is a
setup error that names the test, the marker and the fix.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from .faults import Fault

__all__ = ["Outage", "OutageMarkerError", "parse_outage_markers"]

USAGE = (
    "usage: @pytest.mark.outage(host, fault, *args, **kwargs), e.g. "
    "@pytest.mark.outage('api.example.com', 'dns_nxdomain') or "
    "@pytest.mark.outage('api.example.com', 'status', 503, headers={'Retry-After': '1'})"
)


class OutageMarkerError(Exception):
    """A ``@pytest.mark.outage`` marker whose arguments do not fit."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Outage:
    """One fault to inject on one fake domain for the test body."""

    host: str
    fault: Fault
    description: str


def _describe(mark: pytest.Mark) -> str:
    parts = [repr(arg) for arg in mark.args]
    parts += [f"{key}={value!r}" for key, value in mark.kwargs.items()]
    return f"@pytest.mark.outage({', '.join(parts)})"


def build_fault(name_or_fault: object, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Fault:
    """A fault object from a name and its arguments, or the fault object itself."""
    from . import faults

    if isinstance(name_or_fault, faults.Fault):
        if args or kwargs:
            raise OutageMarkerError(
                "extra arguments are only allowed after a fault *name*; "
                f"got the fault object {name_or_fault!r} followed by arguments"
            )
        return name_or_fault
    if not isinstance(name_or_fault, str):
        raise OutageMarkerError(
            "the fault must be a fault name (str) such as 'refused' or a "
            f"pytest_failover.faults object such as faults.refused(), got {name_or_fault!r}"
        )
    try:
        return faults.by_name(name_or_fault, *args, **kwargs)
    except faults.UnknownFaultError as exc:
        raise OutageMarkerError(str(exc)) from exc
    except (TypeError, ValueError) as exc:
        raise OutageMarkerError(f"wrong arguments for fault {name_or_fault!r}: {exc}") from exc


def _host(host: object) -> str:
    if not isinstance(host, str) or not host.strip():
        raise OutageMarkerError(f"the first argument must be a hostname (str), got {host!r}")
    if "://" in host or "/" in host:
        raise OutageMarkerError(
            f"give the hostname, not a URL: {host!r} -> "
            f"{host.split('://', 1)[-1].split('/', 1)[0].split(':', 1)[0]!r}"
        )
    return host.strip().rstrip(".").lower()


def parse_outage(mark: pytest.Mark) -> Outage:
    """One marker as an :class:`Outage`; raises :class:`OutageMarkerError` with the fix."""
    # host and fault are positional only: keywords belong to the fault (flapping(fault=...)).
    kwargs = dict(mark.kwargs)
    args = list(mark.args)
    if len(args) < 2:
        raise OutageMarkerError(f"the host and the fault come first, as positional arguments; {USAGE}")
    host = _host(args[0])
    fault = build_fault(args[1], tuple(args[2:]), kwargs)
    return Outage(host=host, fault=fault, description=_describe(mark))


def parse_outage_markers(item: pytest.Item) -> list[Outage]:
    """Every outage marker of ``item``, closest first, one per host; fails the test on misuse."""
    outages: dict[str, Outage] = {}
    for mark in item.iter_markers("outage"):
        problem = None
        try:
            outage = parse_outage(mark)
        except OutageMarkerError as exc:
            problem = str(exc)
        if problem is not None:
            pytest.fail(f"invalid {_describe(mark)} on {item.nodeid}: {problem}", pytrace=False)
        outages.setdefault(outage.host, outage)
    return list(outages.values())
