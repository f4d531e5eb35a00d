"""Smoke test of the ``sdks`` benchmark (issue 28), made tiny: httpx2 and the OpenAI SDK, bare
and through the failover transport, end to end on a loopback server. No timing is asserted."""

from __future__ import annotations

from benchmarks import sdks
from benchmarks._options import Options


def test_the_sdk_benchmark_times_both_pairs_and_rates_each_against_its_bare_client() -> None:
    """Every variant is timed in every round (each operation checked its answer), and each
    failover variant has a paired ratio against its own bare client."""
    report = sdks.run(Options(rounds=3, seconds=30.0))
    assert report.data["rounds"] == 3
    for name in (sdks.BARE_HTTPX2, sdks.FAILOVER_HTTPX2, sdks.BARE_OPENAI, sdks.FAILOVER_OPENAI):
        assert len(report.data[name]["wall_samples_s"]) == 3, name
    for name, bare in sdks.PAIRS.items():
        assert report.data[name]["wall_paired_ratio"] > 0 and "wall_paired_ratio" not in report.data[bare]
    text = report.markdown()
    assert "| openai.OpenAI + FailoverTransport |" in text and "| httpx2.Client + FailoverTransport |" in text
