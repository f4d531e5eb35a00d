"""Generate the Grafana dashboards of pytest-failover from plain Python dicts.

Run ``python dashboards/generate.py`` after editing this file: it rewrites
``failover-overview.json`` and ``backup-readiness.json`` next to it, and ``slo-demo.yml``,
the rules ``failover-agent rules`` writes for the demo's SLOs.
``python dashboards/generate.py --check`` exits 1 when a committed file differs
from what this generator produces (the test suite runs the same comparison).

Conventions every panel follows (tests/dashboards check them):

- classic dashboard JSON (``schemaVersion`` 39), the Prometheus data source is the
  ``${datasource}`` variable, so the files import into any Grafana unchanged;
- variables ``pool`` (``failover_pool``), ``domain`` (``server_address``, the
  domain's host) and ``location`` (``probe_location``), multi-value with "All"
  meaning ``.*``; every query filters with ``=~"$pool"`` etc.;
- the agent names a domain by its origin (``url_scheme``, ``server_address``,
  ``server_port``): its per-domain queries group by host and port, so two ports of
  one host are two rows;
- a query never depends on an event having happened: counters that only exist
  after their first increment are ``or``-ed with a zero vector per pool, so a
  panel shows 0 instead of "No data" on a calm day.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from failover_agent.demo import demo_config
from failover_agent.quorum.promql import location_votes, quorum_decision
from failover_agent.slo import BURN_ALERTS, rule_groups
from failover_agent.slo import render as render_rules

from pytest_failover import Hedging, semconv
from pytest_failover.semconv import prometheus_label

__all__ = ["DASHBOARDS", "FILES", "RULES", "backup_readiness", "demo_slo_rules", "failover_overview", "main", "render"]

Json = dict[str, Any]

HERE = Path(__file__).resolve().parent
SCHEMA_VERSION = 39
DATASOURCE: Json = {"type": "prometheus", "uid": "${datasource}"}


def series(name: str) -> str:
    """The Prometheus name of an OpenTelemetry metric (a histogram's base name)."""
    return semconv.METRICS[name].prometheus


def show(label: str) -> str:
    """A legend placeholder: the value of ``label``."""
    return "{{" + label + "}}"


def origin() -> str:
    """The legend of an agent domain: ``host:port``."""
    return f"{show(prometheus_label(semconv.SERVER_ADDRESS))}:{show(prometheus_label(semconv.SERVER_PORT))}"


# Every metric and label name comes from pytest_failover.semconv (the OTLP-to-Prometheus
# translation of the OpenTelemetry names): never spelt here.
REQUESTS = series(semconv.FAILOVER_REQUESTS)
ATTEMPTS = series(semconv.FAILOVER_ATTEMPTS)
SWITCHES = series(semconv.FAILOVER_SWITCHES)
BREAKER_STATE = series(semconv.FAILOVER_BREAKER_STATE)
BREAKER_TRANSITIONS = series(semconv.FAILOVER_BREAKER_TRANSITIONS)
BUDGET_REJECTIONS = series(semconv.FAILOVER_RETRY_BUDGET_REJECTIONS)
HEDGES = series(semconv.FAILOVER_HEDGES)
SLOW_CALLS = series(semconv.FAILOVER_SLOW_CALLS)
ATTEMPT_DURATION = series(semconv.HTTP_CLIENT_REQUEST_DURATION)
PROBE_SUCCESS = series(semconv.FAILOVER_PROBE_SUCCESS)
PROBE_STATUS = series(semconv.FAILOVER_PROBE_STATUS_CODE)
PROBE_DURATION = series(semconv.FAILOVER_PROBE_DURATION)
PHASE_DURATION = series(semconv.FAILOVER_PROBE_PHASE_DURATION)
POOL_AVAILABLE = series(semconv.FAILOVER_POOL_AVAILABLE)
POOL_SERVING = series(semconv.FAILOVER_POOL_SERVING)
CERT_EXPIRY = series(semconv.FAILOVER_TLS_CERT_EXPIRY_TIMESTAMP)
READY = series(semconv.FAILOVER_READINESS_READY)
CONTROL_VERSION = series(semconv.FAILOVER_CONTROL_VERSION)
CONTROL_ISSUED = series(semconv.FAILOVER_CONTROL_ISSUED_TIMESTAMP)
CONTROL_DISABLED = series(semconv.FAILOVER_CONTROL_DOMAIN_DISABLED)
# Recorded by the rules of `failover-agent rules` (agent/failover_agent/slo.py).
BUDGET_REMAINING = semconv.slo_record(semconv.SLO_ERROR_BUDGET_REMAINING)
SLO_L = semconv.SLO_LABEL

POOL_L = prometheus_label(semconv.FAILOVER_POOL)
HOST_L = prometheus_label(semconv.SERVER_ADDRESS)
PORT_L = prometheus_label(semconv.SERVER_PORT)
ORIGIN_L = f"{HOST_L}, {PORT_L}"  # what names a domain in the agent's series (with url_scheme)
LOCATION_L = prometheus_label(semconv.PROBE_LOCATION)
OUTCOME_L = prometheus_label(semconv.FAILOVER_OUTCOME)
RESULT_L = prometheus_label(semconv.FAILOVER_ATTEMPT_RESULT)
ERROR_L = prometheus_label(semconv.ERROR_TYPE)
FROM_L = prometheus_label(semconv.FAILOVER_FROM)
TO_L = prometheus_label(semconv.FAILOVER_TO)
REASON_L = prometheus_label(semconv.FAILOVER_REASON)
BREAKER_FROM_L = prometheus_label(semconv.FAILOVER_BREAKER_FROM)
BREAKER_TO_L = prometheus_label(semconv.FAILOVER_BREAKER_TO)
HEDGE_OUTCOME_L = prometheus_label(semconv.FAILOVER_HEDGE_OUTCOME)
PHASE_L = prometheus_label(semconv.PROBE_PHASE)
CHECK_L = prometheus_label(semconv.READINESS_CHECK)
PHASES = list(semconv.PROBE_PHASES)

# Label filters shared by the queries (Grafana substitutes the variables).
POOL = f'{POOL_L}=~"$pool"'
DOMAIN = f'{HOST_L}=~"$domain"'
LOCATION = f'{LOCATION_L}=~"$location"'
AGENT = f"{POOL}, {DOMAIN}, {LOCATION}"  # the agent's per-domain metrics carry all three
BAD_OUTCOMES = f'{OUTCOME_L}=~"{"|".join(semconv.BAD_OUTCOMES)}"'
# Hedges that went out (every outcome but throttled: those the throttle held back).
SENT_HEDGES = f'{HEDGE_OUTCOME_L}=~"{"|".join(o for o in semconv.HEDGE_OUTCOMES if o != semconv.HEDGE_THROTTLED)}"'
SLOW_OPENINGS = (
    f'{REASON_L}="{semconv.BREAKER_REASON_SLOW_CALLS}", {BREAKER_TO_L}="{semconv.BREAKER_OPEN}"'
)

# Colours of the value mappings.
GREEN, YELLOW, ORANGE, RED, BLUE = "green", "yellow", "orange", "red", "blue"


# ---------------------------------------------------------------------------
# Building blocks


def target(expr: str, legend: str = "", *, instant: bool = False, fmt: str = "time_series") -> Json:
    """One Prometheus query of a panel (refIds are filled in by :func:`panel`)."""
    return {
        "datasource": DATASOURCE,
        "editorMode": "code",
        "expr": expr,
        "format": fmt,
        "instant": instant,
        "legendFormat": legend or "__auto",
        "range": not instant,
    }


def value_map(*states: tuple[int, str, str]) -> list[Json]:
    """Value mappings ``(value, text, colour)`` for state timelines and stats."""
    return [
        {
            "type": "value",
            "options": {
                str(value): {"color": colour, "index": i, "text": text}
                for i, (value, text, colour) in enumerate(states)
            },
        }
    ]


def thresholds(base: str, *steps: tuple[float, str]) -> Json:
    """Absolute thresholds: ``base`` colour, then ``(from value, colour)`` steps."""
    return {
        "mode": "absolute",
        "steps": [{"color": base, "value": None}]
        + [{"color": colour, "value": value} for value, colour in steps],
    }


def panel(
    kind: str,
    title: str,
    description: str,
    targets: Sequence[Json],
    *,
    w: int,
    h: int,
    unit: str = "short",
    mappings: list[Json] | None = None,
    steps: Json | None = None,
    minimum: float | None = None,
    maximum: float | None = None,
    decimals: int | None = None,
    custom: Json | None = None,
    options: Json | None = None,
    overrides: list[Json] | None = None,
) -> Json:
    """A panel without id and position (:func:`layout` adds them)."""
    defaults: Json = {
        "color": {"mode": "thresholds" if kind in {"stat", "bargauge", "state-timeline"} else "palette-classic"},
        "mappings": mappings or [],
        "thresholds": steps or thresholds(GREEN),
        "unit": unit,
    }
    if minimum is not None:
        defaults["min"] = minimum
    if maximum is not None:
        defaults["max"] = maximum
    if decimals is not None:
        defaults["decimals"] = decimals
    if custom:
        defaults["custom"] = custom
    refs = "ABCDEFGHIJ"
    return {
        "datasource": DATASOURCE,
        "description": description,
        "fieldConfig": {"defaults": defaults, "overrides": overrides or []},
        "options": options or {},
        "targets": [dict(t, refId=refs[i]) for i, t in enumerate(targets)],
        "title": title,
        "type": kind,
        "_size": (w, h),
    }


def row(title: str) -> Json:
    """A row header (rows are not collapsed: everything shows on one screen)."""
    return {"collapsed": False, "panels": [], "title": title, "type": "row", "_size": (24, 1)}


def layout(panels: Sequence[Json]) -> list[Json]:
    """Give every panel an id and a grid position, left to right, wrapping at 24."""
    out: list[Json] = []
    x = y = line_height = 0
    for number, raw in enumerate(panels, start=1):
        item = dict(raw)
        w, h = item.pop("_size")
        if item["type"] == "row" or x + w > 24:
            x, y, line_height = 0, y + line_height, 0
        item["gridPos"] = {"h": h, "w": w, "x": x, "y": y}
        item["id"] = number
        out.append(item)
        x, line_height = x + w, max(line_height, h)
        if item["type"] == "row":
            x, y, line_height = 0, y + h, 0
    return out


def timeseries_custom(*, bars: bool = False, stack: str = "none", fill: int = 10) -> Json:
    return {
        "drawStyle": "bars" if bars else "line",
        "fillOpacity": 80 if bars else fill,
        "lineWidth": 1,
        "showPoints": "never",
        "spanNulls": False,
        "stacking": {"group": "A", "mode": stack},
    }


def timeseries(
    title: str,
    description: str,
    targets: Sequence[Json],
    *,
    bars: bool = False,
    stack: str = "none",
    threshold_style: str | None = None,
    **kw: Any,
) -> Json:
    """A time series panel; ``threshold_style`` ("line", "line+area") draws the thresholds."""
    custom = timeseries_custom(bars=bars, stack=stack)
    if threshold_style is not None:
        custom["thresholdsStyle"] = {"mode": threshold_style}
    return panel(
        "timeseries",
        title,
        description,
        targets,
        custom=custom,
        options={
            "legend": {"calcs": ["lastNotNull", "max"], "displayMode": "table", "placement": "right", "showLegend": True},
            "tooltip": {"mode": "multi", "sort": "desc"},
        },
        **kw,
    )


def state_timeline(title: str, description: str, targets: Sequence[Json], **kw: Any) -> Json:
    return panel(
        "state-timeline",
        title,
        description,
        targets,
        custom={"fillOpacity": 80, "lineWidth": 0},
        options={
            "alignValue": "left",
            "legend": {"displayMode": "list", "placement": "bottom", "showLegend": False},
            "mergeValues": True,
            "rowHeight": 0.85,
            "showValue": "auto",
            "tooltip": {"mode": "single", "sort": "none"},
        },
        **kw,
    )


def stat(title: str, description: str, targets: Sequence[Json], **kw: Any) -> Json:
    return panel(
        "stat",
        title,
        description,
        targets,
        options={
            "colorMode": "background",
            "graphMode": "none",
            "justifyMode": "auto",
            "orientation": "auto",
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
            "textMode": "value_and_name",
        },
        **kw,
    )


def bargauge(title: str, description: str, targets: Sequence[Json], **kw: Any) -> Json:
    return panel(
        "bargauge",
        title,
        description,
        targets,
        options={
            "displayMode": "basic",
            "orientation": "horizontal",
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
            "showUnfilled": True,
        },
        **kw,
    )


def or_zero(expr: str, by: str, zero_from: str) -> str:
    """``expr``, plus 0 for every ``by`` group of ``zero_from`` where ``expr`` has no series."""
    return f"({expr} or on ({by}) sum by ({by}) ({zero_from}) * 0)"


def on_right(ref: str, unit: str, *extra: tuple[str, Any]) -> Json:
    """A field override: the series of query ``ref`` on a right-hand axis in ``unit``."""
    properties = [("unit", unit), ("custom.axisPlacement", "right"), *extra]
    return {
        "matcher": {"id": "byFrameRefID", "options": ref},
        "properties": [{"id": key, "value": value} for key, value in properties],
    }


# ---------------------------------------------------------------------------
# Variables


def datasource_variable() -> Json:
    return {
        "current": {},
        "hide": 0,
        "includeAll": False,
        "label": "Data source",
        "multi": False,
        "name": "datasource",
        "options": [],
        "query": "prometheus",
        "refresh": 1,
        "regex": "",
        "type": "datasource",
    }


def query_variable(name: str, label: str, definition: str, description: str) -> Json:
    return {
        "allValue": ".*",
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        "datasource": DATASOURCE,
        "definition": definition,
        "description": description,
        "hide": 0,
        "includeAll": True,
        "label": label,
        "multi": True,
        "name": name,
        "options": [],
        "query": {"query": definition, "refId": "PrometheusVariableQueryEditor-VariableQuery"},
        "refresh": 2,
        "regex": "",
        "sort": 1,
        "type": "query",
    }


def choice_variable(name: str, label: str, values: Sequence[str], description: str) -> Json:
    """A custom variable: one of ``values``, the first by default."""
    return {
        "current": {"selected": True, "text": values[0], "value": values[0]},
        "description": description,
        "hide": 0,
        "includeAll": False,
        "label": label,
        "multi": False,
        "name": name,
        "options": [{"selected": v == values[0], "text": v, "value": v} for v in values],
        "query": ",".join(values),
        "type": "custom",
    }


def slo_variable() -> Json:
    return choice_variable(
        "slo", "SLO", ["0.999", "0.995", "0.99", "0.9999"],
        "Availability objective of a pool; burn rate 1 spends the error budget exactly in the SLO window.",
    )


def quorum_variables() -> list[Json]:
    """``quorum_for`` and ``quorum_min``: set them to the publisher's ``[control.quorum]``."""
    return [
        choice_variable("quorum_for", "Quorum for (s)", ["60", "30", "120", "300"],
                        "control.quorum.for_seconds of the quorum publisher: how long a location must see a domain fail."),
        choice_variable("quorum_min", "Quorum locations", ["2", "3", "1"],
                        "control.quorum.min_locations of the quorum publisher: how many locations must agree."),
    ]


def hedge_ratio_variable() -> Json:
    """``hedge_max_ratio``: set it to the clients' ``Hedging.max_ratio`` (default first)."""
    default = next(f.default for f in dataclasses.fields(Hedging) if f.name == "max_ratio")
    values = dict.fromkeys([str(default), "0.01", "0.02", "0.05", "0.1"])
    return choice_variable(
        "hedge_max_ratio", "Hedge throttle", list(values),
        "Hedging.max_ratio of the clients: the share of a pool's hedgeable requests that may be hedged.",
    )


def pool_variable() -> Json:
    return query_variable(
        "pool",
        "Pool",
        f'label_values({{__name__=~"{POOL_AVAILABLE}|{REQUESTS}"}}, {POOL_L})',
        f"Failover pool ({POOL_L}), from agent probes and client metrics.",
    )


def domain_variable(names: str) -> Json:
    return query_variable(
        "domain",
        "Domain",
        f'label_values({{__name__=~"{names}", {POOL}}}, {HOST_L})',
        f"Domain host ({HOST_L}) of the selected pools.",
    )


def location_variable(names: str) -> Json:
    return query_variable(
        "location",
        "Location",
        f'label_values({{__name__=~"{names}", {POOL}}}, {LOCATION_L})',
        f"Where the agent probes from ({LOCATION_L}).",
    )


def dashboard(uid: str, title: str, description: str, panels: Sequence[Json], variables: list[Json], links: list[Json]) -> Json:
    return {
        "annotations": {
            "list": [
                {
                    "builtIn": 1,
                    "datasource": {"type": "grafana", "uid": "-- Grafana --"},
                    "enable": True,
                    "hide": True,
                    "iconColor": "rgba(0, 211, 255, 1)",
                    "name": "Annotations & Alerts",
                    "type": "dashboard",
                }
            ]
        },
        "description": description,
        "editable": True,
        "fiscalYearStartMonth": 0,
        "graphTooltip": 1,
        "id": None,
        "links": links,
        "liveNow": False,
        "panels": layout(panels),
        "refresh": "30s",
        "schemaVersion": SCHEMA_VERSION,
        "tags": ["failover", "pytest-failover"],
        "templating": {"list": variables},
        "time": {"from": "now-6h", "to": "now"},
        "timepicker": {},
        "timezone": "",
        "title": title,
        "uid": uid,
        "version": 1,
        "weekStart": "",
    }


def link_to(uid: str, title: str) -> Json:
    return {
        "asDropdown": False,
        "icon": "dashboard",
        "includeVars": True,
        "keepTime": True,
        "tags": [],
        "targetBlank": False,
        "title": title,
        "type": "link",
        "url": f"/d/{uid}",
    }


OVERVIEW_UID = "failover-overview"
READINESS_UID = "failover-backup-readiness"


# ---------------------------------------------------------------------------
# Failover overview


def _request_error_ratio(window: str) -> str:
    """Share of logical requests that failed for the user (failure or circuit open)."""
    total = f"sum by ({POOL_L}) (rate({REQUESTS}{{{POOL}}}[{window}]))"
    bad = or_zero(
        f"sum by ({POOL_L}) (rate({REQUESTS}{{{POOL}, {BAD_OUTCOMES}}}[{window}]))",
        POOL_L,
        f"rate({REQUESTS}{{{POOL}}}[{window}])",
    )
    return f"{bad} / {total}"


def _availability_panels() -> Iterator[Json]:
    yield row("Users: is any pool failing?")
    yield stat(
        "Pool availability (probes)",
        "Share of the agent's end-to-end pool probes (through the failover client) that got an answer, over the selected time range. "
        "Question: did users of this pool get answers at all, whichever domain served them?",
        [target(f"avg by ({POOL_L}) (avg_over_time({POOL_AVAILABLE}{{{POOL}, {LOCATION}}}[$__range]))", show(POOL_L), instant=True)],
        w=6, h=6, unit="percentunit", minimum=0, maximum=1,
        steps=thresholds(RED, (0.99, ORANGE), (0.999, GREEN)),
    )
    yield stat(
        "Request success (client)",
        f"Share of logical requests ({REQUESTS}) that did not end in failure or circuit_open over the selected time range; "
        "stale and fallback answers count as served. Question: what did the client library itself see?",
        [target(f"1 - {_request_error_ratio('$__range')}", show(POOL_L), instant=True)],
        w=6, h=6, unit="percentunit", minimum=0, maximum=1,
        steps=thresholds(RED, (0.99, ORANGE), (0.999, GREEN)),
    )
    yield timeseries(
        "User-perceived availability",
        "Pool probe success and client request success over time, per pool. A dip in both means users were hit; "
        "a dip in domain probes (below) without a dip here means failover did its job.",
        [
            target(f"avg by ({POOL_L}) (avg_over_time({POOL_AVAILABLE}{{{POOL}, {LOCATION}}}[$__rate_interval]))", f"{show(POOL_L)} probes"),
            target(f"1 - {_request_error_ratio('$__rate_interval')}", f"{show(POOL_L)} requests"),
        ],
        w=12, h=6, unit="percentunit", minimum=0, maximum=1,
    )
    yield timeseries(
        "SLO error-budget burn rate",
        "How fast each pool spends its error budget (1 - $slo): 1 means the budget lasts exactly the SLO period. "
        "The alerts page at 14.4 over 1 h and 5 m, and open a ticket at 6 over 6 h and 30 m (multi-window burn rate).",
        [
            target(f"({_request_error_ratio('5m')}) / (1 - $slo)", f"{show(POOL_L)} requests 5m"),
            target(f"({_request_error_ratio('1h')}) / (1 - $slo)", f"{show(POOL_L)} requests 1h"),
            target(f"({_request_error_ratio('6h')}) / (1 - $slo)", f"{show(POOL_L)} requests 6h"),
            target(
                f"(1 - avg by ({POOL_L}) (avg_over_time({POOL_AVAILABLE}{{{POOL}, {LOCATION}}}[1h]))) / (1 - $slo)",
                f"{show(POOL_L)} probes 1h",
            ),
        ],
        w=24, h=7, unit="short", minimum=0,
        threshold_style="line+area",
        steps=thresholds(GREEN, (6, ORANGE), (14.4, RED)),
    )


def _slo_panels() -> Iterator[Json]:
    yield row("SLOs: error budget and burn rate (the rules of failover-agent rules)")
    yield stat(
        "Error budget remaining",
        f"Share of each SLO's error budget left over its window ({BUDGET_REMAINING}), for the [[slo]] tables of agent.toml "
        "once Prometheus loads the rules 'failover-agent rules' writes; below 0 the objective is missed. "
        "Question: how much failure can each pool or domain still afford this month?",
        [target(f"{BUDGET_REMAINING}{{{POOL}}}", show(SLO_L), instant=True)],
        w=8, h=7, unit="percentunit", maximum=1, decimals=1,
        steps=thresholds(RED, (0, ORANGE), (0.25, GREEN)),
    )
    pairs = [(alert.long, alert.short) for alert in BURN_ALERTS]
    rates = sorted({alert.rate for alert in BURN_ALERTS})
    yield timeseries(
        "Burn rate per SLO",
        "How many times faster than allowed each SLO spends its error budget, over the alerts' long windows "
        f"({', '.join(long for long, _ in pairs)}): 1 spends it exactly over the SLO window. "
        f"FailoverSLOErrorBudgetBurn fires when a long window and its short one ({', '.join(f'{a}/{b}' for a, b in pairs)}) "
        f"both exceed {', '.join(f'{rate:g}' for rate in reversed(rates))}. Question: will the burn-rate alerts fire, "
        "and how fast is the budget going?",
        [target(f"{semconv.slo_record(semconv.SLO_BURN_RATE, long)}{{{POOL}}}", f"{show(SLO_L)} {long}")
         for long, _ in pairs],
        w=16, h=7, unit="short", minimum=0, threshold_style="line",
        steps=thresholds(GREEN, *((rate, colour) for rate, colour in zip(rates, [YELLOW, ORANGE, ORANGE, RED], strict=True))),
    )


def _domain_panels() -> Iterator[Json]:
    yield row("Domains: which one is down, since when, from where?")
    yield state_timeline(
        "Domain probe success",
        "Pinned probe (no failover) of every domain from every location. Question: which domain is down, since when, and is it down everywhere or from one location?",
        [target(f"max by ({ORIGIN_L}, {LOCATION_L}) ({PROBE_SUCCESS}{{{AGENT}}})", f"{origin()} @ {show(LOCATION_L)}")],
        w=24, h=8, mappings=value_map((0, "down", RED), (1, "up", GREEN)),
        steps=thresholds(RED, (1, GREEN)),
    )
    yield state_timeline(
        "Probe HTTP status",
        "Status code of the last pinned probe per domain; 0 means no HTTP answer at all (DNS, connect or TLS failed).",
        [target(f"max by ({ORIGIN_L}, {LOCATION_L}) ({PROBE_STATUS}{{{AGENT}}})", f"{origin()} @ {show(LOCATION_L)}")],
        w=16, h=8, mappings=value_map((0, "no answer", RED)),
        steps=thresholds(RED, (100, GREEN), (400, ORANGE), (500, RED)),
    )
    yield stat(
        "Domains failing",
        "Per pool, the number of domains whose pinned probe fails from at least one selected location right now.",
        [target(
            f"sum by ({POOL_L}) (1 - min by ({POOL_L}, {ORIGIN_L}) ({PROBE_SUCCESS}{{{AGENT}}}))",
            show(POOL_L), instant=True,
        )],
        w=8, h=8, steps=thresholds(GREEN, (1, RED)),
    )


def _quorum_panels() -> Iterator[Json]:
    votes = location_votes("$quorum_for", AGENT, as_bool=True)
    by = f"{POOL_L}, {prometheus_label(semconv.URL_SCHEME)}, {ORIGIN_L}, {LOCATION_L}"
    yield state_timeline(
        "Quorum: each domain from each location, and the decision",
        "The quorum publisher (failover-agent control quorum) disables a domain only when at least $quorum_min "
        "locations have seen it fail for $quorum_for s. One row per domain and location: up, down, or down long "
        "enough to vote; one row per domain: the quorum's decision (what the publisher signs, before the override "
        "file and the rule that keeps one domain of every pool enabled). Set the two variables to the publisher's "
        "[control.quorum]; the queries are the publisher's own (see failover-agent control quorum --help).",
        [
            target(f"(1 - max by ({by}) ({PROBE_SUCCESS}{{{AGENT}}})) + ({votes})",
                   f"{origin()} @ {show(LOCATION_L)}"),
            target(f"3 + ({quorum_decision('$quorum_for', '$quorum_min', f'{POOL}, {DOMAIN}')})",
                   f"{origin()}: quorum"),
        ],
        w=24, h=9,
        mappings=value_map(
            (0, "up", GREEN), (1, "down", ORANGE), (2, "down for $quorum_for s: votes", RED),
            (3, "quorum: enabled", GREEN), (4, "quorum: disabled", "dark-red"),
        ),
        steps=thresholds(GREEN, (1, ORANGE), (2, RED), (3, GREEN), (4, "dark-red")),
    )


def _traffic_panels() -> Iterator[Json]:
    yield row("Traffic: which domain serves, how hard does the client work?")
    yield state_timeline(
        "Serving domain (pool probe)",
        f"Which domain answered the agent's last end-to-end pool probe ({POOL_SERVING}). Question: is traffic on the primary or on a backup, and since when?",
        [target(f"max by ({POOL_L}, {ORIGIN_L}) ({POOL_SERVING}{{{AGENT}}})", f"{show(POOL_L)}: {origin()}")],
        w=24, h=6,
        mappings=value_map((0, "standby", "text"), (1, "serving", BLUE)),
        steps=thresholds("transparent", (1, BLUE)),
    )
    yield timeseries(
        "Answered attempts per domain",
        f"Share of answered attempts ({ATTEMPTS}, result success or answer) per domain, from every client that exports metrics. Question: where does the real traffic go?",
        [target(
            f'sum by ({POOL_L}, {HOST_L}) (rate({ATTEMPTS}{{{POOL}, {DOMAIN}, {RESULT_L}=~"{"|".join(semconv.ANSWERED_RESULTS)}"}}[$__rate_interval]))',
            f"{show(POOL_L)}: {show(HOST_L)}",
        )],
        w=12, h=8, unit="percentunit", stack="percent",
    )
    yield timeseries(
        "Domain switches",
        "Failover switches per pool, from one domain to another, with the reason. Question: when did traffic move, and why?",
        [target(
            or_zero(
                f"sum by ({POOL_L}, {FROM_L}, {TO_L}, {REASON_L}) (increase({SWITCHES}{{{POOL}}}[$__rate_interval]))",
                POOL_L,
                f"{REQUESTS}{{{POOL}}}",
            ),
            f"{show(POOL_L)}: {show(FROM_L)} → {show(TO_L)} ({show(REASON_L)})",
        )],
        w=12, h=8, bars=True,
    )
    yield timeseries(
        "Attempts per logical request",
        "Attempts divided by logical requests per pool: 1 means every request succeeded on its first try. The FailoverRetriesFrequent alert fires above 1.5.",
        [target(
            f"sum by ({POOL_L}) (rate({ATTEMPTS}{{{POOL}}}[$__rate_interval])) / sum by ({POOL_L}) (rate({REQUESTS}{{{POOL}}}[$__rate_interval]))",
            show(POOL_L),
        )],
        w=12, h=8, minimum=1,
        threshold_style="line",
        steps=thresholds(GREEN, (1.5, RED)),
    )
    yield timeseries(
        "Failed attempts by error type",
        f"Rate of failed attempts per {semconv.ERROR_TYPE} (dns_error, connect_timeout, server_certificate_invalid, 503, ...). Question: what kind of failure is it?",
        [target(
            or_zero(
                f'sum by ({POOL_L}, {ERROR_L}) (rate({ATTEMPTS}{{{POOL}, {DOMAIN}, {RESULT_L}="{semconv.RESULT_FAILURE}"}}[$__rate_interval]))',
                POOL_L,
                f"rate({ATTEMPTS}{{{POOL}, {DOMAIN}}}[$__rate_interval])",
            ),
            f"{show(POOL_L)}: {show(ERROR_L)}",
        )],
        w=12, h=8, unit="reqps", bars=True, stack="normal",
    )
    yield timeseries(
        "Dropped connections sent again",
        f"Rate of attempts whose connection closed before any byte of the answer and were sent to the same domain again at once ({RESULT_L} {semconv.RESULT_DROPPED}), per domain: not counted against it, so not in the failures beside. Question: is a server closing kept-alive connections under its clients (a keep-alive timeout shorter than theirs)?",
        [target(
            or_zero(
                f'sum by ({POOL_L}, {HOST_L}) (rate({ATTEMPTS}{{{POOL}, {DOMAIN}, {RESULT_L}="{semconv.RESULT_DROPPED}"}}[$__rate_interval]))',
                POOL_L,
                f"rate({ATTEMPTS}{{{POOL}, {DOMAIN}}}[$__rate_interval])",
            ),
            f"{show(POOL_L)}: {show(HOST_L)}",
        )],
        w=12, h=8, unit="reqps",
    )


def _latency_panels() -> Iterator[Json]:
    yield row("Latency: per attempt and per probe phase")
    bucket = f"{ATTEMPT_DURATION}_bucket{{{POOL}, {DOMAIN}}}"
    yield timeseries(
        "Attempt latency percentiles",
        f"p50, p95 and p99 of every HTTP attempt ({ATTEMPT_DURATION}, OpenTelemetry semantic conventions), per pool.",
        [
            target(f"histogram_quantile({q}, sum by (le, {POOL_L}) (rate({bucket}[$__rate_interval])))", f"p{int(q * 100)} {show(POOL_L)}")
            for q in (0.5, 0.95, 0.99)
        ],
        w=12, h=8, unit="s",
    )
    yield timeseries(
        "Attempt latency p95 per domain",
        "95th percentile attempt duration per domain. Question: is one domain slow even when it answers?",
        [target(f"histogram_quantile(0.95, sum by (le, {HOST_L}) (rate({bucket}[$__rate_interval])))", show(HOST_L))],
        w=12, h=8, unit="s",
    )
    yield timeseries(
        "Probe latency per phase",
        f"Duration of each phase ({', '.join(PHASES)}) of the last pinned probe, for the slowest selected domain, "
        f"like blackbox_exporter's per-phase gauge. Question: where does the time go?",
        [target(f"max by ({PHASE_L}) ({PHASE_DURATION}{{{AGENT}}})", show(PHASE_L))],
        w=12, h=8, unit="s", stack="normal",
    )
    yield timeseries(
        "Probe total time p95 per domain",
        "95th percentile of the whole pinned probe per domain and location, over the probes of each step "
        "(the agent exports each probe's duration as a gauge, as blackbox_exporter does).",
        [target(
            f"max by ({ORIGIN_L}, {LOCATION_L}) (quantile_over_time(0.95, {PROBE_DURATION}{{{AGENT}}}[$__rate_interval]))",
            f"{origin()} @ {show(LOCATION_L)}",
        )],
        w=12, h=8, unit="s",
    )


def _slow_domain_panels() -> Iterator[Json]:
    yield row("Slow domains: hedging and slow-call ejection")
    requests = f"sum by ({POOL_L}) (rate({REQUESTS}{{{POOL}}}[$__rate_interval]))"
    sent = or_zero(
        f"sum by ({POOL_L}) (rate({HEDGES}{{{POOL}, {SENT_HEDGES}}}[$__rate_interval]))",
        POOL_L,
        f"rate({REQUESTS}{{{POOL}}}[$__rate_interval])",
    )
    yield timeseries(
        "Hedging",
        f"Left: hedged attempts per second per pool by {semconv.FAILOVER_HEDGE_OUTCOME} (won: its answer was returned; "
        "lost; cancelled: another attempt won first; throttled: due, but held back by the throttle). Right: the hedge "
        "ratio, hedges sent (all but throttled) per logical request, against the throttle $hedge_max_ratio "
        "(Hedging.max_ratio, dashed). The throttle counts hedgeable requests only, so the ratio stays below the line; "
        "throttled hedges mean it is holding hedges back. Question: does hedging buy answers (won), and at what extra load?",
        [
            target(
                or_zero(
                    f"sum by ({POOL_L}, {HEDGE_OUTCOME_L}) (rate({HEDGES}{{{POOL}}}[$__rate_interval]))",
                    POOL_L,
                    f"{REQUESTS}{{{POOL}}}",
                ),
                f"{show(POOL_L)}: {show(HEDGE_OUTCOME_L)}",
            ),
            target(f"{sent} / {requests}", f"{show(POOL_L)}: hedge ratio"),
            target(f"{requests} * 0 + $hedge_max_ratio", f"{show(POOL_L)}: throttle"),
        ],
        w=12, h=8, unit="reqps",
        overrides=[
            on_right("B", "percentunit"),
            on_right("C", "percentunit", ("custom.lineStyle", {"dash": [10, 10], "fill": "dash"})),
        ],
    )
    yield timeseries(
        "Slow calls",
        f"Left: calls slower than SlowCalls.threshold per second, per domain ({SLOW_CALLS}). Right (bars): breaker "
        f"openings caused by slow calls ({semconv.FAILOVER_REASON} {semconv.BREAKER_REASON_SLOW_CALLS}): the domain "
        "answered, but too often too slowly, so traffic moved on. Question: which domain is slow enough to be ejected?",
        [
            target(
                or_zero(
                    f"sum by ({POOL_L}, {HOST_L}) (rate({SLOW_CALLS}{{{POOL}, {DOMAIN}}}[$__rate_interval]))",
                    POOL_L,
                    f"rate({ATTEMPTS}{{{POOL}, {DOMAIN}}}[$__rate_interval])",
                ),
                f"{show(POOL_L)}: {show(HOST_L)}",
            ),
            target(
                or_zero(
                    f"sum by ({POOL_L}, {HOST_L}) (increase({BREAKER_TRANSITIONS}{{{POOL}, {DOMAIN}, {SLOW_OPENINGS}}}[$__rate_interval]))",
                    POOL_L,
                    f"{BREAKER_STATE}{{{POOL}, {DOMAIN}}}",
                ),
                f"{show(POOL_L)}: {show(HOST_L)} opened (slow calls)",
            ),
        ],
        w=12, h=8, unit="reqps",
        overrides=[on_right("B", "short", ("custom.drawStyle", "bars"), ("custom.fillOpacity", 80), ("decimals", 0))],
    )


def _breaker_panels() -> Iterator[Json]:
    yield row("Breakers and storm protection")
    yield state_timeline(
        "Breaker state",
        "Circuit breaker of every domain as the clients see it: closed, half-open (one probe allowed) or open (domain skipped without a network call).",
        [target(f"max by ({POOL_L}, {HOST_L}) ({BREAKER_STATE}{{{POOL}, {DOMAIN}}})", f"{show(POOL_L)}: {show(HOST_L)}")],
        w=24, h=7,
        mappings=value_map((0, "closed", GREEN), (1, "half-open", YELLOW), (2, "open", RED)),
        steps=thresholds(GREEN, (1, YELLOW), (2, RED)),
    )
    yield timeseries(
        "Breaker transitions",
        "Breaker transitions per domain (from → to). Many in a short window is flapping: the FailoverBreakerFlapping alert.",
        [target(
            or_zero(
                f"sum by ({POOL_L}, {HOST_L}, {BREAKER_FROM_L}, {BREAKER_TO_L}) (increase({BREAKER_TRANSITIONS}{{{POOL}, {DOMAIN}}}[$__rate_interval]))",
                POOL_L,
                f"{BREAKER_STATE}{{{POOL}, {DOMAIN}}}",
            ),
            f"{show(HOST_L)}: {show(BREAKER_FROM_L)} → {show(BREAKER_TO_L)}",
        )],
        w=12, h=8, bars=True,
    )
    yield timeseries(
        "Retry-budget rejections",
        "Retries refused by the retry budget (token bucket) per pool. Non-zero means the client stopped retrying to protect the servers from a retry storm.",
        [target(
            or_zero(
                f"sum by ({POOL_L}) (increase({BUDGET_REJECTIONS}{{{POOL}}}[$__rate_interval]))",
                POOL_L,
                f"{REQUESTS}{{{POOL}}}",
            ),
            show(POOL_L),
        )],
        w=12, h=8, bars=True,
    )


def failover_overview() -> Json:
    """The on-call dashboard: users, domains, traffic, latency, breakers."""
    panels = [*_availability_panels(), *_slo_panels(), *_domain_panels(), *_quorum_panels(), *_traffic_panels(), *_latency_panels(),
              *_slow_domain_panels(), *_breaker_panels()]
    return dashboard(
        OVERVIEW_UID,
        "Failover overview",
        "Is any pool failing for users, which domain is down since when and from where, is traffic on the backup, are breakers flapping.",
        panels,
        [
            datasource_variable(),
            pool_variable(),
            domain_variable(f"{PROBE_SUCCESS}|{ATTEMPTS}"),
            location_variable(f"{PROBE_SUCCESS}|{POOL_AVAILABLE}"),
            slo_variable(),
            *quorum_variables(),
            hedge_ratio_variable(),
        ],
        [link_to(READINESS_UID, "Backup readiness")],
    )


# ---------------------------------------------------------------------------
# Backup readiness


def _certificate_panels() -> Iterator[Json]:
    yield row("Certificates")
    expiry = f"(min by ({ORIGIN_L}) ({CERT_EXPIRY}{{{AGENT}}}) - time()) / 86400"
    yield bargauge(
        "Certificate days left",
        "Days until the earliest-expiring certificate of each https domain's chain expires (primary included), "
        "read from every pinned probe's handshake. "
        "The FailoverCertificateExpiringSoon alert fires under 14 days (the agent's default cert_warning_days).",
        [target(expiry, origin(), instant=True)],
        w=10, h=8, unit="d", steps=thresholds(RED, (7, ORANGE), (14, YELLOW), (30, GREEN)),
    )
    yield timeseries(
        "Certificate days left over time",
        "The same per day: a renewal shows as a jump up; a line heading for 0 is a renewal that did not happen.",
        [target(expiry, origin())],
        w=14, h=8, unit="d",
        threshold_style="line",
        steps=thresholds(RED, (7, ORANGE), (14, GREEN)),
    )


def _readiness_panels() -> Iterator[Json]:
    yield row("Backups: would they take the traffic today?")
    ready = value_map((0, "not ready", RED), (1, "ready", GREEN))
    yield stat(
        "Backups not ready",
        "Per pool, the number of domains failing at least one readiness check (cert, cors or health) right now.",
        [target(
            f"sum by ({POOL_L}) (1 - min by ({POOL_L}, {ORIGIN_L}) ({READY}{{{AGENT}}}))",
            show(POOL_L), instant=True,
        )],
        w=6, h=8, steps=thresholds(GREEN, (1, RED)),
    )
    yield state_timeline(
        "Readiness per check",
        "Every readiness check of every backup: cert (valid for longer than the warning days), cors (same preflight answer as the primary), health (same health answer as the primary).",
        [target(f"min by ({ORIGIN_L}, {CHECK_L}) ({READY}{{{AGENT}}})", f"{origin()} {show(CHECK_L)}")],
        w=18, h=8, mappings=ready, steps=thresholds(RED, (1, GREEN)),
    )
    yield state_timeline(
        "CORS parity with the primary",
        "Whether each backup answers the CORS preflight for every configured origin exactly like the primary. Question: would browsers break after a failover?",
        [target(f'min by ({ORIGIN_L}, {LOCATION_L}) ({READY}{{{AGENT}, {CHECK_L}="{semconv.CHECK_CORS}"}})', f"{origin()} @ {show(LOCATION_L)}")],
        w=12, h=7, mappings=ready, steps=thresholds(RED, (1, GREEN)),
    )
    yield state_timeline(
        "Health parity with the primary",
        "Whether each backup's health endpoint gives the same status and configured JSON field as the primary. Question: is the backup running the same thing?",
        [target(f'min by ({ORIGIN_L}, {LOCATION_L}) ({READY}{{{AGENT}, {CHECK_L}="{semconv.CHECK_HEALTH}"}})', f"{origin()} @ {show(LOCATION_L)}")],
        w=12, h=7, mappings=ready, steps=thresholds(RED, (1, GREEN)),
    )


def _control_panels() -> Iterator[Json]:
    yield row("Control document")
    yield stat(
        "Control document version",
        "Version of the signed control document the agent serves at /control.json (clients only accept increasing versions).",
        [target(f"max by ({POOL_L}) ({CONTROL_VERSION}{{{POOL}, {LOCATION}}})", show(POOL_L), instant=True)],
        w=6, h=7, unit="none", decimals=0, steps=thresholds(BLUE),
    )
    yield stat(
        "Control document age",
        "Time since the current control document was issued. Question: is the agent still publishing? An old document eventually expires and clients ignore it.",
        [target(f"time() - max by ({POOL_L}) ({CONTROL_ISSUED}{{{POOL}, {LOCATION}}})", show(POOL_L), instant=True)],
        w=6, h=7, unit="s", steps=thresholds(GREEN, (300, ORANGE), (3600, RED)),
    )
    yield state_timeline(
        "Domains disabled by the control document",
        "Which domains the control document tells clients to skip (dead from the agent's location, or disabled by the operator's override file).",
        [target(f"max by ({POOL_L}, {ORIGIN_L}) ({CONTROL_DISABLED}{{{AGENT}}})", f"{show(POOL_L)}: {origin()}")],
        w=12, h=7,
        mappings=value_map((0, "enabled", GREEN), (1, "disabled", RED)),
        steps=thresholds(GREEN, (1, RED)),
    )


def backup_readiness() -> Json:
    """Would the backups work on the day they are needed?"""
    return dashboard(
        READINESS_UID,
        "Backup readiness",
        "Certificates, CORS and health parity of the backups with their primary, and the control document the agent publishes.",
        [*_certificate_panels(), *_readiness_panels(), *_control_panels()],
        [
            datasource_variable(),
            pool_variable(),
            domain_variable(f"{READY}|{CERT_EXPIRY}"),
            location_variable(f"{READY}|{CERT_EXPIRY}"),
        ],
        [link_to(OVERVIEW_UID, "Failover overview")],
    )


# ---------------------------------------------------------------------------
# Files

DASHBOARDS = {
    "failover-overview.json": failover_overview,
    "backup-readiness.json": backup_readiness,
}


def demo_slo_rules() -> str:
    """The rules ``failover-agent rules`` writes for the demo's [[slo]] tables (the stack loads
    them, so the SLO row shows the demo's budgets)."""
    config = demo_config(Path("control.key"), "127.0.0.1:9464", None)
    return render_rules(rule_groups(config), source="the demo (failover-agent demo)")


RULES = {"slo-demo.yml": demo_slo_rules}
FILES = [*DASHBOARDS, *RULES]


def render(name: str) -> str:
    """The exact text of the committed file ``name``."""
    if name in RULES:
        return RULES[name]()
    return json.dumps(DASHBOARDS[name](), indent=2, ensure_ascii=False) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="exit 1 if a committed file is out of date")
    parser.add_argument("--out", type=Path, default=HERE, help="directory to write to (default: dashboards/)")
    args = parser.parse_args(argv)
    stale = []
    for name in FILES:
        path = args.out / name
        text = render(name)
        if args.check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                stale.append(name)
        else:
            path.write_text(text, encoding="utf-8")
    if stale:
        print(f"out of date: {', '.join(stale)}; run python dashboards/generate.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
