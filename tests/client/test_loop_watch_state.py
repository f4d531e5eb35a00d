"""The async deadline watch's one timer, under any order of arms, disarms and clock moves
(hypothesis stateful, on a loop whose clock the test moves).

``_LoopWatch`` keeps every armed attempt on one loop timer, moved only for an earlier
deadline and re-armed by its own callback. A path that leaves a deadline without a timer
(a cancelled timer not replaced, an earlier deadline that did not move it, a callback that
re-arms too late) would let an attempt run past its time for ever; here it shows as a
deadline passed and not cut, with no real time and no sleeps.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
import os
from collections.abc import Callable
from typing import Any, cast

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from pytest_failover import _deadline
from pytest_failover._deadline import _Limit, _LoopWatch, async_limit


class _Handle:
    """A timer of :class:`_Loop`: ``cancel()`` as asyncio's. It takes no weak reference, as
    some loops' timers (the watch then holds it strongly: ``_deadline._weakly``); asyncio's
    and uvloop's, which do, are the other tests'."""

    __slots__ = ("callback", "cancelled", "when")

    def __init__(self, when: float, callback: Callable[[], object]) -> None:
        self.when = when
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


# How early a loop may run a timer: asyncio runs those due within its clock's resolution,
# and uvloop rounds each timer to a millisecond.
EARLY = 0.001


class _Loop:
    """The two things the watch asks of its loop, ``time()`` and ``call_at()``, on a clock
    that only the test moves; :meth:`run_until` runs the timers due (up to ``EARLY``
    early), earliest first, as a loop does: a callback may set new ones, which run if due
    too, and a timer that keeps setting itself again would spin the loop."""

    def __init__(self) -> None:
        self.now = 0.0
        self._heap: list[tuple[float, int, _Handle]] = []
        self._order = itertools.count()

    def time(self) -> float:
        return self.now

    def call_at(self, when: float, callback: Callable[[], object]) -> _Handle:
        handle = _Handle(when, callback)
        heapq.heappush(self._heap, (when, next(self._order), handle))
        return handle

    def pending(self) -> list[_Handle]:
        return [handle for _, _, handle in self._heap if not handle.cancelled]

    def run_until(self, now: float) -> None:
        self.now = now
        for _ in range(1000):  # bounded: far more than the timers a step sets
            if not self._heap or self._heap[0][0] > now + EARLY:
                return
            _, _, handle = heapq.heappop(self._heap)
            if not handle.cancelled:
                handle.callback()
        raise AssertionError("the loop spins: a timer keeps setting itself for a time already due")


class _Task:
    """What a limit asks of its task: its count of cancellations."""

    def __init__(self) -> None:
        self.cancels = 0
        self.uncancels = 0

    def cancelling(self) -> int:
        return self.cancels - self.uncancels

    def cancel(self) -> bool:
        self.cancels += 1
        return True

    def uncancel(self) -> int:
        self.uncancels += 1
        return self.cancelling()


def _arm(loop: _Loop, task: _Task, seconds: float) -> _Limit:
    """``async_limit(seconds)`` as ``task`` running on ``loop`` arms it."""
    running, task_of = _deadline._running_loop, _deadline._task_of
    _deadline._running_loop = lambda: cast("asyncio.AbstractEventLoop", loop)
    _deadline._task_of = lambda _: cast("asyncio.Task[Any]", task)
    try:
        limit = async_limit(seconds)
    finally:
        _deadline._running_loop, _deadline._task_of = running, task_of
    assert isinstance(limit, _Limit)
    return limit


class OneLoopsDeadlines(RuleBasedStateMachine):
    """Attempts arm and end at any time; the clock moves by any step."""

    def __init__(self) -> None:
        super().__init__()
        self.loop = _Loop()
        self.watch = _LoopWatch(cast("asyncio.AbstractEventLoop", self.loop))
        self.limits: dict[_Limit, _Task] = {}  # armed, as far as their attempts know
        self.passed: set[_Limit] = set()  # whose time the loop has run to
        self.near: set[_Limit] = set()  # ... or to within EARLY of it: it may be cut
        self.ended: list[tuple[_Limit, _Task]] = []

    @rule(seconds=st.sampled_from([0.0, 0.001, 0.01, 0.05, 0.1, 0.3, 1.0, 5.0]))
    def arm(self, seconds: float) -> None:
        task = _Task()
        limit = _arm(self.loop, task, seconds)
        limit.__enter__()
        self.limits[limit] = task

    @precondition(lambda self: bool(self.limits))
    @rule(data=st.data(), cut=st.booleans())
    def end(self, data: st.DataObject, cut: bool) -> None:
        """An attempt ends: in time, or with the cancellation the watch sent it."""
        limit = data.draw(st.sampled_from(sorted(self.limits, key=id)))
        task = self.limits.pop(limit)
        was_cut = task.cancels > 0
        kind = asyncio.CancelledError if was_cut and cut else None
        try:
            limit.__exit__(kind, None if kind is None else kind(), None)
        except TimeoutError:
            assert kind is not None  # only its own cancellation turns into a timeout
        self.ended.append((limit, task))

    @rule(step=st.sampled_from([0.0, 0.0005, 0.001, 0.01, 0.049, 0.05, 0.2, 1.0, 10.0]))
    def advance(self, step: float) -> None:
        self.loop.run_until(self.loop.now + step)
        self.passed |= {limit for limit in self.limits if limit.at <= self.loop.now}
        self.near |= {limit for limit in self.limits if limit.at <= self.loop.now + EARLY}

    @invariant()
    def every_deadline_passed_is_cut_once(self) -> None:
        for limit, task in self.limits.items():
            cut = task.cancels == 1
            assert task.cancels <= 1
            assert cut is (limit not in self.watch.armed)
            if limit in self.passed:
                assert cut, ("not cut", limit.at, self.loop.now)
            elif limit not in self.near:
                assert not cut, ("cut early", limit.at, self.loop.now)

    @invariant()
    def a_timer_waits_for_the_earliest_deadline_armed(self) -> None:
        pending = self.loop.pending()
        assert len(pending) <= 1, "one timer per loop"
        if self.watch.armed:
            (timer,) = pending
            assert timer.when == self.watch.wakes_at <= min(limit.at for limit in self.watch.armed)
        else:
            assert not pending or pending[0].when == self.watch.wakes_at
        if not pending:
            assert self.watch.wakes_at == math.inf

    @invariant()
    def ended_attempts_are_let_go(self) -> None:
        for limit, _ in self.ended:
            assert limit not in self.watch.armed


OneLoopsDeadlines.TestCase.settings = settings(
    max_examples=int(os.environ.get("HYPOTHESIS_EXAMPLES", 150)), stateful_step_count=40, deadline=None
)
TestOneLoopsDeadlines = OneLoopsDeadlines.TestCase
