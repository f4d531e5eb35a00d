"""The six scenarios of issue #9, item 1, each a timeline, a load and its own key figures.

Every scenario function takes an :class:`~._run.Env`, one client and its sizes, and
returns the :class:`~._run.Run`, whose ``outcome.extra`` holds the scenario's figures.
Sizes come from :class:`Sizes`: ``FULL`` for the benchmark, ``SMALL`` for CI.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, replace

from ._clients import Client
from ._load import Burst, Sample, Sustained
from ._metrics import max_in_window, percentile
from ._run import Env, Run
from ._sides import RID
from ._timeline import (
    DOWN_503,
    NXDOMAIN,
    RECOVERING,
    REFUSED,
    UP,
    Phase,
    State,
    Timeline,
    alternate,
    trickling,
)

__all__ = [
    "BACKUP",
    "COLD_STATES",
    "FULL",
    "PRIMARY",
    "REGION",
    "SMALL",
    "Sizes",
    "State",
    "cold_burst",
    "failback",
    "flapping",
    "rolling",
    "total_outage",
    "trickle",
]

# Names under .test (RFC 6761): they exist only inside the simulator.
PRIMARY = "primary.scenario.test"
BACKUP = "backup.scenario.test"
REGION = "region.scenario.test"

COLD_STATES: dict[str, State] = {"refused": REFUSED, "dns": NXDOMAIN, "503": DOWN_503}


@dataclass(frozen=True, slots=True, kw_only=True)
class Sizes:
    """How big each scenario is (counts, seconds) and the scaled breaker cooldown."""

    cooldown: float
    burst_tasks: int
    burst_threads: int
    flap_tasks: int
    flap_threads: int
    flap_seconds: float
    flap_period: float
    failback_tasks: int
    failback_threads: int
    failback_dead: float
    failback_recovering: float
    failback_up: float
    rolling_tasks: int
    rolling_threads: int
    rolling_phase: float
    trickle_tasks: int
    trickle_threads: int
    trickle_deadline: float
    trickle_interval: float
    trickle_bytes: int
    outage_tasks: int
    outage_threads: int
    outage_seconds: float
    outage_drain: float
    think: float = 0.02
    # Flapping keeps its offered load (tasks / think) under what the in-process simulator
    # serves on 2 cores (about 300 requests/s): above it, the client's own event loop lags
    # by hundreds of milliseconds behind 0.5 s flips, and the figure measures the overload,
    # not the failover decisions (at 100 tasks and 0.02 s the gap was 5 to 20 %; at 0.5 s, 0).
    flap_think: float = 0.5

    def longer(self, factor: float) -> Sizes:
        """Every duration multiplied by ``factor`` (counts and the cooldown unchanged)."""
        return replace(
            self,
            flap_seconds=self.flap_seconds * factor,
            failback_recovering=self.failback_recovering * factor,
            failback_up=self.failback_up * factor,
            rolling_phase=self.rolling_phase * factor,
            outage_seconds=self.outage_seconds * factor,
        )


FULL = Sizes(
    cooldown=1.0,
    burst_tasks=1000, burst_threads=200,
    flap_tasks=500, flap_threads=16, flap_seconds=20.0, flap_period=1.0,
    failback_tasks=200, failback_threads=8,
    failback_dead=3.0, failback_recovering=5.0, failback_up=4.0,
    rolling_tasks=200, rolling_threads=8, rolling_phase=2.0,
    trickle_tasks=50, trickle_threads=8,
    trickle_deadline=1.0, trickle_interval=0.4, trickle_bytes=16,
    outage_tasks=200, outage_threads=8, outage_seconds=6.0, outage_drain=1.0,
    flap_think=2.5,
)  # fmt: skip

SMALL = Sizes(
    cooldown=0.5,
    burst_tasks=100, burst_threads=30,
    # ~100 requests/s: at 200 (100 tasks), three CPU-bound processes on the 2 cores
    # (CI's two workers and one more) made the client lag its flips: gap 2.5 %, overload.
    flap_tasks=50, flap_threads=4, flap_seconds=6.0, flap_period=0.5,
    failback_tasks=40, failback_threads=4,
    # healthy for 2.5 s: the share on the primary is read from 2 cooldowns (1 s) after it
    # recovered; at 1.5 s, a client lagging its timeline under load had no request left there
    failback_dead=1.0, failback_recovering=2.0, failback_up=2.5,
    rolling_tasks=40, rolling_threads=4, rolling_phase=0.6,
    trickle_tasks=8, trickle_threads=4,
    trickle_deadline=0.6, trickle_interval=0.4, trickle_bytes=6,
    outage_tasks=40, outage_threads=4, outage_seconds=2.5, outage_drain=0.5,
)  # fmt: skip


def _side(sample_rid: str) -> str:
    """``async`` or ``thread``, from a request id ``<tag>/a12-3`` or ``<tag>/t4-0``."""
    return "async" if sample_rid.split("/", 1)[1].startswith("a") else "thread"


def _by_side(samples: list[Sample]) -> dict[str, list[Sample]]:
    out: dict[str, list[Sample]] = {}
    for sample in samples:
        out.setdefault(sample.side, []).append(sample)
    return out


# -- 1. cold burst --------------------------------------------------------------------------


def cold_burst(env: Env, client: Client, primary: State, *, sizes: Sizes, side: str) -> Run:
    """A fresh transport; the primary ``primary`` (refused, NXDOMAIN or 503), the backup
    healthy; every request fired at once from async tasks (``side="async"``) or threads."""
    timeline = Timeline.of(Phase(0.0, {PRIMARY: primary, BACKUP: UP}))
    load = Burst(tasks=sizes.burst_tasks) if side == "async" else Burst(threads=sizes.burst_threads)
    run = env.execute(client, timeline, load)
    run.outcome.extra["user-visible failures"] = run.outcome.failed
    return run


# -- 2. flapping ----------------------------------------------------------------------------


def flapping(env: Env, client: Client, *, sizes: Sizes, seed: int = 9) -> Run:
    """Two domains take turns: one answers 200 while the other answers 503 or refuses;
    many tasks and threads for the whole time."""
    slots = max(2, math.ceil(sizes.flap_seconds / sizes.flap_period))
    timeline = alternate(
        [PRIMARY, BACKUP], [DOWN_503, REFUSED], slots=slots, seconds=sizes.flap_period, seed=seed
    )
    load = Sustained(sizes.flap_tasks, sizes.flap_threads, timeline.seconds, think=sizes.flap_think)
    run = env.execute(client, timeline, load, seed=seed)
    run.outcome.extra["availability gap %"] = round(100 * run.outcome.gap_share, 3)
    run.outcome.extra["switches"] = slots - 1
    return run


# -- 3. failback ----------------------------------------------------------------------------


def failback(env: Env, client: Client, *, sizes: Sizes) -> Run:
    """The primary refuses (traffic moves to the backup), then answers 503 while it
    recovers, then is healthy: how often the recovering primary is tried, per cooldown
    and per transport, and how soon traffic returns to it."""
    timeline = Timeline.of(
        Phase(sizes.failback_dead, {PRIMARY: REFUSED, BACKUP: UP}),
        Phase(sizes.failback_recovering, {PRIMARY: RECOVERING, BACKUP: UP}),
        Phase(sizes.failback_up, {PRIMARY: UP, BACKUP: UP}),
    )
    load = Sustained(sizes.failback_tasks, sizes.failback_threads, timeline.seconds, think=sizes.think)
    run = env.execute(client, timeline, load)
    cooldown = sizes.cooldown
    record = run.record
    (rec_from, rec_until), = record.windows(PRIMARY, RECOVERING.name)
    (dead_from, dead_until), = record.windows(PRIMARY, REFUSED.name)
    (up_from, _), = [w for w in record.healthy_windows(PRIMARY) if w[0] >= rec_until]
    extra = run.outcome.extra
    recovering = [r for r in run.seen[PRIMARY].requests if r.fault == RECOVERING.fault]
    by_side_recovering: dict[str, list[float]] = {"async": [], "thread": []}
    for r in recovering:
        by_side_recovering[_side(r.headers[RID])].append(run.server_time(r.time))
    by_side_dead: dict[str, list[float]] = {"async": [], "thread": []}
    for call in run.calls:
        if call.host == PRIMARY and dead_from + cooldown <= call.at < dead_until:
            by_side_dead[_side(call.rid)].append(call.at)
    windows = (rec_until - rec_from) / cooldown
    for side in ("async", "thread"):
        extra[f"{side}: max requests reaching the recovering primary per cooldown"] = max_in_window(
            by_side_recovering[side], cooldown
        )
        extra[f"{side}: requests reaching the recovering primary"] = len(by_side_recovering[side])
        extra[f"{side}: max attempts on the dead primary per cooldown (after the first)"] = max_in_window(
            by_side_dead[side], cooldown
        )
    extra["cooldowns while recovering"] = round(windows, 2)
    for side, samples in _by_side(run.drive.samples).items():
        back = [s for s in samples if s.start >= up_from and s.served_by == PRIMARY and not s.failed]
        extra[f"{side}: failback after (s)"] = round(min(s.end for s in back) - up_from, 3) if back else None
        late = [s for s in samples if s.start >= up_from + 2 * cooldown]
        on_primary = sum(s.served_by == PRIMARY for s in late)
        extra[f"{side}: share on the primary 2 cooldowns after recovery"] = (
            round(on_primary / len(late), 3) if late else None
        )
    return run


# -- 4. rolling outage ----------------------------------------------------------------------


def rolling(env: Env, client: Client, *, sizes: Sizes) -> Run:
    """A down, then B down while A recovers, then C down while B recovers, then all up:
    at every instant some domain is up."""
    a, b, c = PRIMARY, BACKUP, REGION
    p = sizes.rolling_phase
    timeline = Timeline.of(
        Phase(p, {a: REFUSED, b: UP, c: UP}),
        Phase(p, {a: RECOVERING, b: NXDOMAIN, c: UP}),
        Phase(p, {a: UP, b: RECOVERING, c: DOWN_503}),
        Phase(p, {a: UP, b: UP, c: RECOVERING}),
        Phase(p, {a: UP, b: UP, c: UP}),
    )
    load = Sustained(sizes.rolling_tasks, sizes.rolling_threads, timeline.seconds, think=sizes.think)
    run = env.execute(client, timeline, load)
    run.outcome.extra["availability gap %"] = round(100 * run.outcome.gap_share, 3)
    served = Counter(s.served_by for s in run.drive.samples if not s.failed)
    run.outcome.extra["served by"] = dict(served.most_common())
    return run


# -- 5. slow-drip primary -------------------------------------------------------------------


def trickle(env: Env, client: Client, *, sizes: Sizes, side: str) -> Run:
    """The primary sends its headers, then its body a byte every ``trickle_interval`` s;
    the backup is healthy. By how much is the deadline exceeded?"""
    state = trickling(sizes.trickle_interval, sizes.trickle_bytes)
    timeline = Timeline.of(Phase(0.0, {PRIMARY: state, BACKUP: UP}))
    if side == "async":
        load = Burst(tasks=sizes.trickle_tasks)
    elif side == "thread":
        load = Burst(threads=sizes.trickle_threads)
    else:
        load = Burst(tasks=sizes.trickle_tasks, threads=sizes.trickle_threads)
    deadline = sizes.trickle_deadline
    run = env.execute(client, timeline, load, deadline=deadline)
    over = [s.latency - deadline for s in run.drive.samples]
    extra = run.outcome.extra
    extra["deadline (s)"] = deadline
    extra["max over the deadline (ms)"] = round(1000 * max(over), 1) if over else None
    extra["p99 over the deadline (ms)"] = round(1000 * percentile(over, 99), 1) if over else None
    return run


# -- 6. total outage ------------------------------------------------------------------------


def total_outage(env: Env, client: Client, *, sizes: Sizes) -> Run:
    """Every domain dead (refused, 503, NXDOMAIN): attempts per request once the retry
    budget has drained (requests started ``outage_drain`` s or more into the outage)."""
    timeline = Timeline.of(
        Phase(sizes.outage_seconds, {PRIMARY: REFUSED, BACKUP: DOWN_503, REGION: NXDOMAIN})
    )
    load = Sustained(sizes.outage_tasks, sizes.outage_threads, timeline.seconds, think=sizes.think)
    run = env.execute(client, timeline, load)
    drained_at = run.drive.started + sizes.outage_drain
    late = {s.rid for s in run.drive.samples if s.start >= drained_at}
    network = Counter(c.rid for c in run.calls if c.rid in late)
    extra = run.outcome.extra
    extra["requests once drained"] = len(late)
    extra["attempts per request once drained"] = round(sum(network.values()) / len(late), 3) if late else None
    if client.reports_attempts:
        reported = sum(len(s.attempts or ()) for s in run.drive.samples if s.rid in late)
        extra["reported attempts per request once drained"] = round(reported / len(late), 3) if late else None
    return run
