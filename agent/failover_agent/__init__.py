"""The monitoring agent behind ``failover-agent`` (see docs/agent.md).

It lives in the repository's ``agent/`` folder and imports as ``failover_agent`` (the
name of its command and of its meter), so installing it adds no top-level ``agent``.
It uses the failover library through ``pytest_failover``'s public names only.

Modules, from the wire up:

- ``wire``: one HTTP/1.1 exchange on a fresh connection (h11 over asyncio), the one map
  from low-level errors to httpx errors, and ``ProbeTransport`` made of it;
- ``checks``: ``domain`` (pinned probe), ``pool`` (through the failover client),
  ``readiness`` (certificate, CORS, health of a backup), ``result`` and ``body``;
- ``config``: ``agent.toml`` as strict pydantic models;
- ``state``: the latest result of every check; ``schedule``: checks and their groups;
- ``runtime``: what a configuration builds (state, probers, checks);
- ``runner``: ``Agent``, the scheduler and the life cycle;
- ``control_writer``: the signed control document;
- ``metrics``, ``telemetry``, ``prometheus_text``: the agent's instruments, providers and
  exporters, and the ``/metrics`` text; ``server``: the HTTP listener;
- ``console``: live view or log lines; ``logs``: where log records go;
- ``service``: one run until a signal (reloads on SIGHUP); ``demo``: fake domains with a
  scripted outage; ``cli``: the click commands.
"""
