"""The quorum's PromQL on synthetic series, evaluated by the real ``promtool test rules``.

Scrapes every second, ``for_seconds = 5``. Each domain is one case of the rules in
``failover_agent.quorum.promql``: a fault older than the window votes, a younger one does
not; gaps inside the window do not matter; a series marked stale (the agent stopped)
stops voting at once; a series that started down less than the window ago does not vote;
one agent of a location that sees the domain up withdraws the location's vote.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from dashboards.conftest import require_binary
from failover_agent.quorum.promql import PROBE_SUCCESS, location_votes, quorum_decision

F = 5


def _series(host: str, location: str, values: str, instance: str = "a") -> dict[str, str]:
    labels = (f'failover_pool="api", url_scheme="https", server_address="{host}", server_port="443", '
              f'probe_location="{location}", job="failover-agent", instance="{instance}"')
    return {"series": f"{PROBE_SUCCESS}{{{labels}}}", "values": values}


def _vote(host: str, location: str) -> dict[str, Any]:
    return {"labels": f'{{failover_pool="api", url_scheme="https", server_address="{host}", server_port="443", '
                      f'probe_location="{location}"}}', "value": 0}


def _decision(host: str, value: int) -> dict[str, Any]:
    return {"labels": f'{{failover_pool="api", url_scheme="https", server_address="{host}", server_port="443"}}',
            "value": value}


SERIES = [
    _series("old.test", "eu", "1 1 1 1 1 0x20"),                       # down from t=5
    _series("old.test", "us", "1 1 1 1 1 0x20"),
    _series("gap.test", "eu", "1 1 1 1 1 0 0 _ _ 0x16"),               # no samples at 7 and 8
    _series("stale.test", "eu", "1 1 1 1 1 0x10 stale"),               # the agent stopped at t=16
    _series("young.test", "eu", "_ _ _ _ _ _ _ _ _ _ 0x15"),           # first seen, down, at t=10
    _series("split.test", "eu", "1 1 1 1 1 0x20", instance="a"),       # two agents in eu disagree
    _series("split.test", "eu", "1x25", instance="b"),
]


def _case(expr: str, at: int, samples: list[dict[str, Any]]) -> dict[str, Any]:
    return {"expr": expr, "eval_time": f"{at}s", "exp_samples": samples}


def _run(tmp_path: Path, cases: list[dict[str, Any]]) -> None:
    promtool = require_binary("promtool")
    path = tmp_path / "quorum_test.yml"
    path.write_text(yaml.safe_dump({
        "rule_files": [], "evaluation_interval": "1s",
        "tests": [{"interval": "1s", "input_series": SERIES, "promql_expr_test": cases}],
    }, sort_keys=False))
    run = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr


def test_votes_follow_the_rules(tmp_path: Path) -> None:
    """Old faults vote with or without gaps; young ones from 5 s on; stale ones stop at once; split never."""
    votes = location_votes(F)
    old = [_vote("old.test", "eu"), _vote("old.test", "us"), _vote("gap.test", "eu")]
    _run(tmp_path, [
        _case(votes, 8, []),  # every fault is younger than 5 s
        _case(votes, 12, [*old, _vote("stale.test", "eu")]),
        _case(votes, 14, [*old, _vote("stale.test", "eu")]),  # young: seen down for 4 s only
        _case(votes, 15, [*old, _vote("stale.test", "eu"), _vote("young.test", "eu")]),
        _case(votes, 16, [*old, _vote("young.test", "eu")]),  # stale: its agent stopped at 16
    ])


def test_the_bool_form_has_a_series_for_every_reported_location(tmp_path: Path) -> None:
    """``as_bool``: 1 for each vote, 0 for a location that does not vote (young: no sample 5 s ago yet)."""
    def value(host: str, location: str, v: int) -> dict[str, Any]:
        return {**_vote(host, location), "value": v}

    _run(tmp_path, [_case(location_votes(F, as_bool=True), 12, [
        value("old.test", "eu", 1), value("old.test", "us", 1), value("gap.test", "eu", 1),
        value("stale.test", "eu", 1), value("young.test", "eu", 0), value("split.test", "eu", 0),
    ])])


def test_the_decision_counts_locations(tmp_path: Path) -> None:
    """The Grafana form is 1 where two locations vote, 0 for every other domain still reported."""
    others = [_decision("gap.test", 0), _decision("stale.test", 0), _decision("split.test", 0),
              _decision("young.test", 0)]
    _run(tmp_path, [
        _case(quorum_decision(F, 2), 12, [_decision("old.test", 1), *others]),
        _case(quorum_decision(F, 3), 12, [_decision("old.test", 0), *others]),
    ])


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "60"])
def test_for_seconds_must_be_whole_seconds_or_a_grafana_variable(bad: Any) -> None:
    """Zero, negative, fractional, boolean or bare-string windows are refused."""
    with pytest.raises((ValueError, TypeError)):
        location_votes(bad)


def test_grafana_variables_pass_through() -> None:
    """``$name`` becomes ``${name}`` inside the range and the threshold."""
    expr = quorum_decision("$quorum_for", "$quorum_min", 'failover_pool=~"$pool"')
    assert "[${quorum_for}s]" in expr and "offset ${quorum_for}s" in expr and expr.endswith(">= bool ${quorum_min}")
    assert f'{PROBE_SUCCESS}{{failover_pool=~"$pool"}}' in expr


def test_the_docs_show_the_query_the_publisher_runs() -> None:
    """docs/control.md shows the votes query and the decision as they are built (the README,
    a front page under 15 KB, names `--print-query` and links there)."""
    root = Path(__file__).resolve().parents[2]
    control = (root / "docs" / "control.md").read_text(encoding="utf-8")
    assert location_votes(60) in control
    assert quorum_decision(60, 2) in control
    assert "--print-query" in (root / "README.md").read_text(encoding="utf-8")
