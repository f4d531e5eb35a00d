"""Prometheus rules for the ``[[slo]]`` tables of ``agent.toml`` (``failover-agent rules``).

Rules and theory of operation
-----------------------------
An SLO asks that a share of events be good over a window: ``objective = 99.9`` over ``30d``
leaves an *error budget* of 0.1 % of the window's events. The *burn rate* over a shorter
window is the error ratio there divided by the budget: at 1 the budget lasts exactly the SLO
window, at 14.4 a 30-day budget is gone in about two days.

The alerts are the multiwindow, multi-burn-rate alerts of Google's SRE Workbook (chapter 5,
"Alerting on SLOs"), the table :data:`BURN_ALERTS`, as Sloth and Pyrra generate them:

=========  ===========  ============  ========  =====================================
burn rate  long window  short window  severity  budget spent in the long window (30d)
=========  ===========  ============  ========  =====================================
14.4       1h           5m            page      2 %
6          6h           30m           page      5 %
3          1d           2h            ticket    10 %
1          3d           6h            ticket    10 %
=========  ===========  ============  ========  =====================================

An alert fires while *both* windows burn faster than its rate: the long window says that
enough budget is gone to matter, the short one that it is still going, so the alert
resolves minutes after the fix instead of hours. There is no ``for:``; the windows are the
delay. A blip too short to spend the budget's share fires nothing.

The indicator (``SloConfig.kind``) picks the events, from series the agent already exports:

- ``availability`` (a pool): the agent's pool probes through the real failover client,
  ``failover.requests`` with ``probe.location`` set (applications' own clients do not set
  it); bad: :data:`~pytest_failover.semconv.BAD_OUTCOMES`. Every location counts.
- ``probe`` (a domain): the samples of its pinned probe's ``failover.probe.success``, from
  every location; bad: a 0. Planned maintenance is left out (below).

Maintenance and the error budget
--------------------------------
A domain's probes fail during its maintenance window, by design. Those samples are *left out*
of the probe SLO, neither good nor bad: its 5m error ratio has no sample while
``failover_maintenance_active == 1`` for the domain (from any location) within those 5
minutes, and every longer window's ratio is the mean of the 5m ratios in it, so the gaps stay
gaps. Silencing the alerts instead (``unless on (...)`` on each alert) would be wrong for a
budget: the failures would still be spent from ``slo:error_budget_remaining:ratio``, and the
long windows (1h to 3d) would still hold them when the window ends, so the pages and
tickets would fire right after planned work for no new failure. Leaving them out keeps the
budget for what users were not told about. The cost: up to 5 minutes of good samples next
to a window are left out too, and the rules must be evaluated at least every 5 minutes
(Prometheus' default is 1 minute) for the 5m ratios to cover every sample. The
``availability`` SLO leaves nothing out: it is what users of the pool see, maintenance or
not.

Per SLO, one rule group (``failover-slo-NAME``), every series labelled ``slo="NAME"`` and
with the pool (and the domain's ``url_scheme``, ``server_address``, ``server_port``):

- ``slo:failover_requests_errors:ratio_rateW`` or ``slo:failover_probe_errors:ratio_rateW``,
  the error ratio over each window ``W`` of :data:`WINDOWS` (a probe's: from its 5m ratios);
- ``slo:burn_rate:ratio_rateW``: that ratio divided by the budget;
- ``slo:error_budget_remaining:ratio``: 1 minus the SLO window's error ratio (the mean of the
  5m ratios, as Sloth computes it: one sample per evaluation instead of every scrape) over
  the budget; 0 or below: spent;
- the alert ``FailoverSLOErrorBudgetBurn`` per row of the table, labelled ``severity``,
  ``long_window`` and ``short_window``;
- for a pool's ``availability`` SLO, ``failover:slo_configured`` (1, with the pool): the
  shipped ``FailoverPoolErrorBudgetBurnFast`` / ``Slow`` alerts of ``dashboards/alerts.yml``
  (a fixed 99.9 % over every request of the pool, applications' too) end in ``unless on
  (failover_pool) failover:slo_configured``, so a pool with its own SLO pages once, by its
  own objective, not twice. A domain's ``probe`` SLO leaves them be: it is not the pool's.

Everything here is a value: :func:`rule_groups` turns a configuration into frozen
dataclasses, :func:`render` into the YAML file (PyYAML, imported when called).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pytest_failover import semconv
from pytest_failover.semconv import prometheus_label, slo_record

from .durations import seconds

if TYPE_CHECKING:
    from .config import AgentConfig, SloConfig

__all__ = [
    "ALERT_NAME",
    "BURN_ALERTS",
    "FASTEST_RATE",
    "LONGEST_WINDOW",
    "WINDOWS",
    "AlertingRule",
    "BurnAlert",
    "RecordingRule",
    "RuleGroup",
    "render",
    "rule_groups",
]

ALERT_NAME = "FailoverSLOErrorBudgetBurn"


@dataclass(frozen=True, slots=True, kw_only=True)
class BurnAlert:
    """One row of the Workbook's table: alert when both windows burn faster than ``rate``."""

    rate: float
    long: str
    short: str
    severity: str

    def __post_init__(self) -> None:
        if self.severity not in semconv.SEVERITIES:
            raise ValueError(f"severity {self.severity!r} is not one of {semconv.SEVERITIES}")
        if _rule_window(self.short) >= _rule_window(self.long):
            raise ValueError(f"short window {self.short} is not shorter than long window {self.long}")


def _rule_window(window: str) -> int:
    """Seconds of one of the alerts' own windows (``5m`` .. ``3d``)."""
    return seconds(window, "rules.window")


BURN_ALERTS: tuple[BurnAlert, ...] = (
    BurnAlert(rate=14.4, long="1h", short="5m", severity=semconv.SEVERITY_PAGE),
    BurnAlert(rate=6, long="6h", short="30m", severity=semconv.SEVERITY_PAGE),
    BurnAlert(rate=3, long="1d", short="2h", severity=semconv.SEVERITY_TICKET),
    BurnAlert(rate=1, long="3d", short="6h", severity=semconv.SEVERITY_TICKET),
)
"""The SRE Workbook's multiwindow, multi-burn-rate alerts (chapter 5, table 5-8 and the
ticket rows of Sloth and Pyrra)."""

WINDOWS: tuple[str, ...] = tuple(sorted({w for a in BURN_ALERTS for w in (a.long, a.short)}, key=_rule_window))
"""Every window an alert reads, shortest first: 5m, 30m, 1h, 2h, 6h, 1d, 3d."""

FASTEST_RATE = max(a.rate for a in BURN_ALERTS)
"""An objective must leave a budget that this rate can burn (an error ratio up to 100 %)."""
LONGEST_WINDOW = max((a.long for a in BURN_ALERTS), key=_rule_window)
"""An SLO window must be longer than the slowest alert's long window."""

_POOL = prometheus_label(semconv.FAILOVER_POOL)
_LOCATION = prometheus_label(semconv.PROBE_LOCATION)
_OUTCOME = prometheus_label(semconv.FAILOVER_OUTCOME)
_ORIGIN = tuple(prometheus_label(key) for key in (semconv.URL_SCHEME, semconv.SERVER_ADDRESS, semconv.SERVER_PORT))
_REQUESTS = semconv.METRICS[semconv.FAILOVER_REQUESTS].prometheus
_PROBE_SUCCESS = semconv.METRICS[semconv.FAILOVER_PROBE_SUCCESS].prometheus
_MAINTENANCE = semconv.METRICS[semconv.FAILOVER_MAINTENANCE_ACTIVE].prometheus


@dataclass(frozen=True, slots=True, kw_only=True)
class RecordingRule:
    record: str
    expr: str
    labels: dict[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"record": self.record, "expr": self.expr, "labels": dict(self.labels)}


@dataclass(frozen=True, slots=True, kw_only=True)
class AlertingRule:
    alert: str
    expr: str
    labels: dict[str, str]
    annotations: dict[str, str]

    def as_dict(self) -> dict[str, Any]:
        return {"alert": self.alert, "expr": self.expr, "labels": dict(self.labels),
                "annotations": dict(self.annotations)}


@dataclass(frozen=True, slots=True, kw_only=True)
class RuleGroup:
    name: str
    rules: tuple[RecordingRule | AlertingRule, ...]

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "rules": [rule.as_dict() for rule in self.rules]}


def _string(value: str) -> str:
    """A PromQL string literal (Go's escapes, which JSON's are a subset of)."""
    return json.dumps(value)


def _matchers(pairs: Sequence[tuple[str, str, str]]) -> str:
    return "{" + ", ".join(f"{label}{op}{_string(value)}" for label, op, value in pairs) + "}"


def _error_ratio(slo: SloConfig, window: str) -> str:
    """The indicator's error ratio over ``window``, by the pool (and the domain's origin); a
    probe's from its 5m ratios, which leave out maintenance (the module docstring)."""
    pool = (_POOL, "=", slo.pool)
    if slo.domain is None:
        by = _POOL
        agent = (_LOCATION, "!=", "")  # the agent's pool probes, not applications' clients
        every = f"{_REQUESTS}{_matchers([pool, agent])}"
        bad = f"{_REQUESTS}{_matchers([pool, agent, (_OUTCOME, '=~', '|'.join(semconv.BAD_OUTCOMES))])}"
        total = f"sum by ({by}) (rate({every}[{window}]))"
        # a bad outcome's counter exists only after its first increment: no series means 0 errors
        return f"(sum by ({by}) (rate({bad}[{window}])) or {total} * 0) / {total}"
    # imported here: the config module imports this one, and metrics (through the checks) it
    from .metrics import origin_attributes

    shortest = WINDOWS[0]
    if window != shortest:  # the mean of the 5m ratios: a window in maintenance stays a gap
        select = _matchers([(semconv.SLO_LABEL, "=", slo.label)])
        return f"avg_over_time({slo_record(semconv.SLO_PROBE_ERRORS, shortest)}{select}[{window}])"
    origin = origin_attributes(slo.domain)
    by = ", ".join((_POOL, *_ORIGIN))
    keys = (semconv.URL_SCHEME, semconv.SERVER_ADDRESS, semconv.SERVER_PORT)
    domain = _matchers([pool, *((prometheus_label(k), '=', str(origin[k])) for k in keys)])
    samples = f"{_PROBE_SUCCESS}{domain}"
    return (f"(1 - sum by ({by}) (sum_over_time({samples}[{window}]))"
            f" / sum by ({by}) (count_over_time({samples}[{window}])))"
            f" unless on ({by}) max_over_time({_MAINTENANCE}{domain}[{window}]) == 1")


def _budget(slo: SloConfig) -> float:
    return round((100 - slo.objective) / 100, 12)


def _what(slo: SloConfig) -> str:
    """The alert's subject, from the series' labels (Go template)."""
    pool = f"pool {{{{ $labels.{_POOL} }}}}"
    if slo.domain is None:
        return f"{pool} (end-to-end requests through the failover client)"
    scheme, host, port = (f"{{{{ $labels.{label} }}}}" for label in _ORIGIN)
    return f"domain {scheme}://{host}:{port} of {pool} (pinned probes)"


def _alert(slo: SloConfig, row: BurnAlert, select: str) -> AlertingRule:
    burn = semconv.SLO_BURN_RATE
    expr = (f"{slo_record(burn, row.long)}{select} > {row.rate:g}"
            f" and {slo_record(burn, row.short)}{select} > {row.rate:g}")
    spent = row.rate * _rule_window(row.long) / seconds(slo.window, "slo.window")
    lasts = seconds(slo.window, "slo.window") / row.rate / 86_400
    slo_label = f"{{{{ $labels.{semconv.SLO_LABEL} }}}}"
    return AlertingRule(
        alert=ALERT_NAME,
        expr=expr,
        labels={semconv.SEVERITY_LABEL: row.severity, semconv.SLO_LABEL: slo.label,
                "long_window": row.long, "short_window": row.short},
        annotations={
            "summary": f"SLO {slo_label} burns its error budget {row.rate:g}x as fast as it may "
                       f"(over {row.long} and {row.short})",
            "description": (
                f"{_what(slo)}: over the last {row.long} the error budget ({100 - slo.objective:.4g} % of events "
                f"may fail) burns {{{{ $value | printf \"%.1f\" }}}}x as fast as the SLO allows, and over "
                f"{row.rate:g}x over the last {row.short} too. At {row.rate:g}x the {slo.window} budget of SLO "
                f"{slo_label} (objective {slo.objective:g} %) lasts {lasts:.3g} days: {row.long} spends "
                f"{spent * 100:.3g} % of it. See the SLO row of the Failover overview dashboard."
            ),
        },
    )


def _group(slo: SloConfig) -> RuleGroup:
    name = slo.label
    labels = {semconv.SLO_LABEL: name}
    select = _matchers([(semconv.SLO_LABEL, "=", name)])
    errors = semconv.SLO_PROBE_ERRORS if slo.domain is not None else semconv.SLO_REQUEST_ERRORS
    budget = _budget(slo)
    rules: list[RecordingRule | AlertingRule] = [
        RecordingRule(record=slo_record(errors, w), expr=_error_ratio(slo, w), labels=labels) for w in WINDOWS
    ]
    rules += [
        RecordingRule(record=slo_record(semconv.SLO_BURN_RATE, w), expr=f"{slo_record(errors, w)}{select} / {budget!r}",
                      labels=labels)
        for w in WINDOWS
    ]
    shortest = slo_record(errors, WINDOWS[0])
    rules.append(RecordingRule(
        record=slo_record(semconv.SLO_ERROR_BUDGET_REMAINING),
        expr=f"1 - avg_over_time({shortest}{select}[{slo.window}]) / {budget!r}",
        labels=labels,
    ))
    rules += [_alert(slo, row, select) for row in BURN_ALERTS]
    if slo.domain is None:  # the shipped FailoverPoolErrorBudgetBurn* alerts leave this pool out
        rules.append(RecordingRule(record=semconv.SLO_CONFIGURED, expr="vector(1)",
                                   labels={**labels, _POOL: slo.pool}))
    return RuleGroup(name=f"failover-slo-{name}", rules=tuple(rules))


def rule_groups(config: AgentConfig) -> list[RuleGroup]:
    """One rule group per ``[[slo]]`` of ``config``, in the file's order."""
    return [_group(slo) for slo in config.slo]


def render(groups: Sequence[RuleGroup], *, source: str) -> str:
    """The Prometheus rule file (YAML) of ``groups``, with a header naming ``source``."""
    import yaml  # the agent extra's; only this command writes YAML

    header = (f"# Prometheus rules for the SLOs of {source}, written by 'failover-agent rules'.\n"
              "# Do not edit: change the [[slo]] tables and run the command again.\n"
              "# Check: promtool check rules FILE\n")
    body = yaml.safe_dump({"groups": [group.as_dict() for group in groups]}, sort_keys=False, width=100_000,
                          allow_unicode=True)
    return header + body
