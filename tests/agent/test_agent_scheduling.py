"""Scheduling: spread start offsets, overruns counted, a crashing check never kills its job."""

from __future__ import annotations

from pathlib import Path

from agent_support import config, cors_handler, eventually, fake_domains, pick, running, scrape

from agent.runner import job_offset
from pytest_failover import faults
from pytest_failover.simulator import FakeDomains

__all__ = ["fake_domains"]


def test_offsets_are_stable_spread_and_bounded() -> None:
    """The same job always starts at the same offset, within [0, min(interval, 120 s))."""
    ids = [f"probe:api:https://api{i}.example.com" for i in range(200)]
    offsets = [job_offset(i, 15.0) for i in ids]
    assert offsets == [job_offset(i, 15.0) for i in ids]
    assert all(0 <= o < 15.0 for o in offsets)
    assert len({round(o, 3) for o in offsets}) > 150  # not in lockstep
    assert all(0 <= job_offset(i, 3600.0) < 120.0 for i in ids)


async def test_overruns_are_counted_and_probing_continues(fake_domains: FakeDomains, tmp_path: Path) -> None:
    """A pool probe slower than its interval is never run twice at once; skips are counted."""
    fd = fake_domains
    fd.add("api.example.com", cors_handler())
    fd.fail("api.example.com", faults.latency(0.5))
    cfg = config(fd, tmp_path, ["https://api.example.com"], probe={"interval": 0.1, "timeout": 0.1},
                 policy={"attempt_timeout": 2.0, "deadline": 3.0})
    async with running(cfg) as agent:
        async def overran() -> bool:
            s = await scrape(agent)
            return sum(pick(s, "failover_agent_job_overruns_total", job="pool", failover_pool="api")) >= 2

        await eventually(overran)
        pool = agent.state.pools["api"]
        await eventually(lambda: pool.last is not None and pool.last.success)


async def test_a_check_that_raises_is_a_failed_probe_not_a_dead_job(
    fake_domains: FakeDomains, tmp_path: Path
) -> None:
    """An unexpected exception inside a probe becomes error.type = its qualified name."""
    fd = fake_domains
    fd.add("api.example.com", cors_handler())
    cfg = config(fd, tmp_path, ["https://api.example.com"])
    async with running(cfg) as agent:
        prober = agent._runtime.prober  # type: ignore[union-attr]

        async def boom(*args: object, **kwargs: object) -> None:
            raise RuntimeError("boom")

        prober._exchange = boom  # type: ignore[method-assign]
        status = agent.state.domains[("api", "https://api.example.com")]
        await eventually(lambda: status.last is not None and status.last.error_type == "builtins.RuntimeError")
        first = status.last.at  # type: ignore[union-attr]
        await eventually(lambda: status.last.at > first)  # type: ignore[union-attr]
