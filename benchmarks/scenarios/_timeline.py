"""Scripted fault timelines: what each fake domain suffers, phase by phase, and when it really did.

A :class:`Timeline` is a list of :class:`Phase` values, each lasting some seconds and
naming the :class:`State` of some domains (a domain not named keeps its state). A
:class:`Driver` applies it to a ``FakeDomains`` from a thread of its own and keeps a
:class:`Record` of every change with two instants: just before the simulator was
told and just after it returned. Healthy windows are taken conservatively: a domain
counts as healthy from *after* it was healed until *before* its next fault was set,
so "some domain could have served this request" never over-counts. Within one
phase change, domains that become healthy are healed before the others fail (make
before break), so a timeline that keeps one domain up at every step really has one
up at every instant.

Every wait is bounded; the driver thread stops at the end of the timeline or when
asked, whichever comes first.
"""

from __future__ import annotations

import bisect
import random
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from pytest_failover import faults
from pytest_failover.simulator import FakeDomains

__all__ = [
    "DOWN_503",
    "NXDOMAIN",
    "RECOVERING",
    "REFUSED",
    "UP",
    "Change",
    "Driver",
    "Phase",
    "Record",
    "State",
    "Timeline",
    "alternate",
    "trickling",
]


@dataclass(frozen=True, slots=True)
class State:
    """A named condition of one domain and the simulator fault that produces it."""

    name: str
    fault: faults.Fault

    @property
    def healthy(self) -> bool:
        """Only ``up`` serves requests within any deadline."""
        return isinstance(self.fault, faults.Healthy)


UP = State("up", faults.healthy())
DOWN_503 = State("503", faults.status(503))
REFUSED = State("refused", faults.refused())
NXDOMAIN = State("dns", faults.dns_nxdomain())
RECOVERING = State("recovering", faults.status(503, b"recovering"))


def trickling(interval: float, size: int) -> State:
    """Headers at once, then ``size`` body bytes one every ``interval`` seconds."""
    return State(f"trickle {interval:g} s/byte", faults.trickle(interval, b"x" * size))


@dataclass(frozen=True, slots=True)
class Phase:
    """``seconds`` long; ``states`` maps a host to its state for the phase."""

    seconds: float
    states: Mapping[str, State]

    def __post_init__(self) -> None:
        if not self.seconds >= 0:
            raise ValueError(f"Phase.seconds must be >= 0, got {self.seconds!r}")


@dataclass(frozen=True, slots=True)
class Timeline:
    """Phases in order; the first one must name every host."""

    phases: tuple[Phase, ...]

    def __post_init__(self) -> None:
        if not self.phases:
            raise ValueError("a timeline needs at least one phase")

    @classmethod
    def of(cls, *phases: Phase) -> Timeline:
        return cls(tuple(phases))

    @property
    def hosts(self) -> tuple[str, ...]:
        return tuple(self.phases[0].states)

    @property
    def seconds(self) -> float:
        return sum(p.seconds for p in self.phases)

    def starts(self) -> list[float]:
        """Offset of each phase from the start of the timeline."""
        out, at = [], 0.0
        for phase in self.phases:
            out.append(at)
            at += phase.seconds
        return out


@dataclass(frozen=True, slots=True)
class Change:
    """A domain was given ``state``: the simulator was told at ``before`` and had it at ``after``."""

    host: str
    state: State
    before: float
    after: float


@dataclass
class Record:
    """Every change the driver made, per host, in order (monotonic clock)."""

    changes: dict[str, list[Change]] = field(default_factory=dict)
    started: float = 0.0
    phase_at: list[float] = field(default_factory=list)  # when each phase was applied

    def add(self, change: Change) -> None:
        self.changes.setdefault(change.host, []).append(change)

    def state_at(self, host: str, t: float) -> State | None:
        """The state ``host`` had been told most recently at ``t`` (None before the first)."""
        changes = self.changes.get(host, [])
        i = bisect.bisect_right([c.before for c in changes], t)
        return changes[i - 1].state if i else None

    def healthy_windows(self, host: str) -> list[tuple[float, float]]:
        """Intervals during which ``host`` was surely healthy."""
        changes = self.changes.get(host, [])
        out = []
        for i, change in enumerate(changes):
            if not change.state.healthy:
                continue
            until = changes[i + 1].before if i + 1 < len(changes) else float("inf")
            if until > change.after:
                out.append((change.after, until))
        return out

    def any_healthy(self, start: float, end: float, hosts: Iterable[str] | None = None) -> bool:
        """Was some domain surely healthy at some instant of ``[start, end]``?"""
        for host in hosts if hosts is not None else self.changes:
            for since, until in self.healthy_windows(host):
                if since <= end and until >= start:
                    return True
        return False

    def windows(self, host: str, name: str) -> list[tuple[float, float]]:
        """Intervals (from the moment the simulator was told) during which ``host`` was in state ``name``."""
        changes = self.changes.get(host, [])
        out = []
        for i, change in enumerate(changes):
            if change.state.name == name:
                until = changes[i + 1].before if i + 1 < len(changes) else float("inf")
                out.append((change.before, until))
        return out


class Driver:
    """Applies a timeline to a ``FakeDomains`` from a background thread (bounded in time)."""

    def __init__(
        self,
        fd: FakeDomains,
        timeline: Timeline,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.fd = fd
        self.timeline = timeline
        self.clock = clock
        self.record = Record()
        self._current: dict[str, State] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None

    def _apply(self, states: Mapping[str, State]) -> None:
        changed = [(h, s) for h, s in states.items() if self._current.get(h) != s]
        # make before break: heal first, then set the faults
        for host, state in sorted(changed, key=lambda hs: not hs[1].healthy):
            before = self.clock()
            if state.healthy:
                self.fd.heal(host)
            else:
                self.fd.fail(host, state.fault)
            self.record.add(Change(host, state, before, self.clock()))
            self._current[host] = state
        self.record.phase_at.append(self.clock())

    def start(self) -> float:
        """Apply the first phase now (before any load), then the rest on time; returns the start."""
        self._apply(self.timeline.phases[0].states)
        self.record.started = start = self.clock()
        self._thread = threading.Thread(target=self._run, args=(start,), name="scenario timeline", daemon=True)
        self._thread.start()
        return start

    def _run(self, start: float) -> None:
        try:
            offsets = self.timeline.starts()
            for phase, offset in zip(self.timeline.phases[1:], offsets[1:], strict=True):
                wait = start + offset - self.clock()
                if self._stop.wait(max(0.0, wait)):
                    return
                self._apply(phase.states)
        except BaseException as exc:  # reported by stop(); the load keeps its bounds
            self.error = exc

    @property
    def end(self) -> float:
        """When the timeline's last phase is over."""
        return self.record.started + self.timeline.seconds

    def stop(self) -> Record:
        """Stop changing states (the domains keep their last one); returns the record."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10.0)
        if self.error is not None:
            raise RuntimeError("the timeline driver failed") from self.error
        return self.record


def alternate(
    hosts: Sequence[str], down: Sequence[State], *, slots: int, seconds: float, seed: int
) -> Timeline:
    """``slots`` phases of ``seconds``; in each, one host (taking turns) is up and the others
    get one of ``down`` (drawn with ``seed``): at every instant exactly one, at least one, is up."""
    rng = random.Random(seed)
    phases = []
    for i in range(slots):
        healthy = hosts[i % len(hosts)]
        phases.append(
            Phase(seconds, {h: UP if h == healthy else rng.choice(list(down)) for h in hosts})
        )
    return Timeline(tuple(phases))
