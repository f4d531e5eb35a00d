"""pytest-failover: multi-domain failover for httpx, httpx2, requests and aiohttp, observable
with OpenTelemetry.

The library (this package) depends on ``opentelemetry-api`` only; each HTTP library is an
extra. The httpx transports (``FailoverTransport``, ``AsyncFailoverTransport`` and their
errors) need httpx, and importing them without it raises an ImportError that says what to
install; everything else here (``Pool``, ``Policy``, ``pytest_failover.httpx2``, resolvers,
the control poller) works in a process that has only httpx2.
The outage simulator lives in :mod:`pytest_failover.simulator` and
:mod:`pytest_failover.faults`; the pytest plugin in :mod:`pytest_failover.plugin`.

Names are loaded on first use (PEP 562), so the pytest plugin, which every test
run of an installing project loads, costs nothing until a fixture needs it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._classify import error_type_of
    from ._exchange import FailoverResult
    from ._httpx import (
        AllDomainsFailed,
        AsyncFailoverTransport,
        CircuitOpenError,
        FailoverError,
        FailoverTransport,
    )
    from ._policy import (
        ExponentialBackoff,
        Hedging,
        Policy,
        RetryBudget,
        ScheduleTable,
        SlowCalls,
        Step,
    )
    from ._pool import Domain, Pool
    from ._snapshot import DomainState, PoolState, TransportState
    from ._steering import TimeOrder
    from ._testing import is_testing, set_testing
    from ._values import AttemptRecord
    from .control import ControlDocument, ControlError, ControlPoller

__all__ = [
    "AllDomainsFailed",
    "AsyncFailoverTransport",
    "AttemptRecord",
    "CircuitOpenError",
    "ControlDocument",
    "ControlError",
    "ControlPoller",
    "Domain",
    "DomainState",
    "ExponentialBackoff",
    "FailoverError",
    "FailoverResult",
    "FailoverTransport",
    "Hedging",
    "Policy",
    "Pool",
    "PoolState",
    "RetryBudget",
    "ScheduleTable",
    "SlowCalls",
    "Step",
    "TimeOrder",
    "TransportState",
    "error_type_of",
    "is_testing",
    "set_testing",
]

__version__ = "0.1.0"

_WHERE = {
    "ControlDocument": ".control",
    "ControlError": ".control",
    "ControlPoller": ".control",
    "error_type_of": "._classify",
    "AttemptRecord": "._values",
    "AllDomainsFailed": "._httpx",
    "CircuitOpenError": "._httpx",
    "FailoverError": "._httpx",
    "ExponentialBackoff": "._policy",
    "Hedging": "._policy",
    "Policy": "._policy",
    "SlowCalls": "._policy",
    "RetryBudget": "._policy",
    "ScheduleTable": "._policy",
    "Step": "._policy",
    "Domain": "._pool",
    "Pool": "._pool",
    "DomainState": "._snapshot",
    "PoolState": "._snapshot",
    "TransportState": "._snapshot",
    "TimeOrder": "._steering",
    "AsyncFailoverTransport": "._httpx",
    "FailoverResult": "._exchange",
    "FailoverTransport": "._httpx",
    "is_testing": "._testing",
    "set_testing": "._testing",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        if name in ("faults", "simulator", "plugin", "semconv", "telemetry_capture"):
            return importlib.import_module(f".{name}", __name__)
        raise AttributeError(f"module 'pytest_failover' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
