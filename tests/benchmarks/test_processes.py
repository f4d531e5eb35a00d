"""``python -m benchmarks NAME --processes N``: the same benchmark in N fresh processes, and
the paired ratios across them. No timing is asserted."""

from __future__ import annotations

import json
import subprocess
import sys

from benchmarks import _harness as h
from benchmarks.__main__ import across


def _run(wall: float, cpu: float) -> dict[str, object]:
    return {"wall_paired_ratio": wall, "cpu_paired_ratio": cpu, "wall_samples_s": [0.001]}


def test_across_gives_each_process_and_the_median_per_variant() -> None:
    datas = [
        {"per_round": 20, "bare": _run(1.0, 1.0), "ours": _run(1.02, 1.05)},
        {"per_round": 20, "bare": _run(1.0, 1.0), "ours": _run(1.09, 1.07)},
        {"per_round": 20, "bare": _run(1.0, 1.0), "ours": _run(1.04, 1.06)},
    ]
    table = across(datas)
    assert table is not None
    rows = {row[0]: row for row in table.rows}
    assert set(rows) == {"bare", "ours"}  # "per_round" is not a variant
    assert rows["ours"][1:] == ["**1.040x**", "1.020x, 1.090x, 1.040x", "1.060x"]


def test_across_says_nothing_for_a_benchmark_without_paired_ratios() -> None:
    assert across([{"sizes": {"requests": 10}}]) is None


def test_the_happy_path_runs_in_two_processes() -> None:
    """End to end, tiny: two child processes, each a whole (short) happy-path run, each with
    the package as it was at HEAD beside this tree's (``--against``, passed on to both)."""
    output = subprocess.run(
        [sys.executable, "-m", "benchmarks", "happy_path", "--processes", "2", "--rounds", "2", "--seconds", "2",
         "--against", "HEAD"],
        cwd=h.ROOT, capture_output=True, text=True, check=True, timeout=300,
    ).stdout
    assert "### Across 2 processes" in output
    assert output.count("#### happy_path, process") == 2
    saved = json.loads((h.RESULTS / "happy_path.json").read_text())
    assert len(saved["data"]["processes"]) == 2
    line = next(row for row in output.splitlines() if row.startswith("| FailoverTransport, no SDK |"))
    assert line.count("x, ") == 1  # one ratio per process in the "each process" cell
    head = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=h.ROOT, capture_output=True, text=True,
                          check=True).stdout.strip()
    assert output.count(f"| FailoverTransport at {head}, no SDK |") == 2  # in each process's in-process table
    assert f"Against {head}: this tree adds **" in output  # and their median, across the two
    assert "Back to back (the transport alone, nothing of httpx.Client between two calls): **" in output
