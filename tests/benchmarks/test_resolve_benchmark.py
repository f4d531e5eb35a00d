"""Smoke test of the resolver benchmark (issue 29), made tiny: it runs end to end over real
loopback sockets and says which domain answered. No timing is asserted."""

from __future__ import annotations

from dataclasses import replace

from benchmarks import resolve


def test_the_resolver_benchmark_fails_over_without_doh_and_stays_with_it() -> None:
    """Without a resolver the poisoned primary's requests are answered by the backup; with
    DoH, cold or warm, by the primary; the warm-cost part has paired rounds of every variant."""
    sizes = replace(resolve.QUICK, first_requests=2, rounds=3, per_round=2, max_seconds=2.0)
    report = resolve.measure(sizes)
    first = report.data["first_success"]
    assert first[resolve.NO_RESOLVER]["served"] == {f"https://{resolve.BACKUP}": 2}
    for name in (resolve.DOH_FRESH, resolve.DOH_WARM):
        assert first[name]["served"] == {f"https://{resolve.PRIMARY}": 2}, (name, first[name])
        assert len(first[name]["samples_s"]) == 2
    wall = report.data["warm_cost"]["wall_s"]
    assert set(wall) == {resolve.SYSTEM_KEEPALIVE, resolve.CACHE_KEEPALIVE, resolve.SYSTEM_CLOSE, resolve.CACHE_CLOSE}
    assert len({len(samples) for samples in wall.values()}) == 1 and len(wall[resolve.SYSTEM_CLOSE]) >= 3
    text = report.markdown()
    assert "time to the first success" in text and "paired ratio" in text
