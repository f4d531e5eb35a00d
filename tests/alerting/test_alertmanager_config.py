"""The shipped Alertmanager configuration: valid, and every alert reaches the receiver it should."""

from __future__ import annotations

import subprocess

import pytest
import yaml

from .conftest import ALERTMANAGER_CONFIG, RULES


def amtool_run(amtool: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([amtool, *args], capture_output=True, text=True, timeout=60)


def test_amtool_check_config(amtool: str) -> None:
    """`amtool check-config` accepts the file and finds the route, receivers and inhibit rules."""
    result = amtool_run(amtool, "check-config", str(ALERTMANAGER_CONFIG))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout
    assert " - 2 receivers" in result.stdout and " - 2 inhibit rules" in result.stdout


def _rules() -> list[dict[str, object]]:
    data = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    return [rule for group in data["groups"] for rule in group["rules"] if "alert" in rule]


@pytest.mark.parametrize("rule", _rules(), ids=lambda rule: str(rule["alert"]))
def test_every_alert_routes_by_severity(amtool: str, rule: dict[str, object]) -> None:
    """`amtool config routes test`: pages go to oncall, tickets to tickets, for every rule's labels."""
    labels = rule["labels"]
    assert isinstance(labels, dict)
    expected = {"page": "oncall", "ticket": "tickets"}[labels["severity"]]
    args = [f"alertname={rule['alert']}", "failover_pool=api", *(f"{k}={v}" for k, v in labels.items())]
    result = amtool_run(amtool, "config", "routes", "test", f"--config.file={ALERTMANAGER_CONFIG}",
                        f"--verify.receivers={expected}", *args)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == expected


def test_routes_test_notices_a_wrong_receiver(amtool: str) -> None:
    """The routing check bites: a page is not routed to the ticket receiver."""
    result = amtool_run(amtool, "config", "routes", "test", f"--config.file={ALERTMANAGER_CONFIG}",
                        "--verify.receivers=tickets", "severity=page")
    assert result.returncode != 0
    assert "oncall" in result.stdout + result.stderr


def test_receivers_are_webhooks_that_send_resolved() -> None:
    """Both receivers are example webhooks and tell when an alert resolves."""
    config = yaml.safe_load(ALERTMANAGER_CONFIG.read_text(encoding="utf-8"))
    hooks = {r["name"]: r["webhook_configs"] for r in config["receivers"]}
    assert set(hooks) == {"oncall", "tickets"}
    assert all(hook["url"].startswith("http://127.0.0.1:") and hook["send_resolved"]
               for configs in hooks.values() for hook in configs)
