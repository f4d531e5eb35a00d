"""What Grafana would do with the dashboards' queries: extract them, fill in variables.

Variables are formatted the way Grafana's Prometheus data source formats them for
multi-value variables: "All" becomes the variable's ``allValue`` (``.*``); a
selected value is regex-escaped with doubled backslashes, because it lands
inside a double-quoted PromQL string.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from .conftest import DASHBOARDS

DASHBOARD_FILES = ("failover-overview.json", "backup-readiness.json")

# Grafana's built-in interval variables, as it would fill them for a short range.
BUILTINS = {"__rate_interval": "15s", "__interval": "1s", "__range": "1m", "__range_s": "60"}

_VARIABLE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)|\[\[(\w+)\]\]")
_LABEL_VALUES = re.compile(r"^label_values\((?P<selector>.*),\s*(?P<label>\w+)\)$", re.DOTALL)
_SPECIAL = re.compile(r"[$^*{}\[\]'+?.()|]")


@dataclass(frozen=True)
class Query:
    """One panel query: where it comes from and its PromQL with Grafana variables."""

    dashboard: str
    panel: str
    ref_id: str
    expr: str

    @property
    def name(self) -> str:
        return f"{self.dashboard} / {self.panel} / {self.ref_id}"


@dataclass(frozen=True)
class Variable:
    """A ``label_values(selector, label)`` query variable."""

    dashboard: str
    name: str
    selector: str
    label: str
    all_value: str


def load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((DASHBOARDS / name).read_text(encoding="utf-8"))
    return data


def panels(dashboard: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    """Every panel, including those nested in collapsed rows."""
    for item in dashboard["panels"]:
        yield item
        yield from item.get("panels", [])


def queries(name: str) -> list[Query]:
    return [
        Query(name, p["title"], t["refId"], t["expr"])
        for p in panels(load(name))
        for t in p.get("targets", [])
    ]


def all_queries() -> list[Query]:
    return [q for name in DASHBOARD_FILES for q in queries(name)]


def variables(name: str) -> list[Variable]:
    out = []
    for var in load(name)["templating"]["list"]:
        if var["type"] != "query":
            continue
        query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
        match = _LABEL_VALUES.match(query.strip())
        assert match, f"{name}: variable {var['name']} is not label_values(selector, label): {query}"
        out.append(Variable(name, var["name"], match["selector"], match["label"], var.get("allValue") or ".*"))
    return out


def custom_defaults(name: str) -> dict[str, str]:
    """Current values of the dashboard's custom and constant variables (e.g. ``slo``)."""
    return {
        var["name"]: str(var["current"]["value"])
        for var in load(name)["templating"]["list"]
        if var["type"] in {"custom", "constant"}
    }


def regex_escape(value: str) -> str:
    """Grafana's ``prometheusSpecialRegexEscape``: escapes for a regex inside a PromQL string."""
    value = value.replace("\\", "\\\\\\\\")
    return _SPECIAL.sub(lambda m: "\\\\" + m.group(0), value)


def substitute(expr: str, values: Mapping[str, str]) -> str:
    """Replace ``$var``, ``${var}``, ``${var:fmt}`` and ``[[var]]``; every variable must be known."""

    def one(match: re.Match[str]) -> str:
        var = match.group(1) or match.group(2) or match.group(3)
        if var in values:
            return values[var]
        if var in BUILTINS:
            return BUILTINS[var]
        raise KeyError(f"unknown variable ${var} in {expr!r}")

    return _VARIABLE.sub(one, expr)


def without_zero_fallbacks(expr: str) -> list[str]:
    """The ``A`` of every ``(A or on (labels) zero)`` in ``expr``.

    The dashboards add a zero per pool to counters that only exist after an event,
    so "No data" reads 0; the test evaluates ``A`` alone too, so the fallback
    cannot hide a metric or label that is wrong.
    """
    parts = []
    for match in re.finditer(r" or on \(", expr):
        depth = 0
        for start in range(match.start() - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(expr[start], 0)
            if depth < 0:
                parts.append(expr[start + 1 : match.start()])
                break
        else:
            raise ValueError(f"unbalanced parentheses before 'or on' in {expr!r}")
    return parts


_METRIC = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\{")
_NAME_REGEX = re.compile(r'__name__=~"([^"]+)"')


def metric_names(expr: str) -> set[str]:
    """The metric names a query selects (``name{...}`` and ``{__name__=~"a|b"}``)."""
    names = {m for m in _METRIC.findall(expr)}
    for alternatives in _NAME_REGEX.findall(expr):
        names.update(alternatives.split("|"))
    return names
