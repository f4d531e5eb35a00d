"""What runs when: checks, and the groups of checks that fire together.

Rules (the agent's scheduler in :mod:`failover_agent.runner` applies them):

- A *check* is one kind of work on one target: ``probe`` (pinned probe of a domain),
  ``pool`` (a request through the failover client), ``ready`` (readiness of a backup) or
  ``control`` (the control document). Running it never raises.
- The checks of one pool that share an interval form a *group*; each group is one
  APScheduler job. A group fires at a stable start offset in ``[0, min(interval, 120 s))``
  derived from its id, so pools do not fire in lockstep and keep their phase across
  restarts. (One job per pool rather than per check: APScheduler's bookkeeping per run
  cost more than a probe's own Python code at 1,000 domains.)
- A firing starts each check of the group as its own task, so a slow check delays no
  other. A check whose previous run is still going does not run again (one run per check
  at a time): that run is skipped and counted as an overrun of the check.
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

__all__ = ["MAX_OFFSET", "Check", "CheckGroup", "group_by_interval", "job_offset"]

MAX_OFFSET = 120.0  # seconds; like Grafana Synthetic Monitoring's spread


def job_offset(job_id: str, interval: float) -> float:
    """A stable start offset in ``[0, min(interval, 120 s))`` derived from the job id."""
    return (zlib.crc32(job_id.encode()) / 2**32) * min(interval, MAX_OFFSET)


@dataclass(eq=False, slots=True)
class Check:
    """One check of one target; ``task`` is its run while it goes (the runner lets go of it
    when it ends). Its id and its series' attributes are made when asked for (rarely: a log
    line, an overrun), not kept: a string and a mapping per check were 0.6 MiB at 1,000 domains."""

    kind: str  # probe | pool | ready | control: its failover.agent.check
    pool: str  # "" for control
    url: str  # the domain's base URL (probe, ready), else ""
    interval: float
    timeout: float  # how long stop() and reload() let a run finish
    run: Callable[[], Awaitable[None]]
    task: asyncio.Task[None] | None = None

    @property
    def id(self) -> str:
        """``probe:{pool}:{url}``, ``pool:{pool}``, ``ready:{pool}:{url}`` or ``control``."""
        return ":".join(part for part in (self.kind, self.pool, self.url) if part)

    @property
    def in_flight(self) -> asyncio.Task[None] | None:
        """Its run still going, if any."""
        task = self.task
        return task if task is not None and not task.done() else None


@dataclass(frozen=True, slots=True)
class CheckGroup:
    """Checks that fire together, as one APScheduler job."""

    id: str
    interval: float
    checks: tuple[Check, ...]

    @property
    def offset(self) -> float:
        return job_offset(self.id, self.interval)


def group_by_interval(name: str, checks: Iterable[Check]) -> list[CheckGroup]:
    """One group per interval among ``checks``, with the id ``{name} every {interval} s``."""
    by_interval: dict[float, list[Check]] = {}
    for check in checks:
        by_interval.setdefault(check.interval, []).append(check)
    return [CheckGroup(f"{name} every {interval:g} s", interval, tuple(members))
            for interval, members in by_interval.items()]
