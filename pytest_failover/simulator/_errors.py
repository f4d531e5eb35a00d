"""What the simulator raises when it is used wrongly or cannot do its job.

SimulatorError
 ├── UnknownDomainError     a fault or a query names a domain that was never added
 ├── BlockedHostError       block_unknown_hosts is on and the code tried to reach another host
 └── UnsupportedClientError the client resolves or connects behind the socket module's back
                            (uvloop, aiodns) and would silently reach the real internet
"""

from __future__ import annotations

__all__ = ["BlockedHostError", "SimulatorError", "UnknownDomainError", "UnsupportedClientError"]


class SimulatorError(Exception):
    """Base class of the simulator's own errors."""


class UnknownDomainError(SimulatorError, LookupError):
    """A fake domain was used before ``FakeDomains.add`` registered it."""


class BlockedHostError(SimulatorError):
    """A lookup or connect to a host that is neither fake nor loopback while blocking is on.

    Deliberately not an ``OSError``: clients would turn it into an ordinary
    connection error and a failover client would quietly move on.
    """


class UnsupportedClientError(SimulatorError):
    """A client that bypasses ``socket.getaddrinfo`` tried to reach a fake domain."""
