"""The "Slow domains" panels compute the right numbers: their queries under `promtool test rules`.

The live test (test_live_prometheus.py) proves every query parses and finds series
on scraped data; this one feeds known counters through promtool's
``promql_expr_test`` and checks the values: the hedge ratio leaves throttled hedges
out, the throttle line is ``$hedge_max_ratio``, breaker openings count only those
caused by slow calls, the pool filter holds, and a pool without hedges or slow
calls shows 0, not "No data".
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import yaml

from pytest_failover import Hedging, semconv
from pytest_failover.semconv import prometheus_label

from . import _grafana
from .test_alerts import run_promtool

OVERVIEW = "failover-overview.json"
# Selected: two pools; "other" has hedges and slow calls too and must not show.
SELECTED = "api|calm"
# promtool's series are one sample a minute; a 5 m window keeps rate() exact on straight lines.
VALUES = {"pool": SELECTED, "domain": ".*", "location": ".*", "__rate_interval": "5m"}
EVAL_TIME = "10m"

POOL = prometheus_label(semconv.FAILOVER_POOL)
HOST = prometheus_label(semconv.SERVER_ADDRESS)
OUTCOME = prometheus_label(semconv.FAILOVER_HEDGE_OUTCOME)
PRIMARY, BACKUP = "api.example.com", "api2.example.com"


def name(metric: str) -> str:
    return semconv.METRICS[metric].prometheus


def labels(**attributes: str) -> str:
    """A PromQL label set from OpenTelemetry attribute keys (``failover.pool`` etc.)."""
    return "{" + ", ".join(f'{prometheus_label(key)}="{value}"' for key, value in attributes.items()) + "}"


def series(metric: str, per_minute: float, **attributes: str) -> dict[str, str]:
    """An input series that grows by ``per_minute`` every minute for 10 minutes."""
    return {"series": name(metric) + labels(**attributes), "values": f"0+{per_minute}x10"}


def attrs(**kw: str) -> dict[str, str]:
    """Keyword spelling of attribute keys: ``pool=`` for ``failover.pool`` and so on."""
    keys = {
        "pool": semconv.FAILOVER_POOL, "host": semconv.SERVER_ADDRESS, "outcome": semconv.FAILOVER_HEDGE_OUTCOME,
        "request_outcome": semconv.FAILOVER_OUTCOME, "reason": semconv.FAILOVER_REASON,
        "before": semconv.FAILOVER_BREAKER_FROM, "after": semconv.FAILOVER_BREAKER_TO,
    }
    return {keys[k]: v for k, v in kw.items()}


def input_series() -> list[dict[str, str]]:
    ok = semconv.OUTCOMES[0]
    hedges = semconv.FAILOVER_HEDGES
    transitions = semconv.FAILOVER_BREAKER_TRANSITIONS
    out = [
        # 100 requests/s in api and calm, hedges only in api: 4 won, 1 lost, 1 cancelled, 10 throttled per second.
        series(semconv.FAILOVER_REQUESTS, 6000, **attrs(pool="api", request_outcome=ok)),
        series(semconv.FAILOVER_REQUESTS, 6000, **attrs(pool="calm", request_outcome=ok)),
        series(hedges, 240, **attrs(pool="api", host=BACKUP, outcome=semconv.HEDGE_WON)),
        series(hedges, 60, **attrs(pool="api", host=BACKUP, outcome=semconv.HEDGE_LOST)),
        series(hedges, 60, **attrs(pool="api", host=BACKUP, outcome=semconv.HEDGE_CANCELLED)),
        series(hedges, 600, **attrs(pool="api", host=BACKUP, outcome=semconv.HEDGE_THROTTLED)),
        # Slow calls: 0.5/s on the primary, none on the backup (the series exists at 0).
        series(semconv.FAILOVER_SLOW_CALLS, 30, **attrs(pool="api", host=PRIMARY)),
        series(semconv.FAILOVER_SLOW_CALLS, 0, **attrs(pool="api", host=BACKUP)),
        # Openings: one a minute by slow calls; others (failures, closings by slow-call probes) must not count.
        series(transitions, 1, **attrs(pool="api", host=PRIMARY, before=semconv.BREAKER_CLOSED,
                                       after=semconv.BREAKER_OPEN, reason=semconv.BREAKER_REASON_SLOW_CALLS)),
        series(transitions, 2, **attrs(pool="api", host=PRIMARY, before=semconv.BREAKER_CLOSED,
                                       after=semconv.BREAKER_OPEN)),
        series(transitions, 4, **attrs(pool="api", host=PRIMARY, before=semconv.BREAKER_HALF_OPEN,
                                       after=semconv.BREAKER_CLOSED, reason=semconv.BREAKER_REASON_SLOW_CALLS)),
        # The calm pool: traffic and breakers, nothing slow.
        series(semconv.FAILOVER_ATTEMPTS, 6000, **attrs(pool="calm", host="calm.example.com")),
        {"series": name(semconv.FAILOVER_BREAKER_STATE) + labels(**attrs(pool="calm", host="calm.example.com")),
         "values": "0x10"},
    ]
    for other in (hedges, semconv.FAILOVER_SLOW_CALLS, semconv.FAILOVER_REQUESTS):
        out.append(series(other, 600, **attrs(pool="other", host="other.example.com")))
    return out


def sample(value: float, **kw: str) -> dict[str, Any]:
    return {"labels": labels(**attrs(**kw)), "value": value}


# What each query of the two panels returns at EVAL_TIME, per (panel, refId).
EXPECTED: dict[tuple[str, str], list[dict[str, Any]]] = {
    ("Hedging", "A"): [
        sample(4, pool="api", outcome=semconv.HEDGE_WON),
        sample(1, pool="api", outcome=semconv.HEDGE_LOST),
        sample(1, pool="api", outcome=semconv.HEDGE_CANCELLED),
        sample(10, pool="api", outcome=semconv.HEDGE_THROTTLED),
        sample(0, pool="calm"),
    ],
    # (4 + 1 + 1) hedges sent per 100 requests: throttled ones were never sent.
    ("Hedging", "B"): [sample(0.06, pool="api"), sample(0, pool="calm")],
    ("Hedging", "C"): [sample(0.05, pool="api"), sample(0.05, pool="calm")],
    ("Slow calls", "A"): [sample(0.5, pool="api", host=PRIMARY), sample(0, pool="api", host=BACKUP),
                          sample(0, pool="calm")],
    ("Slow calls", "B"): [sample(5, pool="api", host=PRIMARY), sample(0, pool="calm")],
}


def panel_queries() -> dict[tuple[str, str], str]:
    values = {**_grafana.custom_defaults(OVERVIEW), **VALUES}
    return {
        (query.panel, query.ref_id): _grafana.substitute(query.expr, values)
        for query in _grafana.queries(OVERVIEW)
        if query.panel in {"Hedging", "Slow calls"}
    }


def test_throttle_variable_defaults_to_the_clients_default() -> None:
    """$hedge_max_ratio starts at Hedging.max_ratio's default, so the line matches an untuned client."""
    default = next(f.default for f in dataclasses.fields(Hedging) if f.name == "max_ratio")
    assert _grafana.custom_defaults(OVERVIEW)["hedge_max_ratio"] == str(default) == "0.05"


def test_slow_domain_queries_compute_the_expected_values(promtool: str, tmp_path: Path) -> None:
    """On known counters every query of the Hedging and Slow calls panels returns exactly the expected samples."""
    queries = panel_queries()
    assert set(queries) == set(EXPECTED), "a query of the two panels has no expected values (or went away)"
    suite = {
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": input_series(),
            "promql_expr_test": [
                {"expr": queries[key], "eval_time": EVAL_TIME, "exp_samples": EXPECTED[key]} for key in sorted(EXPECTED)
            ],
        }],
    }
    (tmp_path / "panels_test.yml").write_text(yaml.safe_dump(suite, sort_keys=False), encoding="utf-8")
    result = run_promtool(promtool, "test", "rules", "panels_test.yml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout
