"""The alert rules: valid, unit-tested firing and silent, and the unit tests bite."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from .conftest import DASHBOARDS

RULES = DASHBOARDS / "alerts.yml"
RULE_TESTS = DASHBOARDS / "alerts_test.yml"

# The alerts issue 5 asks for (at least).
REQUIRED_ALERTS = {
    "FailoverPoolUnavailable",  # a pool unavailable to users
    "FailoverDomainDown",  # a domain down from at least two locations
    "FailoverPoolErrorBudgetBurnFast",  # multi-window burn rate on the pool SLO
    "FailoverPoolErrorBudgetBurnSlow",
    "FailoverCertificateExpiringSoon",  # certificate expiring within the configured days
    "FailoverBackupNotReady",  # CORS or health mismatch
    "FailoverBreakerFlapping",  # many transitions in a short window
    "FailoverRetriesFrequent",  # attempts per request above a threshold
    # and issue 14's
    "FailoverAgentDown",  # up == 0
    "FailoverAgentAbsent",  # absent(up{job=...})
    "FailoverPoolAllDomainsDown",  # every domain of a pool fails its pinned probe
}
#: Alerts about the agent itself: they name the agent's instance, not a pool.
AGENT_ALERTS = {"FailoverAgentDown", "FailoverAgentAbsent"}


def alert_rules() -> list[dict[str, Any]]:
    """Every alerting rule of alerts.yml."""
    data = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    return [rule for group in data["groups"] for rule in group["rules"] if "alert" in rule]


def run_promtool(promtool: str, *args: str, cwd: Path = DASHBOARDS) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool, *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_promtool_check_rules(promtool: str) -> None:
    """`promtool check rules` accepts alerts.yml and finds every rule."""
    result = run_promtool(promtool, "check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(alert_rules())} rules found" in result.stdout


def test_promtool_rule_unit_tests_pass(promtool: str) -> None:
    """`promtool test rules` runs alerts_test.yml green."""
    result = run_promtool(promtool, "test", "rules", str(RULE_TESTS))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_issue_5_alerts_exist() -> None:
    assert {rule["alert"] for rule in alert_rules()} >= REQUIRED_ALERTS


@pytest.mark.parametrize("rule", alert_rules(), ids=lambda r: r["alert"])
def test_alert_names_pool_and_domain(rule: dict[str, Any]) -> None:
    """Summary and description exist; the description names the pool and the domain(s)."""
    annotations = rule["annotations"]
    assert annotations["summary"]
    assert rule["labels"]["severity"] in {"page", "ticket"}
    if rule["alert"] in AGENT_ALERTS:
        # an agent alert says which agent: its scrape job (and instance, when there is one)
        assert 'up{job="failover-agent"}' in rule["expr"]
        assert "$labels.job" in annotations["description"] or "job failover-agent" in annotations["description"]
        return
    assert "$labels.failover_pool" in annotations["summary"]
    description = annotations["description"]
    assert "$labels.failover_pool" in description
    # A domain alert names its domain label; a pool alert lists the failing domains with a query.
    assert "$labels.server_address" in description or ".Labels.server_address" in description
    assert rule["labels"]["severity"] in {"page", "ticket"}


def test_every_alert_has_a_firing_and_a_silent_case() -> None:
    """alerts_test.yml has, for every alert, an evaluation where it fires and one where it must not."""
    tests = yaml.safe_load(RULE_TESTS.read_text(encoding="utf-8"))["tests"]
    firing: set[str] = set()
    silent: set[str] = set()
    for case in tests:
        for check in case.get("alert_rule_test", []):
            (firing if check.get("exp_alerts") else silent).add(check["alertname"])
    names = {rule["alert"] for rule in alert_rules()}
    assert names - firing == set(), "alerts never tested firing"
    assert names - silent == set(), "alerts never tested silent"


# One change per alert that must make `promtool test rules` fail: proof that the
# unit tests look at the thresholds, windows and label sets, not just at syntax.
MUTATIONS = {
    "FailoverPoolUnavailable": ("for: 2m\n        labels:\n          severity: page\n        annotations:\n          summary: \"Pool", "for: 0m\n        labels:\n          severity: page\n        annotations:\n          summary: \"Pool"),
    "FailoverPoolErrorBudgetBurnFast": (") > (14.4 * 0.001)\n          and", ") > (14.4 * 0.001)\n          or"),
    "FailoverPoolErrorBudgetBurnSlow": ("> (6 * 0.001)\n          unless on (failover_pool) failover:slo_configured\n"
                                        "        for: 15m",
                                        "> (16 * 0.001)\n          unless on (failover_pool) failover:slo_configured\n"
                                        "        for: 15m"),
    "FailoverDomainDown": ("(failover_probe_success), 2)", "(failover_probe_success), 1)"),
    "FailoverBreakerFlapping": ("[10m])) > 4", "[10m])) > 40"),
    "FailoverDNSMismatch": ("(failover_dns_mismatch) == 1\n", "(failover_dns_mismatch) == 0\n"),
    "FailoverRetriesFrequent": ("> 1.5", "> 2.5"),
    "FailoverKeepAliveDrops": ("> 0.02\n", "> 0.2\n"),
    "FailoverCertificateExpiringSoon": ("< 14 * 86400", "< 7 * 86400"),
    "FailoverBackupNotReady": ('check=~"cors|health"', 'check=~"cors|health|cert"'),
    "FailoverAgentDown": ('expr: up{job="failover-agent"} == 0\n        for: 2m', 'expr: up{job="failover-agent"} == 0\n        for: 5m'),
    "FailoverAgentAbsent": ('absent(up{job="failover-agent"})', 'absent(up{job="other"})'),
    "FailoverPoolAllDomainsDown": ("max by (failover_pool, probe_location) (\n",
                                   "min by (failover_pool, probe_location) (\n"),
}


def test_every_alert_has_a_mutation() -> None:
    assert set(MUTATIONS) == {rule["alert"] for rule in alert_rules()}


@pytest.mark.parametrize("alert", sorted(MUTATIONS))
def test_rule_unit_tests_catch_a_broken_rule(alert: str, promtool: str, tmp_path: Path) -> None:
    """Changing one threshold or window of the alert makes `promtool test rules` fail."""
    old, new = MUTATIONS[alert]
    text = RULES.read_text(encoding="utf-8")
    assert text.count(old) == 1, f"mutation anchor for {alert} must occur once"
    (tmp_path / "alerts.yml").write_text(text.replace(old, new), encoding="utf-8")
    # Only the cases that check this alert, to keep the test fast.
    suite = yaml.safe_load(RULE_TESTS.read_text(encoding="utf-8"))
    suite["tests"] = [
        case for case in suite["tests"]
        if any(check["alertname"] == alert for check in case.get("alert_rule_test", []))
    ]
    (tmp_path / "alerts_test.yml").write_text(yaml.safe_dump(suite, sort_keys=False), encoding="utf-8")
    result = run_promtool(promtool, "test", "rules", "alerts_test.yml", cwd=tmp_path)
    assert result.returncode != 0, f"promtool test rules still passes with {alert} broken"
    assert f"alertname: {alert}" in result.stdout + result.stderr


MAINTENANCE_CLAUSE = re.compile(r"\n *unless on \([a-z_, ]+\) failover_maintenance_active == 1")


def test_domain_alerts_honour_maintenance_windows() -> None:
    """Every alert about a domain's own state leaves out the domains in a maintenance window; the
    pool's symptoms and certificate expiry do not (see alerts.yml's header)."""
    muted = {rule["alert"] for rule in alert_rules() if "failover_maintenance_active == 1" in rule["expr"]}
    assert muted == {"FailoverDomainDown", "FailoverPoolAllDomainsDown", "FailoverBreakerFlapping",
                     "FailoverBackupNotReady", "FailoverKeepAliveDrops"}


def test_rule_unit_tests_catch_alerts_that_ignore_maintenance(promtool: str, tmp_path: Path) -> None:
    """Without the maintenance clauses, the maintenance cases of alerts_test.yml fail, each alert's."""
    text = RULES.read_text(encoding="utf-8")
    assert len(MAINTENANCE_CLAUSE.findall(text)) == 5
    (tmp_path / "alerts.yml").write_text(MAINTENANCE_CLAUSE.sub("", text), encoding="utf-8")
    suite = yaml.safe_load(RULE_TESTS.read_text(encoding="utf-8"))
    suite["tests"] = [case for case in suite["tests"] if "maintenance" in case["name"]]
    assert len(suite["tests"]) == 2
    (tmp_path / "alerts_test.yml").write_text(yaml.safe_dump(suite, sort_keys=False), encoding="utf-8")
    result = run_promtool(promtool, "test", "rules", "alerts_test.yml", cwd=tmp_path)
    assert result.returncode != 0
    output = result.stdout + result.stderr
    for alert in ("FailoverDomainDown", "FailoverPoolAllDomainsDown", "FailoverBreakerFlapping",
                  "FailoverBackupNotReady", "FailoverKeepAliveDrops"):
        assert f"alertname: {alert}" in output, output
