"""The operator's views: the live table and the status page show state, latency, breaker, readiness."""

from __future__ import annotations

import io

from failover_agent.checks.readiness import ReadinessResult
from failover_agent.checks.result import ProbeResult
from failover_agent.console import LiveReporter, LogReporter, make_reporter
from failover_agent.state import AgentState, ControlStatus, DomainStatus, PoolStatus

A, B = "https://api.example.com", "https://api2.example.com"


def _state() -> AgentState:
    state = AgentState(location="lab")
    state.pools["api"] = PoolStatus("api", A, "api.example.com", (A, B),
                                    last=ProbeResult(True, 200, None, 0.042, served_by=B, attempts=2),
                                    breakers={A: "open", B: "closed"})
    down = DomainStatus("api", A, "api.example.com", is_primary=True, breaker="open")
    down.record(ProbeResult(False, None, "dns_error", 0.001))
    up = DomainStatus("api", B, "api2.example.com")
    up.record(ProbeResult(True, 200, None, 0.012))
    up.readiness = ReadinessResult({"cert": (False, "expires in 3.0 days"), "health": (True, "same")}, None)
    state.domains[("api", A)] = down
    state.domains[("api", B)] = up
    state.control = ControlStatus(version=7, issued_at=1.0, disabled={"api": frozenset({A})})
    return state


def test_live_table_has_one_line_per_pool_and_domain() -> None:
    """State, last result, latency, breaker and readiness appear; a disabled domain is marked."""
    out = io.StringIO()
    reporter = LiveReporter(stream=out)
    from rich.console import Console

    console = Console(file=io.StringIO(), width=160, record=True)
    console.print(reporter._table(_state()))
    text = console.export_text()
    lines = [line for line in text.splitlines() if "example.com" in line]
    primary = next(line for line in lines if "api.example.com" in line and "via" not in line)
    assert "down" in primary and "dns_error" in primary and "open" in primary and "disabled" in primary
    backup = next(line for line in lines if line.count("api2.example.com") == 1 and "up" in line)
    assert "12 ms" in backup and "closed" in backup and "not ready: cert" in backup
    assert any("available" in line and "via api2.example.com" in line for line in text.splitlines())


def test_plain_reporter_when_not_a_terminal() -> None:
    """Without a TTY (pytest captures stdout), the reporter writes plain log lines."""
    assert isinstance(make_reporter(), LogReporter)
    assert isinstance(make_reporter(force_plain=True), LogReporter)
