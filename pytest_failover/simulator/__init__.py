"""The outage simulator: real loopback servers behind real domain names, with faults on demand.

    from pytest_failover import faults
    from pytest_failover.simulator import FakeDomains

    with FakeDomains() as fd:
        fd.add("api.example.com")
        fd.fail("api.example.com", faults.dns_nxdomain())
        ...  # any client: httpx, requests, urllib3, urllib, aiohttp

See docs/simulator.md for how it works, every fault and what each client raises, and
docs/resolve.md for the fake resolvers (``DoHServer``, ``HTTPDNSServer``); ``TusServer``
and ``LLMServer`` are handlers that speak tus and the OpenAI / Anthropic APIs.
Needs the ``simulator`` extra (``trustme``).
"""

from ._dns import DNSQuery, DoHServer, HTTPDNSServer, NameFault
from ._domains import FakeDomain, FakeDomains
from ._errors import BlockedHostError, SimulatorError, UnknownDomainError, UnsupportedClientError
from ._handlers import Handler, Response, ResponseSpec
from ._llm import LLMServer
from ._record import FaultEvent, RecordedRequest, Stage
from ._tus import StoredUpload, TusServer, TusStorage

__all__ = [
    "BlockedHostError",
    "DNSQuery",
    "DoHServer",
    "FakeDomain",
    "FakeDomains",
    "FaultEvent",
    "HTTPDNSServer",
    "Handler",
    "LLMServer",
    "NameFault",
    "RecordedRequest",
    "Response",
    "ResponseSpec",
    "SimulatorError",
    "Stage",
    "StoredUpload",
    "TusServer",
    "TusStorage",
    "UnknownDomainError",
    "UnsupportedClientError",
]
