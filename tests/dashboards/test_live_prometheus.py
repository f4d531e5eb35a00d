"""Every dashboard query, evaluated by a real Prometheus that scraped a real agent.

The agent runs its demo (fake domains, scripted outage) with its outage brought
forward (``--outage-at``): the primary's DNS fails and the backup's certificate is
replaced by one expiring in 5 days, both 1 s in (the demo: 8 s and 20 s in), so the
data are complete from Prometheus' first scrapes. Prometheus scrapes it every second. Each panel query, with Grafana's
variables filled in, must parse and return at least one series; every metric a
query names must exist under that name in what Prometheus scraped from the
agent, so a metric renamed in the code breaks this test, not the dashboard.
The alert rules and the demo's SLO rules (``failover-agent rules``) are loaded too: they must
evaluate without error on the real data, the series the SLO panels read must be recorded by
them, and the demo's outage and expiring certificate must make their alerts active.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx
import yaml
from failover_agent.slo import ALERT_NAME

from pytest_failover import semconv

from . import _grafana, _stack
from .conftest import DASHBOARDS

# The agent stops by itself after this long, should the test be killed.
AGENT_DURATION = 120.0
# When the demo's outage starts (its DNS failure and expiring certificate; the demo: 8 s, 20 s):
# after its first probes (0.35 s in); its breaker opens some 6.5 s later (the last series to come).
OUTAGE_AT = 1.0
# Time for the demo's outage (switch, breaker transitions) to reach every panel.
DATA_DEADLINE = 50.0

# Metrics the demo never produces (no retry budget is ever exhausted, nothing is
# hedged or slow; the agent drops its pool probes' attempt histogram): they must come
# from the client workload instead, through the same exporter (hedged, slow traffic:
# _stack.hedge_and_slow_down).
WORKLOAD_ONLY = {
    semconv.METRICS[name].prometheus
    for name in (semconv.FAILOVER_RETRY_BUDGET_REJECTIONS, semconv.FAILOVER_HEDGES, semconv.FAILOVER_SLOW_CALLS)
} | {f"{semconv.METRICS[semconv.HTTP_CLIENT_REQUEST_DURATION].prometheus}_bucket"}

# Alerts the demo's script must make active (pending or firing) at some point:
# the primary's DNS fails (one location, so one failing location is enough),
# and the backup gets a certificate expiring in 5 days.
EXPECTED_ALERTS = {
    ("FailoverDomainDown", "api.example.com"),
    ("FailoverCertificateExpiringSoon", "api2.example.com"),
    # the primary's probe SLO (slo-demo.yml): its outage burns far more than 14.4x a 0.5 % budget
    (ALERT_NAME, "api.example.com"),
}

# The rules Prometheus loads: the alerts, and the demo's SLO rules (failover-agent rules).
RULE_FILES = [DASHBOARDS / "alerts.yml", DASHBOARDS / "slo-demo.yml"]

AGENT_JOB = "failover-agent"
WORKLOAD_JOB = "client-workload"


class Prom:
    """A tiny client of Prometheus' HTTP API."""

    def __init__(self, base: str) -> None:
        self.http = httpx.Client(base_url=base, timeout=10.0)

    def query(self, expr: str) -> tuple[list[Any], str | None]:
        body = self.http.get("/api/v1/query", params={"query": expr}).json()
        if body["status"] != "success":
            return [], f"{body.get('errorType')}: {body.get('error')}"
        return body["data"]["result"], None

    def label_values(self, selector: str, label: str) -> list[str]:
        body = self.http.get("/api/v1/series", params={"match[]": selector}).json()
        assert body["status"] == "success", f"{selector}: {body}"
        return sorted({series[label] for series in body["data"] if label in series})

    def active_alerts(self) -> set[tuple[str, str]]:
        """(alertname, server_address) of every pending or firing alert."""
        body = self.http.get("/api/v1/alerts").json()
        return {
            (alert["labels"]["alertname"], alert["labels"].get("server_address", ""))
            for alert in body["data"]["alerts"]
        }

    def names(self, job: str) -> set[str]:
        result, error = self.query(f'count by (__name__) ({{job="{job}"}})')
        assert error is None, error
        return {series["metric"]["__name__"] for series in result}


def _all_values(dashboard: str) -> dict[str, str]:
    """Every variable as "All" (Grafana sends the allValue, ``.*``)."""
    values = _grafana.custom_defaults(dashboard)
    values.update({var.name: var.all_value for var in _grafana.variables(dashboard)})
    return values


def _variable_values(prom: Prom, dashboard: str, values: Mapping[str, str]) -> dict[str, list[str]]:
    return {
        var.name: prom.label_values(_grafana.substitute(var.selector, values), var.label)
        for var in _grafana.variables(dashboard)
    }


def _problems(prom: Prom) -> list[str]:
    """Why the data is not yet complete (empty list: every check passes)."""
    problems: list[str] = []
    for dashboard in _grafana.DASHBOARD_FILES:
        values = _all_values(dashboard)
        for name, found in _variable_values(prom, dashboard, values).items():
            if not found:
                problems.append(f"{dashboard}: variable ${name} has no values")
        for query in _grafana.queries(dashboard):
            for part in [query.expr, *_grafana.without_zero_fallbacks(query.expr)]:
                expr = _grafana.substitute(part, values)
                result, error = prom.query(expr)
                if error is not None:
                    problems.append(f"{query.name}: {error}\n    {expr}")
                elif not result:
                    problems.append(f"{query.name}: no series\n    {expr}")
    referenced = {
        name
        for dashboard in _grafana.DASHBOARD_FILES
        for name in set().union(*(_grafana.metric_names(q.expr) for q in _grafana.queries(dashboard)))
        | {n for var in _grafana.variables(dashboard) for n in _grafana.metric_names(var.selector)}
    }
    from_agent = prom.names(AGENT_JOB)
    recorded = {rule["record"] for rule in _rules() if "record" in rule}
    for name in sorted({n for n in referenced if ":" in n} - recorded):
        problems.append(f"series {name} is used by a dashboard but no loaded rule records it")
    for name in sorted(referenced - recorded - WORKLOAD_ONLY - from_agent):
        problems.append(f"metric {name} is used by a dashboard but the agent does not export it")
    for name in sorted(WORKLOAD_ONLY - prom.names(WORKLOAD_JOB)):
        problems.append(f"metric {name} is used by a dashboard but the failover client does not export it")
    return problems


def _rules() -> list[dict[str, Any]]:
    """Every rule of RULE_FILES."""
    files = [yaml.safe_load(path.read_text(encoding="utf-8")) for path in RULE_FILES]
    return [rule for data in files for group in data["groups"] for rule in group["rules"]]


def _concrete_problems(prom: Prom) -> list[str]:
    """Each query returns a series for at least one concrete choice of pool, domain and location.

    This catches a filter on a label that the metric does not carry, which "All"
    (``.*``, matching an absent label too) would hide.
    """
    problems = []
    for dashboard in _grafana.DASHBOARD_FILES:
        base = _grafana.custom_defaults(dashboard)
        combos: list[dict[str, str]] = []
        for pool in _variable_values(prom, dashboard, _all_values(dashboard))["pool"]:
            scoped = {**_all_values(dashboard), "pool": _grafana.regex_escape(pool)}
            found = _variable_values(prom, dashboard, scoped)
            for domain, location in itertools.product(found["domain"] or [""], found["location"] or [""]):
                combos.append({
                    **base,
                    "pool": _grafana.regex_escape(pool),
                    "domain": _grafana.regex_escape(domain),
                    "location": _grafana.regex_escape(location),
                })
        for query in _grafana.queries(dashboard):
            for part in [query.expr, *_grafana.without_zero_fallbacks(query.expr)]:
                if not any(prom.query(_grafana.substitute(part, combo))[0] for combo in combos):
                    problems.append(f"{query.name}: no series for any single pool/domain/location\n    {part}")
    return problems


def test_every_panel_query_returns_series_from_a_real_agent(prometheus_bin: str, tmp_path: Path) -> None:
    """Panel and variable queries of both dashboards parse and return series; alert rules evaluate cleanly."""
    with (
        _stack.agent_demo(tmp_path, AGENT_DURATION, OUTAGE_AT) as agent,
        _stack.client_workload() as workload,
        _stack.prometheus(
            prometheus_bin,
            tmp_path,
            {AGENT_JOB: agent, WORKLOAD_JOB: workload},
            rule_files=RULE_FILES,
        ) as base,
    ):
        prom = Prom(base)
        deadline = time.monotonic() + DATA_DEADLINE
        seen_alerts = prom.active_alerts()
        problems = _problems(prom)
        while (problems or EXPECTED_ALERTS - seen_alerts) and time.monotonic() < deadline:
            time.sleep(0.5)
            seen_alerts |= prom.active_alerts()
            problems = _problems(prom)
        assert not problems, f"after {DATA_DEADLINE:.0f} s of scraping:\n" + "\n".join(problems)
        assert seen_alerts >= EXPECTED_ALERTS, f"alerts seen on the demo's data: {sorted(seen_alerts)}"

        concrete = _concrete_problems(prom)
        assert not concrete, "\n".join(concrete)

        groups = prom.http.get("/api/v1/rules").json()["data"]["groups"]
        rules = [rule for group in groups for rule in group["rules"]]
        assert {rule["name"] for rule in rules} == {r.get("alert") or r["record"] for r in _rules()}
        for rule in rules:
            assert rule["health"] == "ok", f"{rule['name']}: {rule.get('lastError')}"
            assert not rule.get("lastError"), rule["name"]
