"""The monitoring agent behind ``failover-agent`` (see docs/agent.md).

Modules: ``config`` (agent.toml, strict pydantic models), ``probes`` (pinned probes and
readiness checks), ``pool_probe`` (requests through the failover client), ``control_writer``
(the signed control document), ``state`` (latest results), ``metrics`` (the agent's
instruments), ``telemetry`` (explicit OpenTelemetry providers and exporters), ``schedule``
(checks and the groups of them that fire together), ``runtime`` (what a configuration
builds: state, probers, checks), ``runner`` (the scheduler and life cycle), ``server`` (the
HTTP listener), ``console`` (live view or log lines), ``demo`` (fake domains with a scripted
outage), ``cli`` (click commands).
"""
