"""The quorum publisher: the control document decided by several locations' probes.

Agents in several locations (``failover-agent run``, each with its own ``location``)
probe the same domains; Prometheus (or Thanos, or Mimir) scrapes them all. One
publisher, ``failover-agent control quorum FILE`` with a ``[control.quorum]`` section,
asks Prometheus's HTTP API every ``control.interval`` which locations have seen each
domain fail for ``for_seconds``, and signs the document: a domain is disabled only when
at least ``min_locations`` distinct locations agree, re-enabled as soon as fewer do. The
override file and the rule that keeps one domain of every pool enabled apply as on an
agent (:mod:`failover_agent.control_writer`); the document records who agreed.

- ``promql``: the query, explained (also shown by ``--help`` and in the README);
- ``prometheus``: the HTTP API client and the validated answer;
- ``publisher``: the decision, the loop, its metric and its listener.
"""
