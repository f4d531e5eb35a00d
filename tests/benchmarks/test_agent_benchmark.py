"""``python -m benchmarks agent``'s OTLP-on run: the agent it starts exports to the benchmark's
loopback receiver (so the OTLP figures measure a real export). No timing is asserted."""

from __future__ import annotations

from benchmarks import _harness as h
from benchmarks.agent_probe import agent_config, run_agent


def test_the_otlp_run_exports_to_its_receiver() -> None:
    """Four domains for a few seconds with OTLP on: the receiver gets exports (spans come
    every 2 s), and the agent's /metrics still answers; without OTLP nothing is counted."""
    with h.server(ports=4) as srv:
        targets = [f"127.0.0.1:{p}" for p in srv.ports]
        # 4 s from ready: two exports (a post 2 s in, one 4 s in), one to spare
        on = run_agent(targets, srv, interval=1.0, seconds=3.0, settle=1.0, otlp=True)
        # no receiver, so no count, whatever the time: the shortest run (one loop round)
        off = run_agent(targets, srv, interval=1.0, seconds=1.0, settle=0.0)
    assert on is not None and off is not None, "failover-agent is not installed in this environment"
    assert on["steady"]["otlp_posts"] >= 1 and on["steady"]["metrics_series"] > 0
    assert off["steady"]["otlp_posts"] is None


def test_the_config_names_the_endpoint_only_when_asked() -> None:
    targets = ["127.0.0.1:1", "127.0.0.1:2"]
    assert "[exporters.otlp]" not in agent_config(targets, interval=15, listen="127.0.0.1:0", readiness=False)
    assert 'endpoint = "http://127.0.0.1:9"' in agent_config(targets, interval=15, listen="127.0.0.1:0",
                                                           readiness=False, otlp="http://127.0.0.1:9")
