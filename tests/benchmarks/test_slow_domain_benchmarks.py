"""Smoke tests of the tail and slow-primary benchmarks (issue #11), made tiny: they run end to
end on real loopback sockets and count what the servers received. No timing is asserted."""

from __future__ import annotations

from dataclasses import replace

from benchmarks import slow_primary, tail
from pytest_failover import SlowCalls


def test_the_tail_benchmark_runs_every_mode_and_counts_at_the_servers() -> None:
    """Every mode has a row per variant; without hedging the servers saw exactly one request per
    logical request, and the reference domain held none."""
    sizes = replace(tail.QUICK, requests=60, concurrency=4, chunk=30, slow_seconds=0.05, max_seconds=60.0)
    report = tail.measure(sizes)
    modes = [m for m in report.data if m != "sizes"]
    assert len(modes) == 3 and len(report.tables) == 3
    for mode in modes:
        figures = report.data[mode]
        assert len(figures) == len(tail.variants(sizes)), figures
        for label, f in figures.items():
            # The paced mode skips a request due while `concurrency` are in flight (open
            # loop, as _drive.steady says); the sequential ones send them all.
            sent = sizes.requests if "concurrent" not in mode else f["n"]
            assert f["errors"] == 0 and sizes.requests // 2 <= f["n"] == sent, (mode, label, f)
            assert f["extra"] >= 0 and f["primary_requests"] >= 1, (mode, label, f)
        plain = next(iter(figures.values()))
        assert plain["extra"] == 0 and plain["hedges"] == 0 and plain["primary_requests"] == plain["n"], plain
        assert figures[tail.REFERENCE]["held"] == 0
    assert "p99.9" in report.markdown()


def test_the_slow_primary_benchmark_counts_the_requests_before_traffic_moves() -> None:
    """Without SlowCalls nothing moves off the slow primary; with it, a sequential client moves
    after minimum_calls slow answers; every variant is bounded in count."""
    sizes = replace(slow_primary.QUICK, primary_seconds=0.1, threshold=0.05, baseline=4, limit=12,
                    after=5, concurrency=2, max_seconds=30.0)
    report = slow_primary.measure(sizes)
    rows = {k: v for k, v in report.data.items() if k != "sizes"}
    assert len(rows) == 3
    baseline, sequential, _ = rows.values()
    assert baseline["before_move"] is None and baseline["primary_requests"] == sizes.baseline
    assert sequential["before_move"] == sequential["primary_requests"] == SlowCalls(threshold=1).minimum_calls
    for label, f in rows.items():
        assert f["errors"] == 0, (label, f)
        assert f["requests"] <= sizes.limit + sizes.after + sizes.concurrency, (label, f)
    assert "requests before the first backup answer" in report.markdown()
