"""``failover-agent rules``: the generated SLO rules pass ``promtool check rules`` and behave, in
``promtool test rules``, as the SRE Workbook's multiwindow, multi-burn-rate alerts should.

Two SLOs of pool ``api``: its end-to-end availability at 99.9 % (the agent's
``failover_requests_total``, 100 requests a minute) and the probes of ``api.example.com`` at
99.5 % (``failover_probe_success``, one sample a minute). Each scenario starts with three
healthy days, so that the 3d window is full, then: a blip, a fast burn, a slow burn. The
expected alerts are worked out by hand in each scenario's docstring, from the Workbook's
table (14.4x over 1h and 5m, 6x over 6h and 30m: page; 3x over 1d and 2h, 1x over 3d and 6h:
ticket).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from failover_agent.cli import main
from failover_agent.slo import ALERT_NAME

from pytest_failover import semconv
from pytest_failover.semconv import prometheus_label

from .conftest import ALERTMANAGER_CONFIG, RULES

CONFIG = """
location = "eu"

[[pools]]
name = "api"
domains = ["https://api.example.com", "https://api2.example.com"]

[[slo]]
pool = "api"
objective = 99.9
window = "30d"

[[slo]]
pool = "api"
domain = "https://api.example.com"
objective = 99.5
"""
POOL_SLO = "api"
PROBE_SLO = "api/api.example.com:443"

HEALTHY_DAYS = 3 * 24 * 60  # minutes of good history before each scenario
EVALUATION = "5m"  # rules every 5 minutes on samples every minute: 5 times faster than 1m, times a multiple of 5
REQUESTS = semconv.METRICS[semconv.FAILOVER_REQUESTS].prometheus
PROBE_SUCCESS = semconv.METRICS[semconv.FAILOVER_PROBE_SUCCESS].prometheus
POOL_L = prometheus_label(semconv.FAILOVER_POOL)
LOCATION_L = prometheus_label(semconv.PROBE_LOCATION)
OUTCOME_L = prometheus_label(semconv.FAILOVER_OUTCOME)
ORIGIN = {prometheus_label(semconv.URL_SCHEME): "https", prometheus_label(semconv.SERVER_ADDRESS): "api.example.com",
          prometheus_label(semconv.SERVER_PORT): "443"}
OTHER_DOMAIN = {**ORIGIN, prometheus_label(semconv.SERVER_ADDRESS): "api2.example.com"}

PAGE_FAST = (semconv.SEVERITY_PAGE, "1h", "5m")
PAGE_SLOW = (semconv.SEVERITY_PAGE, "6h", "30m")
TICKET_FAST = (semconv.SEVERITY_TICKET, "1d", "2h")
TICKET_SLOW = (semconv.SEVERITY_TICKET, "3d", "6h")


@dataclass(frozen=True, slots=True, kw_only=True)
class Phase:
    """``minutes`` of traffic: per minute, ``bad`` of 100 requests fail, the domain's probe
    fails once every ``probe_fail_every`` samples (0: never), and the agent exports
    ``failover_maintenance_active 1`` for the ``maintenance`` domain (None: for none)."""

    minutes: int
    bad: float = 0
    probe_fail_every: int = 0
    maintenance: dict[str, str] | None = None  # the labels of the domain in a maintenance window


def _counter(phases: Sequence[Phase], per_minute: Sequence[float]) -> str:
    """A counter in promtool's expanding notation: one ``start+step x (n - 1)`` run per phase."""
    runs, total = [], 0.0
    for phase, step in zip(phases, per_minute, strict=True):
        runs.append(f"{total:g}+{step:g}x{phase.minutes - 1}")
        total += step * phase.minutes
    return " ".join(runs)


def _probe(phases: Sequence[Phase]) -> str:
    """The probe's 0/1 samples, one a minute."""
    runs = []
    for phase in phases:
        if not phase.probe_fail_every:
            runs.append(f"1x{phase.minutes - 1}")
            continue
        cycles, rest = divmod(phase.minutes, phase.probe_fail_every)
        good = phase.probe_fail_every - 1  # good samples before each failed one
        runs += [f"1x{good - 1} 0" if good else "0"] * cycles
        runs += [f"1x{rest - 1}"] if rest else []
    return " ".join(runs)


def _selector(metric: str, labels: dict[str, str]) -> str:
    return metric + "{" + ", ".join(f'{k}="{v}"' for k, v in labels.items()) + "}"


def _maintenance(phases: Sequence[Phase], domain: dict[str, str]) -> str:
    """The gauge of ``domain``: 1 a minute in its windows, no sample outside them."""
    return " ".join(f"1x{p.minutes - 1}" if p.maintenance == domain else f"_x{p.minutes}" for p in phases)


def input_series(phases: Sequence[Phase]) -> list[dict[str, str]]:
    pool = {POOL_L: "api", LOCATION_L: "eu"}
    maintenance = semconv.METRICS[semconv.FAILOVER_MAINTENANCE_ACTIVE].prometheus
    windows = [{"series": _selector(maintenance, {**pool, **domain}), "values": _maintenance(phases, domain)}
               for domain in (ORIGIN, OTHER_DOMAIN) if any(p.maintenance == domain for p in phases)]
    return [
        *windows,
        {"series": _selector(REQUESTS, {**pool, OUTCOME_L: semconv.OUTCOME_SUCCESS}),
         "values": _counter(phases, [100 - p.bad for p in phases])},
        {"series": _selector(REQUESTS, {**pool, OUTCOME_L: semconv.OUTCOME_FAILURE}),
         "values": _counter(phases, [p.bad for p in phases])},
        # an application's own client (no probe_location): not the agent's SLO
        {"series": _selector(REQUESTS, {POOL_L: "api", OUTCOME_L: semconv.OUTCOME_FAILURE}),
         "values": _counter(phases, [1000] * len(phases))},
        {"series": _selector(PROBE_SUCCESS, {**pool, **ORIGIN}), "values": _probe(phases)},
        # the pool's other domain, always down: not this domain's SLO
        {"series": _selector(PROBE_SUCCESS, {**pool, **OTHER_DOMAIN}),
         "values": f"0x{sum(p.minutes for p in phases) - 1}"},
    ]


def expected_alerts(slo: str, which: Sequence[tuple[str, str, str]]) -> list[dict[str, Any]]:
    out = []
    for severity, long, short in which:
        labels = {semconv.SEVERITY_LABEL: severity, semconv.SLO_LABEL: slo, "long_window": long,
                  "short_window": short, POOL_L: "api"}
        out.append({"exp_labels": labels | (ORIGIN if slo == PROBE_SLO else {})})
    return out


def alert_case(at_minutes: int, pool: Sequence[tuple[str, str, str]],
               probe: Sequence[tuple[str, str, str]]) -> dict[str, Any]:
    return {"eval_time": f"{at_minutes}m", "alertname": ALERT_NAME,
            "exp_alerts": expected_alerts(POOL_SLO, pool) + expected_alerts(PROBE_SLO, probe)}


def scenario(name: str, phases: Sequence[Phase], cases: Sequence[dict[str, Any]],
             expr_cases: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
    return {"name": name, "interval": "1m", "input_series": input_series(phases),
            "alert_rule_test": list(cases), "promql_expr_test": list(expr_cases)}


def _records_at(minutes: int, record: str, *, pool: float, probe: float) -> dict[str, Any]:
    """A ``promql_expr_test``: ``record`` of the pool's SLO is ``pool``, of the domain's ``probe``."""
    return {"eval_time": f"{minutes}m", "expr": record, "exp_samples": [
        {"labels": _selector(record, {POOL_L: "api", semconv.SLO_LABEL: POOL_SLO}), "value": pool},
        {"labels": _selector(record, {POOL_L: "api", **ORIGIN, semconv.SLO_LABEL: PROBE_SLO}), "value": probe},
    ]}


def blip() -> dict[str, Any]:
    """One bad minute: 20 of 100 requests fail, one probe fails.

    Requests (budget 0.1 %): 20 errors are 3.3x over 1h (page needs 14.4x), 6.7x over 30m but
    0.56x over 6h (page needs both above 6x), 1.7x over 2h (ticket: 3x), 0.56x over 6h
    (ticket: 1x). Probe (budget 0.5 %): one failed sample is 3.3x over 1h, 6.7x over 30m but
    0.56x over 6h, 1.7x over 2h, 0.56x over 6h. Nothing fires, then or later.
    """
    start = HEALTHY_DAYS
    phases = [Phase(minutes=start), Phase(minutes=1, bad=20, probe_fail_every=1), Phase(minutes=60)]
    return scenario("a blip fires nothing", phases,
                    [alert_case(start + at, [], []) for at in (5, 30, 55)])


def fast_burn() -> dict[str, Any]:
    """Every request and probe fails for 10 minutes.

    Ten minutes in, requests: 1,000 errors are 16.7 % over 1h (167x: page), 2.8 % over 6h (28x) with 33 % over
    30m (page), 0.69 % over 1d (6.9x) with 8.3 % over 2h (ticket), 0.23 % over 3d (2.3x) with
    28x over 6h (ticket): all four, within minutes. Probe: 10 failed samples are 16.7 % over
    1h (33x: page); 2.8 % over 6h is 5.6x (no 6x page), 0.69 % over 1d 1.4x (no 3x ticket),
    0.23 % over 3d 0.46x (no 1x ticket): the fast page only. Before the burn nothing fires,
    the 5m burn rates are 0 and the budgets whole; 5 minutes in, the 5m burn rates are
    1 / 0.001 and 1 / 0.005.
    """
    start = HEALTHY_DAYS
    phases = [Phase(minutes=start), Phase(minutes=10, bad=100, probe_fail_every=1)]
    everything = [PAGE_FAST, PAGE_SLOW, TICKET_FAST, TICKET_SLOW]
    return scenario(
        "a fast burn pages", phases,
        [alert_case(start - 5, [], []), alert_case(start + 5, everything, [PAGE_FAST]),
         alert_case(start + 10, everything, [PAGE_FAST])],
        [
            _records_at(start - 5, semconv.slo_record(semconv.SLO_BURN_RATE, "5m"), pool=0, probe=0),
            _records_at(start + 5, semconv.slo_record(semconv.SLO_BURN_RATE, "5m"), pool=1000, probe=200),
            _records_at(start - 5, semconv.slo_record(semconv.SLO_ERROR_BUDGET_REMAINING), pool=1, probe=1),
        ],
    )


def slow_burn() -> dict[str, Any]:
    """For a day, 0.5 % of requests fail (5x the 0.1 % budget) and one probe in 40 (2.5 %, 5x
    the 0.5 % budget).

    After 2 hours nothing fires: 5x over 2h, but 0.42x over 1d. After a day: 5x over 1d and 2h
    (ticket: 3x), 1.7x over 3d with 5x over 6h (ticket: 1x), but 5x is short of the 6x page
    over 6h and of 14.4x over 1h: two tickets and no page, for both SLOs.
    """
    start, day = HEALTHY_DAYS, 24 * 60
    phases = [Phase(minutes=start), Phase(minutes=day, bad=0.5, probe_fail_every=40)]
    both_tickets = [TICKET_FAST, TICKET_SLOW]
    return scenario("a slow burn opens a ticket", phases,
                    [alert_case(start + 120, [], []), alert_case(start + day - 5, both_tickets, both_tickets)])


def maintenance_hides_failures() -> dict[str, Any]:
    """The domain's probe fails for an hour, all of it in its maintenance window.

    Every 5m ratio that holds a sample of the window is left out, so no window's ratio holds a
    failure: no alert during the window or after it ends (when a muted alert's long windows
    would still hold the hour), and the probe SLO's budget stays whole. The pool, served by
    its other domain, burns nothing either.
    """
    start = HEALTHY_DAYS
    phases = [Phase(minutes=start), Phase(minutes=60, probe_fail_every=1, maintenance=ORIGIN), Phase(minutes=60)]
    budget = semconv.slo_record(semconv.SLO_ERROR_BUDGET_REMAINING)
    return scenario("a failure in a maintenance window neither pages nor burns budget", phases,
                    [alert_case(start + at, [], []) for at in (5, 30, 55, 65, 90, 120)],
                    [_records_at(start + at, budget, pool=1, probe=1) for at in (30, 65, 120)])


def failure_outside_a_window_pages() -> dict[str, Any]:
    """The same hour in a window, six healthy hours, then 10 failed probes while only the
    pool's *other* domain is in maintenance: the fast page, as in :func:`fast_burn` (10 of
    the 1h window's 60 samples, 33x; 5.6x over 6h, short of the 6x page, its gap-free 72
    ratios)."""
    start, after = HEALTHY_DAYS, HEALTHY_DAYS + 60 + 360
    phases = [Phase(minutes=start), Phase(minutes=60, probe_fail_every=1, maintenance=ORIGIN), Phase(minutes=360),
              Phase(minutes=10, probe_fail_every=1, maintenance=OTHER_DOMAIN)]
    return scenario("a failure outside its window pages", phases,
                    [alert_case(after - 5, [], []), alert_case(after + 5, [], [PAGE_FAST]),
                     alert_case(after + 10, [], [PAGE_FAST])])


@pytest.fixture(scope="module")
def rules_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The rules ``failover-agent rules -o`` writes for CONFIG."""
    folder = tmp_path_factory.mktemp("slo")
    config = folder / "agent.toml"
    config.write_text(CONFIG, encoding="utf-8")
    out = folder / "slo.yml"
    result = CliRunner().invoke(main, ["rules", str(config), "-o", str(out)])
    assert result.exit_code == 0, result.output
    return out


def _promtool(promtool: str, *args: str) -> subprocess.CompletedProcess[str]:
    # Go's collector at GOGC=400 (the default 100) runs a quarter as often: a scenario's days of
    # samples and rule evaluations take a fifth less CPU (3.4 s instead of 4.3) for 250 MB of heap
    # instead of 100; what promtool computes is the same
    return subprocess.run([promtool, *args], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "GOGC": "400"})


def test_promtool_check_rules_accepts_the_generated_rules(promtool: str, rules_file: Path) -> None:
    """``promtool check rules``: valid, no duplicates, 19 rules a SLO (7 ratios, 7 burn rates,
    the budget left, 4 alerts), and the pool's SLO ``failover:slo_configured``."""
    result = _promtool(promtool, "check", "rules", str(rules_file))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 39 rules found" in result.stdout


def _without_annotations(rules_file: Path, folder: Path, edit: Callable[[str], str] = lambda text: text,
                         *, keep: tuple[str, str, str] | None = None) -> Path:
    """A copy of the rules without their annotations (promtool compares them with every
    expected alert; the scenarios are about when alerts fire) but those of the ``keep`` row,
    ``edit`` applied."""
    data = yaml.safe_load(rules_file.read_text(encoding="utf-8"))
    for group in data["groups"]:
        for rule in group["rules"]:
            labels = rule.get("labels", {})
            if keep != (labels.get(semconv.SEVERITY_LABEL), labels.get("long_window"), labels.get("short_window")):
                rule.pop("annotations", None)
    out = folder / "conditions.yml"
    out.write_text(edit(yaml.safe_dump(data, sort_keys=False, width=100_000)), encoding="utf-8")
    return out


def _promtool_test(promtool: str, rules: Path, folder: Path, *cases: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    tests = {"rule_files": [str(rules)], "evaluation_interval": EVALUATION, "tests": list(cases)}
    test_file = folder / "slo_test.yml"
    test_file.write_text(yaml.safe_dump(tests, sort_keys=False, width=100_000), encoding="utf-8")
    return _promtool(promtool, "test", "rules", str(test_file))


@pytest.mark.parametrize("make", [blip, fast_burn, slow_burn, maintenance_hides_failures,
                                  failure_outside_a_window_pages], ids=lambda make: make.__name__)
def test_promtool_unit_tests_of_the_generated_rules(promtool: str, rules_file: Path, tmp_path: Path,
                                                    make: Callable[[], dict[str, Any]]) -> None:
    """A blip fires nothing, a fast burn pages, a slow burn opens a ticket, a failure in a
    maintenance window neither pages nor burns budget, one outside it pages (promtool test rules)."""
    result = _promtool_test(promtool, _without_annotations(rules_file, tmp_path), tmp_path, make())
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-5000:]
    assert "SUCCESS" in result.stdout


def test_the_unit_tests_notice_a_wrong_threshold(promtool: str, rules_file: Path, tmp_path: Path) -> None:
    """The fast-burn test fails when the 14.4x page is generated at 40x: the tests can fail."""
    broken = _without_annotations(rules_file, tmp_path, lambda text: text.replace("> 14.4", "> 40"))
    result = _promtool_test(promtool, broken, tmp_path, fast_burn())
    assert result.returncode != 0
    assert "FAILED" in result.stdout + result.stderr


def test_a_page_says_what_burns_how_fast_and_what_it_costs(promtool: str, rules_file: Path, tmp_path: Path) -> None:
    """The fast page's annotations, as promtool renders them: the pool or domain, the burn rate
    now (probe: 10 failed samples of 60 over 1h, 33.3x a 0.5 % budget; requests: 150x, 152.5x
    with rate()'s extrapolation to the window's edges), the budget, how long it lasts."""
    start = HEALTHY_DAYS
    phases = [Phase(minutes=start), Phase(minutes=10, bad=100, probe_fail_every=1)]
    case = scenario("annotations", phases, [])
    case["alert_rule_test"] = [{"eval_time": f"{start + 10}m", "alertname": ALERT_NAME, "exp_alerts": [
        *expected_alerts(POOL_SLO, [PAGE_FAST, PAGE_SLOW, TICKET_FAST, TICKET_SLOW]),
        *expected_alerts(PROBE_SLO, [PAGE_FAST]),
    ]}]
    # annotations of the fast page of each SLO; the others, checked in full, would say the same
    pool_page, probe_page = case["alert_rule_test"][0]["exp_alerts"][0], case["alert_rule_test"][0]["exp_alerts"][4]
    pool_page["exp_annotations"] = {
        "summary": "SLO api burns its error budget 14.4x as fast as it may (over 1h and 5m)",
        "description": "pool api (end-to-end requests through the failover client): over the last 1h the error "
                       "budget (0.1 % of events may fail) burns 152.5x as fast as the SLO allows, and over 14.4x "
                       "over the last 5m too. At 14.4x the 30d budget of SLO api (objective 99.9 %) lasts 2.08 "
                       "days: 1h spends 2 % of it. See the SLO row of the Failover overview dashboard."}
    probe_page["exp_annotations"] = {
        "summary": "SLO api/api.example.com:443 burns its error budget 14.4x as fast as it may (over 1h and 5m)",
        "description": "domain https://api.example.com:443 of pool api (pinned probes): over the last 1h the error "
                       "budget (0.5 % of events may fail) burns 33.3x as fast as the SLO allows, and over 14.4x "
                       "over the last 5m too. At 14.4x the 30d budget of SLO api/api.example.com:443 (objective "
                       "99.5 %) lasts 2.08 days: 1h spends 2 % of it. See the SLO row of the Failover overview "
                       "dashboard."}
    result = _promtool_test(promtool, _without_annotations(rules_file, tmp_path, keep=PAGE_FAST), tmp_path, case)
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-5000:]


def test_every_generated_alert_routes_by_severity(amtool: str, rules_file: Path) -> None:
    """The shipped Alertmanager configuration sends the SLO pages to oncall, tickets to tickets."""
    data = yaml.safe_load(rules_file.read_text(encoding="utf-8"))
    alerts = [rule for group in data["groups"] for rule in group["rules"] if "alert" in rule]
    assert {rule["labels"][semconv.SEVERITY_LABEL] for rule in alerts} == set(semconv.SEVERITIES)
    for rule in alerts:
        expected = {semconv.SEVERITY_PAGE: "oncall", semconv.SEVERITY_TICKET: "tickets"}[
            rule["labels"][semconv.SEVERITY_LABEL]]
        args = [f"alertname={rule['alert']}", f"{POOL_L}=api", *(f"{k}={v}" for k, v in rule["labels"].items())]
        result = subprocess.run([amtool, "config", "routes", "test", f"--config.file={ALERTMANAGER_CONFIG}",
                                 f"--verify.receivers={expected}", *args], capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stdout + result.stderr


SHIPPED_FAST = "FailoverPoolErrorBudgetBurnFast"


def _shipped_rules(folder: Path) -> Path:
    """dashboards/alerts.yml without its annotations (the case is about which alerts fire)."""
    data = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    for group in data["groups"]:
        for rule in group["rules"]:
            rule.pop("annotations", None)
    out = folder / "shipped.yml"
    out.write_text(yaml.safe_dump(data, sort_keys=False, width=100_000), encoding="utf-8")
    return out


def _two_pools_burn(with_slo: bool) -> dict[str, Any]:
    """fast_burn for pool ``api`` (which has the SLOs) and every request of pool ``web`` (none)
    failing over the same 10 minutes; ten minutes in, which alerts page for which pool."""
    start = HEALTHY_DAYS
    phases = [Phase(minutes=start), Phase(minutes=10, bad=100, probe_fail_every=1)]
    case = scenario("one page a pool", phases, [])
    web = {POOL_L: "web", LOCATION_L: "eu"}
    case["input_series"] += [
        {"series": _selector(REQUESTS, {**web, OUTCOME_L: semconv.OUTCOME_SUCCESS}), "values": _counter(phases, [100, 0])},
        {"series": _selector(REQUESTS, {**web, OUTCOME_L: semconv.OUTCOME_FAILURE}), "values": _counter(phases, [0, 100])},
    ]
    shipped = [{"exp_labels": {POOL_L: pool, semconv.SEVERITY_LABEL: semconv.SEVERITY_PAGE, "slo": "99.9%"}}
               for pool in (["api", "web"] if not with_slo else ["web"])]
    case["alert_rule_test"] = [{"eval_time": f"{start + 10}m", "alertname": SHIPPED_FAST, "exp_alerts": shipped}]
    if with_slo:
        case["alert_rule_test"].append(alert_case(start + 10, [PAGE_FAST, PAGE_SLOW, TICKET_FAST, TICKET_SLOW],
                                                  [PAGE_FAST]))
    return case


def test_a_pool_with_an_slo_is_paged_by_it_alone(promtool: str, rules_file: Path, tmp_path: Path) -> None:
    """With the shipped rules and the generated ones loaded together, a fast burn of pool
    ``api`` (which has an availability SLO) pages through its SLO's alerts and not through
    the shipped FailoverPoolErrorBudgetBurnFast; pool ``web`` (no SLO) is still paged by it."""
    generated = _without_annotations(rules_file, tmp_path)
    tests = {"rule_files": [str(generated), str(_shipped_rules(tmp_path))], "evaluation_interval": EVALUATION,
             "tests": [_two_pools_burn(with_slo=True)]}
    (tmp_path / "both_test.yml").write_text(yaml.safe_dump(tests, sort_keys=False, width=100_000), encoding="utf-8")
    result = _promtool(promtool, "test", "rules", str(tmp_path / "both_test.yml"))
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-5000:]


def test_without_the_slo_record_the_shipped_alert_pages_the_pool_too(promtool: str, tmp_path: Path) -> None:
    """The shipped rules alone (no failover:slo_configured): the same burn pages pool ``api``
    through FailoverPoolErrorBudgetBurnFast too, so the ``unless`` is what keeps it to one page."""
    tests = {"rule_files": [str(_shipped_rules(tmp_path))], "evaluation_interval": EVALUATION,
             "tests": [_two_pools_burn(with_slo=False)]}
    (tmp_path / "shipped_test.yml").write_text(yaml.safe_dump(tests, sort_keys=False, width=100_000),
                                               encoding="utf-8")
    result = _promtool(promtool, "test", "rules", str(tmp_path / "shipped_test.yml"))
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-5000:]


def test_only_a_pools_availability_slo_writes_the_record(rules_file: Path) -> None:
    """failover:slo_configured comes once, from the pool's availability SLO, labelled with the
    pool; the domain's probe SLO writes none (the shipped pool alerts are not about it)."""
    data = yaml.safe_load(rules_file.read_text(encoding="utf-8"))
    found = [(group["name"], rule) for group in data["groups"] for rule in group["rules"]
             if rule.get("record") == semconv.SLO_CONFIGURED]
    assert found == [(f"failover-slo-{POOL_SLO}", {"record": semconv.SLO_CONFIGURED, "expr": "vector(1)",
                                                   "labels": {semconv.SLO_LABEL: POOL_SLO, POOL_L: "api"}})]
    assert f"unless on ({POOL_L}) {semconv.SLO_CONFIGURED}" in RULES.read_text(encoding="utf-8")
