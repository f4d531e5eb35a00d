"""The committed dashboards: generated, well-formed, complete, documented."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from . import _grafana
from .conftest import DASHBOARDS, ROOT

GENERATOR = DASHBOARDS / "generate.py"

# The panels issue 5 (and later issues) ask for, by dashboard (titles are the contract with the docs).
REQUIRED_PANELS = {
    "failover-overview.json": {
        "Pool availability (probes)",
        "Request success (client)",
        "User-perceived availability",
        "SLO error-budget burn rate",
        "Error budget remaining",  # issue 30: the rules of failover-agent rules
        "Burn rate per SLO",
        "Domain probe success",
        "Serving domain (pool probe)",
        "Answered attempts per domain",
        "Domain switches",
        "Attempts per logical request",
        "Failed attempts by error type",
        "Dropped connections sent again",
        "Attempt latency percentiles",
        "Probe latency per phase",  # a gauge per phase since issue 14 (was a p95)
        "Breaker state",
        "Breaker transitions",
        "Retry-budget rejections",
        "Hedging",  # issue 11
        "Slow calls",
    },
    "backup-readiness.json": {
        "Certificate days left",
        "CORS parity with the primary",
        "Health parity with the primary",
        "Control document version",
        "Control document age",
        "Domains disabled by the control document",
    },
}


def load_generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("failover_dashboards_generate", GENERATOR)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", _grafana.DASHBOARD_FILES)
def test_committed_json_is_the_generators_output(name: str) -> None:
    """Each committed dashboard is byte for byte what dashboards/generate.py renders."""
    generator = load_generator()
    committed = (DASHBOARDS / name).read_text(encoding="utf-8")
    assert committed == generator.render(name), f"{name} is stale: run python dashboards/generate.py"


def test_generator_check_flags_a_stale_file(tmp_path: Path) -> None:
    """`generate.py --check` passes on fresh output and exits 1 once a file is edited by hand."""
    run = [sys.executable, str(GENERATOR), "--out", str(tmp_path)]
    subprocess.run(run, check=True, timeout=60)
    assert subprocess.run([*run, "--check"], timeout=60).returncode == 0
    edited = tmp_path / "backup-readiness.json"
    edited.write_text(edited.read_text(encoding="utf-8").replace("Backup readiness", "Edited"), encoding="utf-8")
    result = subprocess.run([*run, "--check"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert "backup-readiness.json" in result.stderr


@pytest.mark.parametrize("name", _grafana.DASHBOARD_FILES)
def test_dashboard_is_classic_schema_with_datasource_variable(name: str) -> None:
    """Schema 39, a Prometheus ${datasource} variable, and every panel and query use it."""
    board = _grafana.load(name)
    assert board["schemaVersion"] == 39
    assert board["uid"]
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for var in ("pool", "domain", "location"):
        assert variables[var]["type"] == "query"
        assert variables[var]["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert variables[var]["multi"]
        assert variables[var]["includeAll"]
    for panel in _grafana.panels(board):
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == panel["datasource"], panel["title"]


@pytest.mark.parametrize("name", _grafana.DASHBOARD_FILES)
def test_panels_are_laid_out_without_overlap(name: str) -> None:
    """Unique ids, grid positions inside 24 columns, no two panels on the same cell."""
    board = _grafana.load(name)
    ids = [p["id"] for p in _grafana.panels(board)]
    assert len(ids) == len(set(ids))
    taken: dict[tuple[int, int], str] = {}
    for panel in _grafana.panels(board):
        pos = panel["gridPos"]
        assert pos["x"] >= 0, panel["title"]
        assert pos["x"] + pos["w"] <= 24, panel["title"]
        for x in range(pos["x"], pos["x"] + pos["w"]):
            for y in range(pos["y"], pos["y"] + pos["h"]):
                assert (x, y) not in taken, f"{panel['title']} overlaps {taken[(x, y)]}"
                taken[(x, y)] = panel["title"]


@pytest.mark.parametrize("name", _grafana.DASHBOARD_FILES)
def test_every_panel_is_described_and_filtered(name: str) -> None:
    """Every panel says what question it answers and every query honours $pool."""
    board = _grafana.load(name)
    for panel in _grafana.panels(board):
        if panel["type"] == "row":
            continue
        assert len(panel["description"]) > 40, panel["title"]
        assert panel["targets"], panel["title"]
        ref_ids = [t["refId"] for t in panel["targets"]]
        assert len(ref_ids) == len(set(ref_ids)), panel["title"]
        for target in panel["targets"]:
            assert '$pool"' in target["expr"], f"{panel['title']}: {target['expr']}"


def _titles(board: Mapping[str, Any]) -> set[str]:
    return {p["title"] for p in _grafana.panels(board) if p["type"] != "row"}


@pytest.mark.parametrize("name", _grafana.DASHBOARD_FILES)
def test_dashboard_has_the_panels_issue_5_asks_for(name: str) -> None:
    """The panels listed in issue 5 are all present."""
    missing = REQUIRED_PANELS[name] - _titles(_grafana.load(name))
    assert not missing


def test_docs_describe_every_panel() -> None:
    """docs/dashboards.md names every panel of both dashboards and every alert."""
    docs = (ROOT / "docs" / "dashboards.md").read_text(encoding="utf-8")
    for name in _grafana.DASHBOARD_FILES:
        for title in _titles(_grafana.load(name)):
            assert f"**{title}**" in docs, f"docs/dashboards.md does not describe {title!r}"
    import yaml

    rules = yaml.safe_load((DASHBOARDS / "alerts.yml").read_text(encoding="utf-8"))
    for group in rules["groups"]:
        for rule in group["rules"]:
            assert f"`{rule['alert']}`" in docs, rule["alert"]


def test_substitution_formats_variables_like_grafana() -> None:
    """All becomes .*, a selected value is regex-escaped for a PromQL string, unknown variables raise."""
    expr = 'up{server_address=~"$domain", pool=~"${pool}"}[$__rate_interval]'
    assert _grafana.substitute(expr, {"domain": ".*", "pool": ".*"}) == 'up{server_address=~".*", pool=~".*"}[15s]'
    escaped = _grafana.substitute(expr, {"domain": _grafana.regex_escape("api.example.com"), "pool": "api"})
    assert escaped == 'up{server_address=~"api\\\\.example\\\\.com", pool=~"api"}[15s]'
    with pytest.raises(KeyError):
        _grafana.substitute("up{a=~\"$nope\"}", {})


def test_metric_names_are_found_in_selectors() -> None:
    """Metric names come from `name{` and from `__name__=~"a|b"`, not from functions or labels."""
    expr = 'sum by (le) (rate(a_bucket{x="1"}[5m])) / on() group_left b_total{} or {__name__=~"c|d", y="2"}'
    assert _grafana.metric_names(expr) == {"a_bucket", "b_total", "c", "d"}


def test_zero_fallbacks_are_split_off() -> None:
    """The A of `(A or on (pool) B * 0)` is found even with nested parentheses and several fallbacks."""
    expr = "1 - (sum by (p) (rate(x{a=\"1\"}[5m])) or on (p) sum by (p) (y) * 0) / (z or on (p) w * 0)"
    assert _grafana.without_zero_fallbacks(expr) == ['sum by (p) (rate(x{a="1"}[5m]))', "z"]
    assert _grafana.without_zero_fallbacks("sum(up)") == []
