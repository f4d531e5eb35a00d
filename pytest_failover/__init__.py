"""pytest-failover: multi-domain failover for httpx, observable with OpenTelemetry.

The library (this package) depends on ``httpx`` and ``opentelemetry-api`` only.
The outage simulator lives in :mod:`pytest_failover.simulator` and
:mod:`pytest_failover.faults`; the pytest plugin in :mod:`pytest_failover.plugin`.
"""

from ._control import ControlDocument, ControlError, ControlPoller
from ._core import AttemptRecord
from ._exceptions import AllDomainsFailed, CircuitOpenError, FailoverError
from ._policy import ExponentialBackoff, Policy, RetryBudget, ScheduleTable, Step
from ._pool import Domain, Pool
from ._state import DomainState, PoolState, TransportState
from ._transport import AsyncFailoverTransport, FailoverResult, FailoverTransport

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
    "Policy",
    "Pool",
    "PoolState",
    "RetryBudget",
    "ScheduleTable",
    "Step",
    "TransportState",
]

__version__ = "0.1.0"
