"""Smoke test of the async hedging benchmark (issue 27: p50 with 20 concurrent tasks), made
tiny: it runs end to end over real loopback sockets, its servers in other processes, and
counts what they received. No timing is asserted."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from benchmarks import hedge_cost
from benchmarks.__main__ import across


def test_the_hedging_benchmark_answers_every_request_and_counts_the_hedges_at_the_servers() -> None:
    """Every variant answers every request in paired rounds; without hedging the server saw
    exactly one request per logical request; a hedged variant's server saw no more than the
    attempts its client handed to the network, and a delay below every answer's time hedges."""
    sizes = replace(hedge_cost.QUICK, tasks=4, per_round=40, rounds=2, fixed_delay=1e-4, max_seconds=30.0)
    report = hedge_cost.measure(sizes)
    data = report.data
    labels = list(hedge_cost.policies(sizes))
    assert [k for k in data if isinstance(data[k], dict) and "p50" in data[k]] == labels
    assert data["rounds"] == sizes.rounds
    for label in labels:
        f = data[label]
        assert f["errors"] == 0 and f["timed"] == sizes.rounds * sizes.per_round, (label, f)
        assert f["requests"] == (sizes.warmup + sizes.rounds) * sizes.per_round, (label, f)
        assert len(f["round_p50_s"]) == len(f["round_cpu_s"]) == sizes.rounds, (label, f)
        assert f["p50"] <= f["p90"] <= f["p99"], (label, f)
        # The server counts what reached it: at least one request per logical request, at
        # most every attempt the client handed to the network.
        assert f["requests"] <= f["received"] <= f["sent"], (label, f)
        assert f["extra"] == f["received"] - f["requests"] <= f["hedges"], (label, f)
        assert f["by_hedge"] <= f["hedges"], (label, f)
        # One kept-alive connection per task; a hedge opens at most one, and its loser's closing
        # at most one more later.
        assert 1 <= f["connections"] <= sizes.tasks + 2 * f["hedges"], (label, f)
    for label in (hedge_cost.BASELINE, hedge_cost.REFERENCE):
        f = data[label]
        assert f["hedges"] == f["extra"] == 0 and f["received"] == f["sent"] == f["requests"], (label, f)
    assert data[hedge_cost.NEVER_DUE]["hedges"] == 0  # a 1 s delay on loopback answers
    fixed = data[hedge_cost.fixed_label(sizes)]
    assert fixed["hedges"] >= 1, fixed  # every answer takes longer than 0.1 ms: the throttle bounds them
    assert fixed["hedges"] <= 0.05 * fixed["requests"] + 5, fixed  # Hedging.max_ratio, plus the burst
    text = report.markdown()
    assert "p50 vs no hedging" in text and "target <= 1.10x" in text
    # `python -m benchmarks hedge_cost --processes N` gathers each variant's paired ratio
    table = across([data, data])
    assert table is not None and [row[0] for row in table.rows] == labels


@pytest.mark.parametrize("bad", [{"tasks": 0}, {"per_round": 3, "tasks": 4}, {"rounds": 0}, {"fixed_delay": 0.0}])
def test_impossible_sizes_are_refused(bad: dict[str, Any]) -> None:
    """Sizes that could not run (no task, fewer requests than tasks, no round, no delay) say so."""
    with pytest.raises(ValueError, match="Sizes"):
        replace(hedge_cost.QUICK, **bad)
