"""Maintenance windows: which domains are in maintenance, or drained ahead of one, at ``now``.

Rules and theory of operation
-----------------------------
A window names a pool and some of its domains (all of them when it names none) and a time
range ``[start, end)``. It comes from ``agent.toml`` (``[[maintenance]]``: one range, or a cron
schedule with a duration, each occurrence a range) or from ``failover-agent maintenance start``
(:mod:`failover_agent.maintenance_file`). At ``now``, for each domain:

=====================================  ===========================  ==========================
now                                    the domain is                what follows
=====================================  ===========================  ==========================
``start - drain <= now < start``       draining                     disabled in the control
                                                                    document (clients leave)
``start <= now < end``                 in maintenance (and still    ``failover_maintenance_
                                       draining, if ``drain``)      active 1``; alerts muted;
                                                                    results not counted as
                                                                    downtime; banner
otherwise                              neither                      as usual
=====================================  ===========================  ==========================

Draining only asks: the control writer's rules decide (:func:`failover_agent.control_writer.
apply_rules`), and they never disable a pool's last enabled domain.

Everything here is pure: ``now`` (Unix seconds) is an argument, nothing reads a clock or does
I/O, so the decision is tested without sleeping.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from .durations import seconds

if TYPE_CHECKING:
    from apscheduler.triggers.cron import CronTrigger

    from .config import AgentConfig, MaintenanceConfig

__all__ = ["NOTHING", "Decision", "Window", "cron_trigger", "decide", "occurrence", "windows_at"]

DomainKey = tuple[str, str]
"""A domain: ``(pool, url)``."""


def cron_trigger(schedule: str, tz: str) -> CronTrigger:
    """APScheduler's trigger for a five-field crontab line (``ValueError`` with the reason).

    The day of week must be spelt (``mon`` .. ``sun``): APScheduler 3 reads ``0`` as Monday
    where crontab reads it as Sunday, so a number would be a window on the wrong day."""
    from apscheduler.triggers.cron import CronTrigger

    fields = schedule.split()
    if len(fields) != 5:
        raise ValueError(f"{schedule!r} is not a cron schedule: expected 5 fields "
                         "(minute hour day month day-of-week), such as '0 2 * * sun'")
    if any(c.isdigit() for c in fields[4]):
        raise ValueError(f"{schedule!r}: write the day of week as a name (mon, tue, ..., sun, or mon-fri): "
                         "0 is Sunday to cron but Monday to APScheduler")
    try:
        return CronTrigger.from_crontab(schedule, timezone=tz)
    except (ValueError, KeyError, LookupError) as exc:
        raise ValueError(f"{schedule!r} is not a valid cron schedule: {exc}") from None


@dataclass(frozen=True, slots=True, kw_only=True)
class Window:
    """One maintenance range of some domains of one pool."""

    pool: str
    domains: frozenset[str]
    start: float
    end: float
    drain: float = 0.0
    reason: str = ""
    source: str = ""  # "maintenance[0]" (agent.toml) or the run-time window's id

    def __post_init__(self) -> None:
        if not self.end > self.start:
            raise ValueError(f"window {self.source or self.pool!r}: end ({self.end}) is not after start ({self.start})")
        if self.drain < 0:
            raise ValueError(f"window {self.source or self.pool!r}: drain ({self.drain}) is negative")

    def active(self, now: float) -> bool:
        return self.start <= now < self.end

    def draining(self, now: float) -> bool:
        return self.drain > 0 and self.start - self.drain <= now < self.end

    def members(self) -> Iterable[DomainKey]:
        return ((self.pool, url) for url in sorted(self.domains))


def occurrence(config: MaintenanceConfig, domains: frozenset[str], index: int, now: float) -> Window | None:
    """The occurrence of ``config`` that matters at ``now``: the one under way or draining, else
    the next one (None: none left). ``domains`` are its domains (all the pool's when it names none)."""
    drain = 0.0 if config.drain is None else float(seconds(config.drain, "maintenance.drain"))

    def window(start: float, end: float) -> Window:
        return Window(pool=config.pool, domains=domains, start=start, end=end, drain=drain,
                      reason=config.reason, source=f"maintenance[{index}]")

    if config.start is not None and config.end is not None:
        return window(config.start.timestamp(), config.end.timestamp())
    assert config.schedule is not None and config.duration is not None  # the config's rule
    trigger = cron_trigger(config.schedule, config.timezone)
    length = seconds(config.duration, "maintenance.duration")
    # The earliest start after now - length: under way if it is not after now (a start at exactly
    # now - length has ended: ranges are half-open, so look one microsecond on, at most twice).
    after = datetime.fromtimestamp(now - length, UTC)
    for _ in range(2):
        fire = trigger.get_next_fire_time(None, after)
        if fire is None:
            return None
        start = fire.timestamp()
        if start + length > now:
            return window(start, start + length)
        after = fire + timedelta(microseconds=1)
    return None


@dataclass(frozen=True, slots=True, kw_only=True)
class Decision:
    """What the windows mean at one moment."""

    now: float
    active: Mapping[DomainKey, Window]
    """Domains in maintenance, each with its window (the one ending last, if several)."""
    draining: frozenset[DomainKey]
    """Domains the control document should disable (draining or in a window with ``drain``)."""
    upcoming: tuple[Window, ...]
    """Windows not started yet whose drain has begun, or starting within a day (the banner's)."""

    def is_active(self, pool: str, url: str) -> bool:
        return (pool, url) in self.active

    def drained(self) -> dict[str, frozenset[str]]:
        """:attr:`draining` per pool, as the control writer takes its automatic decisions."""
        out: dict[str, set[str]] = {}
        for pool, url in self.draining:
            out.setdefault(pool, set()).add(url)
        return {pool: frozenset(urls) for pool, urls in out.items()}


NOTHING = Decision(now=0.0, active={}, draining=frozenset(), upcoming=())

UPCOMING = 86400.0
"""How far ahead the status page announces a window."""


def decide(windows: Sequence[Window], now: float) -> Decision:
    """The decision at ``now`` (the module docstring's table)."""
    active: dict[DomainKey, Window] = {}
    draining: set[DomainKey] = set()
    upcoming: list[Window] = []
    for window in windows:
        if window.active(now):
            for key in window.members():
                if key not in active or window.end > active[key].end:
                    active[key] = window
        if window.draining(now):
            draining.update(window.members())
        if now < window.start and (window.draining(now) or window.start - now <= UPCOMING):
            upcoming.append(window)
    upcoming.sort(key=lambda w: (w.start, w.pool, w.source))
    return Decision(now=now, active=active, draining=frozenset(draining), upcoming=tuple(upcoming))


def windows_at(config: AgentConfig, now: float, extra: Iterable[Window] = ()) -> list[Window]:
    """The windows of ``config``'s ``[[maintenance]]`` tables that matter at ``now`` (one
    occurrence each), then ``extra`` (the run-time ones) whose pool and domains still exist."""
    pools = {pool.name: pool for pool in config.pools}
    out: list[Window] = []
    for index, table in enumerate(config.maintenance):
        domains = config.maintenance_domains(table.pool, table.domains, f"maintenance[{index}]")
        window = occurrence(table, domains, index, now)
        if window is not None:
            out.append(window)
    for window in extra:
        pool = pools.get(window.pool)
        if pool is not None and window.domains <= set(pool.domains):
            out.append(window)
    return out
