"""The checks the agent schedules, one module each; a check returns a frozen result value
and never raises (an unexpected exception becomes a failed result with an ``error.type``).

- :mod:`.domain`: the pinned probe of one domain (no failover, one fresh connection, timed
  phases), over :mod:`failover_agent.wire`;
- :mod:`.pool`: one request through the real failover client, as a user would send it;
- :mod:`.readiness`: could a backup take the primary's traffic (certificate, CORS, health);
- :mod:`.result`: :class:`~.result.ProbeResult`, what the domain and pool probes return;
- :mod:`.body`: the JSON check on an answer's body;
- :mod:`.certs`: certificate expiry, read from the pinned probe's own TLS handshake.
"""
