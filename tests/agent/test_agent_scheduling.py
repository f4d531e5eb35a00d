"""Scheduling: one job per pool and interval, spread start offsets, overruns counted per
check, a slow check delays no other, a crashing check never kills its job."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from agent_support import config, cors_handler, eventually, fake_domains, pick, running, scrape
from apscheduler.events import EVENT_JOB_MISSED, JobExecutionEvent
from failover_agent import wire
from failover_agent.schedule import job_offset

from pytest_failover import faults
from pytest_failover.simulator import FakeDomains

__all__ = ["fake_domains"]

PRIMARY = "https://api.example.com"
BACKUP = "https://api2.example.com"


def test_offsets_are_stable_spread_and_bounded() -> None:
    """The same job always starts at the same offset, within [0, min(interval, 120 s))."""
    ids = [f"probe:api:https://api{i}.example.com" for i in range(200)]
    offsets = [job_offset(i, 15.0) for i in ids]
    assert offsets == [job_offset(i, 15.0) for i in ids]
    assert all(0 <= o < 15.0 for o in offsets)
    assert len({round(o, 3) for o in offsets}) > 150  # not in lockstep
    assert all(0 <= job_offset(i, 3600.0) < 120.0 for i in ids)


async def test_checks_of_a_pool_that_share_an_interval_are_one_job(
    fake_domains: FakeDomains, tmp_path: Path
) -> None:
    """Pinned probes, the pool probe and readiness checks fire together when their interval is
    the same; a per-domain interval or the readiness interval makes a job of its own."""
    fd = fake_domains
    third = "https://api3.example.com"
    for name in ("api.example.com", "api2.example.com", "api3.example.com"):
        fd.add(name, cors_handler())
    cfg = config(fd, tmp_path, [PRIMARY, BACKUP, third],
                 probe={"interval": 0.5, "domains": {third: {"interval": 1.0, "timeout": 0.5}}},
                 readiness={"interval": 0.5})
    async with running(cfg) as agent:
        assert agent._runtime is not None
        groups = {g.id: sorted(c.id for c in g.checks) for g in agent._runtime.groups}
    assert groups == {
        "api every 0.5 s": sorted([f"probe:api:{PRIMARY}", f"probe:api:{BACKUP}", "pool:api",
                                   f"ready:api:{BACKUP}", f"ready:api:{third}"]),
        "api every 1 s": [f"probe:api:{third}"],
        "control": ["control"],
    }


async def test_a_slow_check_delays_no_other_check_of_its_job(fake_domains: FakeDomains, tmp_path: Path) -> None:
    """While the pool probe waits a second for the primary, the backup's pinned probe (same
    job) keeps running at its own interval."""
    fd = fake_domains
    fd.add("api.example.com", cors_handler())
    fd.add("api2.example.com", cors_handler())
    fd.fail("api.example.com", faults.latency(1.0))
    cfg = config(fd, tmp_path, [PRIMARY, BACKUP], probe={"interval": 0.1, "timeout": 0.1},
                 policy={"attempt_timeout": 2.0, "deadline": 3.0})
    async with running(cfg) as agent:
        backup = agent.state.domains[("api", BACKUP)]
        pool = agent.state.pools["api"]
        # the backup's results while the pool's first run waits, looked at ten times as
        # often as the probe runs; a failed one counts too (on a loaded machine the 0.1 s
        # probe may time out): it ran all the same
        results: set[float] = set()

        def pool_done() -> bool:
            if backup.last is not None:
                results.add(backup.last.at)
            return pool.last is not None

        await eventually(lambda: backup.last is not None)
        assert pool.last is None  # its first run is still waiting
        await eventually(pool_done, step=0.01)
        assert len(results) >= 4, results  # the first and 3 more


async def test_a_missed_job_run_counts_an_overrun_of_each_of_its_checks(
    fake_domains: FakeDomains, tmp_path: Path
) -> None:
    """When APScheduler misses a run of a job (the loop was blocked), every check of it missed one."""
    fd = fake_domains
    fd.add("api.example.com", cors_handler())
    fd.add("api2.example.com", cors_handler())
    cfg = config(fd, tmp_path, [PRIMARY, BACKUP], probe={"interval": 60.0, "timeout": 1.0},
                 readiness={"enabled": False})
    async with running(cfg) as agent:
        before = agent.state.overruns
        agent._on_skipped(JobExecutionEvent(EVENT_JOB_MISSED, "api every 60 s", "default",
                                            datetime.now(UTC)))
        assert agent.state.overruns == before + 3
        s = await scrape(agent)
        origin = {"url_scheme": "https", "server_port": "443"}
        for check, labels in (("probe", {"server_address": "api.example.com", **origin}),
                              ("probe", {"server_address": "api2.example.com", **origin}),
                              ("pool", {"failover_pool": "api"})):
            assert pick(s, "failover_agent_job_overruns_total", failover_agent_check=check, **labels) == [1.0], (
                check, labels)
        overran = [dict(labels) for (name, labels) in s if name == "failover_agent_job_overruns_total"]
        assert overran and not [labels for labels in overran if "failover_domain" in labels or "job" in labels]
        pool_labels = next(labels for labels in overran if labels["failover_agent_check"] == "pool")
        assert "server_address" not in pool_labels  # pool-wide: the pool and the location only


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
            return sum(pick(s, "failover_agent_job_overruns_total", failover_agent_check="pool", failover_pool="api")) >= 2

        await eventually(overran)
        pool = agent.state.pools["api"]
        await eventually(lambda: pool.last is not None and pool.last.success)


async def test_a_check_that_raises_is_a_failed_probe_not_a_dead_job(
    fake_domains: FakeDomains, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An unexpected exception inside a probe becomes error.type = its qualified name."""
    fd = fake_domains
    fd.add("api.example.com", cors_handler())
    cfg = config(fd, tmp_path, ["https://api.example.com"])
    async with running(cfg) as agent:
        async def boom(*args: object, **kwargs: object) -> None:
            raise RuntimeError("boom")

        monkeypatch.setattr(wire, "exchange", boom)
        status = agent.state.domains[("api", "https://api.example.com")]
        await eventually(lambda: status.last is not None and status.last.error_type == "builtins.RuntimeError")
        assert status.last is not None
        first = status.last.at
        await eventually(lambda: status.last is not None and status.last.at > first)
