"""Generate the Grafana dashboards of pytest-failover from plain Python dicts.

Run ``python dashboards/generate.py`` after editing this file: it rewrites
``failover-overview.json`` and ``backup-readiness.json`` next to it.
``python dashboards/generate.py --check`` exits 1 when a committed file differs
from what this generator produces (the test suite runs the same comparison).

Conventions every panel follows (tests/dashboards check them):

- classic dashboard JSON (``schemaVersion`` 39), the Prometheus data source is the
  ``${datasource}`` variable, so the files import into any Grafana unchanged;
- variables ``pool`` (``failover_pool``), ``domain`` (``server_address``, the
  domain's host) and ``location`` (``probe_location``), multi-value with "All"
  meaning ``.*``; every query filters with ``=~"$pool"`` etc.;
- a query never depends on an event having happened: counters that only exist
  after their first increment are ``or``-ed with a zero vector per pool, so a
  panel shows 0 instead of "No data" on a calm day.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

__all__ = ["DASHBOARDS", "backup_readiness", "failover_overview", "main", "render"]

Json = dict[str, Any]

HERE = Path(__file__).resolve().parent
SCHEMA_VERSION = 39
DATASOURCE: Json = {"type": "prometheus", "uid": "${datasource}"}

# Label filters shared by the queries (Grafana substitutes the variables).
POOL = 'failover_pool=~"$pool"'
DOMAIN = 'server_address=~"$domain"'
LOCATION = 'probe_location=~"$location"'
AGENT = f"{POOL}, {DOMAIN}, {LOCATION}"  # agent metrics carry all three
BAD_OUTCOMES = 'failover_outcome=~"failure|circuit_open"'

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


def slo_variable() -> Json:
    values = ["0.999", "0.995", "0.99", "0.9999"]
    return {
        "current": {"selected": True, "text": values[0], "value": values[0]},
        "description": "Availability objective of a pool; burn rate 1 spends the error budget exactly in the SLO window.",
        "hide": 0,
        "includeAll": False,
        "label": "SLO",
        "multi": False,
        "name": "slo",
        "options": [{"selected": v == values[0], "text": v, "value": v} for v in values],
        "query": ",".join(values),
        "type": "custom",
    }


def pool_variable() -> Json:
    return query_variable(
        "pool",
        "Pool",
        'label_values({__name__=~"failover_pool_available|failover_requests_total"}, failover_pool)',
        "Failover pool (failover_pool), from agent probes and client metrics.",
    )


def domain_variable(names: str) -> Json:
    return query_variable(
        "domain",
        "Domain",
        f'label_values({{__name__=~"{names}", {POOL}}}, server_address)',
        "Domain host (server_address) of the selected pools.",
    )


def location_variable(names: str) -> Json:
    return query_variable(
        "location",
        "Location",
        f'label_values({{__name__=~"{names}", {POOL}}}, probe_location)',
        "Where the agent probes from (probe_location).",
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
    total = f"sum by (failover_pool) (rate(failover_requests_total{{{POOL}}}[{window}]))"
    bad = or_zero(
        f"sum by (failover_pool) (rate(failover_requests_total{{{POOL}, {BAD_OUTCOMES}}}[{window}]))",
        "failover_pool",
        f"rate(failover_requests_total{{{POOL}}}[{window}])",
    )
    return f"{bad} / {total}"


def _availability_panels() -> Iterator[Json]:
    yield row("Users: is any pool failing?")
    yield stat(
        "Pool availability (probes)",
        "Share of the agent's end-to-end pool probes (through the failover client) that got an answer, over the selected time range. "
        "Question: did users of this pool get answers at all, whichever domain served them?",
        [target(f"avg by (failover_pool) (avg_over_time(failover_pool_available{{{POOL}, {LOCATION}}}[$__range]))", "{{failover_pool}}", instant=True)],
        w=6, h=6, unit="percentunit", minimum=0, maximum=1,
        steps=thresholds(RED, (0.99, ORANGE), (0.999, GREEN)),
    )
    yield stat(
        "Request success (client)",
        "Share of logical requests (failover_requests_total) that did not end in failure or circuit_open over the selected time range; "
        "stale and fallback answers count as served. Question: what did the client library itself see?",
        [target(f"1 - {_request_error_ratio('$__range')}", "{{failover_pool}}", instant=True)],
        w=6, h=6, unit="percentunit", minimum=0, maximum=1,
        steps=thresholds(RED, (0.99, ORANGE), (0.999, GREEN)),
    )
    yield timeseries(
        "User-perceived availability",
        "Pool probe success and client request success over time, per pool. A dip in both means users were hit; "
        "a dip in domain probes (below) without a dip here means failover did its job.",
        [
            target(f"avg by (failover_pool) (avg_over_time(failover_pool_available{{{POOL}, {LOCATION}}}[$__rate_interval]))", "{{failover_pool}} probes"),
            target(f"1 - {_request_error_ratio('$__rate_interval')}", "{{failover_pool}} requests"),
        ],
        w=12, h=6, unit="percentunit", minimum=0, maximum=1,
    )
    yield timeseries(
        "SLO error-budget burn rate",
        "How fast each pool spends its error budget (1 - $slo): 1 means the budget lasts exactly the SLO period. "
        "The alerts page at 14.4 over 1 h and 5 m, and open a ticket at 6 over 6 h and 30 m (multi-window burn rate).",
        [
            target(f"({_request_error_ratio('5m')}) / (1 - $slo)", "{{failover_pool}} requests 5m"),
            target(f"({_request_error_ratio('1h')}) / (1 - $slo)", "{{failover_pool}} requests 1h"),
            target(f"({_request_error_ratio('6h')}) / (1 - $slo)", "{{failover_pool}} requests 6h"),
            target(
                f"(1 - avg by (failover_pool) (avg_over_time(failover_pool_available{{{POOL}, {LOCATION}}}[1h]))) / (1 - $slo)",
                "{{failover_pool}} probes 1h",
            ),
        ],
        w=24, h=7, unit="short", minimum=0,
        threshold_style="line+area",
        steps=thresholds(GREEN, (6, ORANGE), (14.4, RED)),
    )


def _domain_panels() -> Iterator[Json]:
    yield row("Domains: which one is down, since when, from where?")
    yield state_timeline(
        "Domain probe success",
        "Pinned probe (no failover) of every domain from every location. Question: which domain is down, since when, and is it down everywhere or from one location?",
        [target(f"max by (server_address, probe_location) (failover_probe_success{{{AGENT}}})", "{{server_address}} @ {{probe_location}}")],
        w=24, h=8, mappings=value_map((0, "down", RED), (1, "up", GREEN)),
        steps=thresholds(RED, (1, GREEN)),
    )
    yield state_timeline(
        "Probe HTTP status",
        "Status code of the last pinned probe per domain; 0 means no HTTP answer at all (DNS, connect or TLS failed).",
        [target(f"max by (server_address, probe_location) (failover_probe_status_code{{{AGENT}}})", "{{server_address}} @ {{probe_location}}")],
        w=16, h=8, mappings=value_map((0, "no answer", RED)),
        steps=thresholds(RED, (100, GREEN), (400, ORANGE), (500, RED)),
    )
    yield stat(
        "Domains failing",
        "Per pool, the number of domains whose pinned probe fails from at least one selected location right now.",
        [target(
            f"sum by (failover_pool) (1 - min by (failover_pool, server_address) (failover_probe_success{{{AGENT}}}))",
            "{{failover_pool}}", instant=True,
        )],
        w=8, h=8, steps=thresholds(GREEN, (1, RED)),
    )


def _traffic_panels() -> Iterator[Json]:
    yield row("Traffic: which domain serves, how hard does the client work?")
    yield state_timeline(
        "Serving domain (pool probe)",
        "Which domain answered the agent's last end-to-end pool probe (failover_pool_serving). Question: is traffic on the primary or on a backup, and since when?",
        [target(f"max by (failover_pool, server_address) (failover_pool_serving{{{AGENT}}})", "{{failover_pool}}: {{server_address}}")],
        w=24, h=6,
        mappings=value_map((0, "standby", "text"), (1, "serving", BLUE)),
        steps=thresholds("transparent", (1, BLUE)),
    )
    yield timeseries(
        "Answered attempts per domain",
        "Share of answered attempts (failover_attempts_total, result success or answer) per domain, from every client that exports metrics. Question: where does the real traffic go?",
        [target(
            f'sum by (failover_pool, server_address) (rate(failover_attempts_total{{{POOL}, {DOMAIN}, failover_attempt_result=~"success|answer"}}[$__rate_interval]))',
            "{{failover_pool}}: {{server_address}}",
        )],
        w=12, h=8, unit="percentunit", stack="percent",
    )
    yield timeseries(
        "Domain switches",
        "Failover switches per pool, from one domain to another, with the reason. Question: when did traffic move, and why?",
        [target(
            or_zero(
                f"sum by (failover_pool, failover_from, failover_to, failover_reason) (increase(failover_switches_total{{{POOL}}}[$__rate_interval]))",
                "failover_pool",
                f"failover_requests_total{{{POOL}}}",
            ),
            "{{failover_pool}}: {{failover_from}} → {{failover_to}} ({{failover_reason}})",
        )],
        w=12, h=8, bars=True,
    )
    yield timeseries(
        "Attempts per logical request",
        "Attempts divided by logical requests per pool: 1 means every request succeeded on its first try. The FailoverRetriesFrequent alert fires above 1.5.",
        [target(
            f"sum by (failover_pool) (rate(failover_attempts_total{{{POOL}}}[$__rate_interval])) / sum by (failover_pool) (rate(failover_requests_total{{{POOL}}}[$__rate_interval]))",
            "{{failover_pool}}",
        )],
        w=12, h=8, minimum=1,
        threshold_style="line",
        steps=thresholds(GREEN, (1.5, RED)),
    )
    yield timeseries(
        "Failed attempts by error type",
        "Rate of failed attempts per error.type (dns_error, connect_timeout, server_certificate_invalid, 503, ...). Question: what kind of failure is it?",
        [target(
            or_zero(
                f'sum by (failover_pool, error_type) (rate(failover_attempts_total{{{POOL}, {DOMAIN}, failover_attempt_result="failure"}}[$__rate_interval]))',
                "failover_pool",
                f"rate(failover_attempts_total{{{POOL}, {DOMAIN}}}[$__rate_interval])",
            ),
            "{{failover_pool}}: {{error_type}}",
        )],
        w=12, h=8, unit="reqps", bars=True, stack="normal",
    )


def _latency_panels() -> Iterator[Json]:
    yield row("Latency: per attempt and per probe phase")
    bucket = f"http_client_request_duration_seconds_bucket{{{POOL}, {DOMAIN}}}"
    yield timeseries(
        "Attempt latency percentiles",
        "p50, p95 and p99 of every HTTP attempt (http_client_request_duration_seconds, OpenTelemetry semantic conventions), per pool.",
        [
            target(f"histogram_quantile({q}, sum by (le, failover_pool) (rate({bucket}[$__rate_interval])))", f"p{int(q * 100)} {{{{failover_pool}}}}")
            for q in (0.5, 0.95, 0.99)
        ],
        w=12, h=8, unit="s",
    )
    yield timeseries(
        "Attempt latency p95 per domain",
        "95th percentile attempt duration per domain. Question: is one domain slow even when it answers?",
        [target(f"histogram_quantile(0.95, sum by (le, server_address) (rate({bucket}[$__rate_interval])))", "{{server_address}}")],
        w=12, h=8, unit="s",
    )
    probe = f"failover_probe_duration_seconds_bucket{{{AGENT}"
    yield timeseries(
        "Probe latency p95 per phase",
        "95th percentile of the pinned probes per phase (dns, connect, tls, ttfb, transfer), like blackbox_exporter. Question: where does the time go?",
        [target(f'histogram_quantile(0.95, sum by (le, phase) (rate({probe}, phase!="total"}}[$__rate_interval])))', "{{phase}}")],
        w=12, h=8, unit="s",
    )
    yield timeseries(
        "Probe total time p95 per domain",
        "95th percentile of the whole pinned probe per domain and location.",
        [target(
            f'histogram_quantile(0.95, sum by (le, server_address, probe_location) (rate({probe}, phase="total"}}[$__rate_interval])))',
            "{{server_address}} @ {{probe_location}}",
        )],
        w=12, h=8, unit="s",
    )


def _breaker_panels() -> Iterator[Json]:
    yield row("Breakers and storm protection")
    yield state_timeline(
        "Breaker state",
        "Circuit breaker of every domain as the clients see it: closed, half-open (one probe allowed) or open (domain skipped without a network call).",
        [target(f"max by (failover_pool, server_address) (failover_breaker_state{{{POOL}, {DOMAIN}}})", "{{failover_pool}}: {{server_address}}")],
        w=24, h=7,
        mappings=value_map((0, "closed", GREEN), (1, "half-open", YELLOW), (2, "open", RED)),
        steps=thresholds(GREEN, (1, YELLOW), (2, RED)),
    )
    yield timeseries(
        "Breaker transitions",
        "Breaker transitions per domain (from → to). Many in a short window is flapping: the FailoverBreakerFlapping alert.",
        [target(
            or_zero(
                f"sum by (failover_pool, server_address, failover_breaker_from, failover_breaker_to) (increase(failover_breaker_transitions_total{{{POOL}, {DOMAIN}}}[$__rate_interval]))",
                "failover_pool",
                f"failover_breaker_state{{{POOL}, {DOMAIN}}}",
            ),
            "{{server_address}}: {{failover_breaker_from}} → {{failover_breaker_to}}",
        )],
        w=12, h=8, bars=True,
    )
    yield timeseries(
        "Retry-budget rejections",
        "Retries refused by the retry budget (token bucket) per pool. Non-zero means the client stopped retrying to protect the servers from a retry storm.",
        [target(
            or_zero(
                f"sum by (failover_pool) (increase(failover_retry_budget_rejections_total{{{POOL}}}[$__rate_interval]))",
                "failover_pool",
                f"failover_requests_total{{{POOL}}}",
            ),
            "{{failover_pool}}",
        )],
        w=12, h=8, bars=True,
    )


def failover_overview() -> Json:
    """The on-call dashboard: users, domains, traffic, latency, breakers."""
    panels = [*_availability_panels(), *_domain_panels(), *_traffic_panels(), *_latency_panels(), *_breaker_panels()]
    return dashboard(
        OVERVIEW_UID,
        "Failover overview",
        "Is any pool failing for users, which domain is down since when and from where, is traffic on the backup, are breakers flapping.",
        panels,
        [
            datasource_variable(),
            pool_variable(),
            domain_variable("failover_probe_success|failover_attempts_total"),
            location_variable("failover_probe_success|failover_pool_available"),
            slo_variable(),
        ],
        [link_to(READINESS_UID, "Backup readiness")],
    )


# ---------------------------------------------------------------------------
# Backup readiness


def _certificate_panels() -> Iterator[Json]:
    yield row("Certificates")
    expiry = f"min by (server_address, tls_cert) (failover_tls_cert_expiry_seconds{{{AGENT}}}) / 86400"
    yield bargauge(
        "Certificate days left",
        "Days until the leaf certificate and the earliest-expiring certificate of the chain expire, per domain. "
        "The FailoverCertificateExpiringSoon alert fires under 14 days (the agent's default cert_warning_days).",
        [target(expiry, "{{server_address}} ({{tls_cert}})", instant=True)],
        w=10, h=8, unit="d", steps=thresholds(RED, (7, ORANGE), (14, YELLOW), (30, GREEN)),
    )
    yield timeseries(
        "Certificate days left over time",
        "The same per day: a renewal shows as a jump up; a line heading for 0 is a renewal that did not happen.",
        [target(expiry, "{{server_address}} ({{tls_cert}})")],
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
            f"sum by (failover_pool) (1 - min by (failover_pool, server_address) (failover_readiness_ready{{{AGENT}}}))",
            "{{failover_pool}}", instant=True,
        )],
        w=6, h=8, steps=thresholds(GREEN, (1, RED)),
    )
    yield state_timeline(
        "Readiness per check",
        "Every readiness check of every backup: cert (valid for longer than the warning days), cors (same preflight answer as the primary), health (same health answer as the primary).",
        [target(f"min by (server_address, check) (failover_readiness_ready{{{AGENT}}})", "{{server_address}} {{check}}")],
        w=18, h=8, mappings=ready, steps=thresholds(RED, (1, GREEN)),
    )
    yield state_timeline(
        "CORS parity with the primary",
        "Whether each backup answers the CORS preflight for every configured origin exactly like the primary. Question: would browsers break after a failover?",
        [target(f'min by (server_address, probe_location) (failover_readiness_ready{{{AGENT}, check="cors"}})', "{{server_address}} @ {{probe_location}}")],
        w=12, h=7, mappings=ready, steps=thresholds(RED, (1, GREEN)),
    )
    yield state_timeline(
        "Health parity with the primary",
        "Whether each backup's health endpoint gives the same status and configured JSON field as the primary. Question: is the backup running the same thing?",
        [target(f'min by (server_address, probe_location) (failover_readiness_ready{{{AGENT}, check="health"}})', "{{server_address}} @ {{probe_location}}")],
        w=12, h=7, mappings=ready, steps=thresholds(RED, (1, GREEN)),
    )


def _control_panels() -> Iterator[Json]:
    yield row("Control document")
    yield stat(
        "Control document version",
        "Version of the signed control document the agent serves at /control.json (clients only accept increasing versions).",
        [target(f"max by (failover_pool) (failover_control_version{{{POOL}, {LOCATION}}})", "{{failover_pool}}", instant=True)],
        w=6, h=7, unit="none", decimals=0, steps=thresholds(BLUE),
    )
    yield stat(
        "Control document age",
        "Time since the current control document was issued. Question: is the agent still publishing? An old document eventually expires and clients ignore it.",
        [target(f"time() - max by (failover_pool) (failover_control_issued_timestamp_seconds{{{POOL}, {LOCATION}}})", "{{failover_pool}}", instant=True)],
        w=6, h=7, unit="s", steps=thresholds(GREEN, (300, ORANGE), (3600, RED)),
    )
    yield state_timeline(
        "Domains disabled by the control document",
        "Which domains the control document tells clients to skip (dead from the agent's location, or disabled by the operator's override file).",
        [target(f"max by (failover_pool, server_address) (failover_control_domain_disabled{{{AGENT}}})", "{{failover_pool}}: {{server_address}}")],
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
            domain_variable("failover_readiness_ready|failover_tls_cert_expiry_seconds"),
            location_variable("failover_readiness_ready|failover_tls_cert_expiry_seconds"),
        ],
        [link_to(OVERVIEW_UID, "Failover overview")],
    )


# ---------------------------------------------------------------------------
# Files

DASHBOARDS = {
    "failover-overview.json": failover_overview,
    "backup-readiness.json": backup_readiness,
}


def render(name: str) -> str:
    """The exact text of the committed file ``name``."""
    return json.dumps(DASHBOARDS[name](), indent=2, ensure_ascii=False) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="exit 1 if a committed file is out of date")
    parser.add_argument("--out", type=Path, default=HERE, help="directory to write to (default: dashboards/)")
    args = parser.parse_args(argv)
    stale = []
    for name in DASHBOARDS:
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
