"""How late the client's own event loop runs: the slowness slow-call ejection leaves out.

An async attempt's duration is counted on the loop that runs it: from the send to the
moment the loop gets round to the answer. When the application keeps the loop busy (CPU
work between awaits, more tasks than it can serve), every answer is noticed late, and a
healthy domain's calls look slow. Measured (an ``AsyncFailoverTransport`` over two
loopback domains answering at once, 20 tasks, ``SlowCalls(threshold=0.1, rate=0.5,
minimum_calls=5)``, the application blocking the loop 0.15 s out of every 0.155 s): the
primary was ejected, 73 of 93 requests went to the backup, and its probes, slow for the
same reason, kept it out.

So the loop's lateness is the client's, not the domain's: a call is judged on its
duration less the time the loop ran late meanwhile (``RequestPlan._judged``): none of
the 92 requests of the case above moves. Taking the whole verdict away once the loop ran
a quarter of the threshold late would be too much: 200 tasks' calls to a domain
answering in 1 s end together, the loop takes a tenth of a second or more to handle the
answers, and that rule never ejected the domain (0 of 500 requests moved). Judged on
what is left, the domain is ejected after the first wave, as without a measure: the
first 200 requests are the primary's, the 553 after them the backup's.

The measure is a timer that fires every :data:`INTERVAL` on the loop and records how
late it ran (as Node's ``monitorEventLoopDelay`` does); none runs in a thread with no
event loop, so a sync client is judged on its durations alone. It starts as the first
call a verdict will be asked for goes out (``PoolCore`` pools with ``SlowCalls``), and
stops :data:`IDLE` seconds after the last: about 50 timers a second on a loop whose
pools eject slow calls, nothing on any other. No library measures this for us:
``asyncio``'s debug mode logs slow callbacks, at a cost to every callback and without a
figure to read.
"""

from __future__ import annotations

import asyncio
import collections

from ._deadline import _LoopWatch, watch_here

__all__ = ["IDLE", "INTERVAL", "LagMeter", "lateness", "measure"]

# How often the loop's timer fires (seconds), and how long it runs after the last question.
INTERVAL = 0.02
IDLE = 5.0
# The longest span a question covers (seconds): the timer's records kept. Only a timer
# that ran at least NOTABLE late is recorded: on a loop that keeps up, next to none are
# (a record is about 100 bytes; a loop late at every timer keeps KEEP / INTERVAL of them).
KEEP = 60.0
NOTABLE = 0.001


def measure() -> None:
    """Measure how late this thread's event loop runs (if one runs here), from now until
    :data:`IDLE` seconds after the last question: called as a call a verdict will be asked
    for goes out, so that its verdict knows the time it took."""
    watch = watch_here()
    if watch is not None:
        meter = watch.lag
        if meter is None:
            watch.lag = LagMeter(watch)
        else:
            meter.asked()


def lateness(span: float) -> float:
    """How long this thread's event loop ran late (seconds, in all) within the last
    ``span`` seconds of its clock; 0.0 when no asyncio loop runs here. Only what was
    measured (:func:`measure`) is known."""
    watch = watch_here()
    if watch is None:
        return 0.0
    meter = watch.lag
    if meter is None:
        meter = watch.lag = LagMeter(watch)
    return meter.lateness(span)


class LagMeter:
    """One loop's lateness: a timer every :data:`INTERVAL`, and how late each one ran."""

    __slots__ = ("__weakref__", "_asked_at", "_due", "_loop", "_watch", "fired")

    def __init__(self, watch: _LoopWatch) -> None:
        # the loop's deadline watch, held while the meter runs (its timer holds the meter,
        # and the watch holds it only weakly: ``_LoopWatch.lag``)
        self._watch = watch
        loop: asyncio.AbstractEventLoop = watch.loop
        self._loop = loop
        # (when a timer ran, how late), oldest first, of those that ran NOTABLE late: a
        # blocked loop's first timer ran late by as long as it was blocked
        self.fired: collections.deque[tuple[float, float]] = collections.deque(maxlen=int(KEEP / INTERVAL))
        self._asked_at = self._due = loop.time()
        self._arm()

    def asked(self) -> None:
        """Keep measuring (:data:`IDLE` seconds from now)."""
        self._asked_at = self._loop.time()

    def _arm(self) -> None:
        self._due += INTERVAL
        self._loop.call_at(self._due, self._fire)

    def _fire(self) -> None:
        now = self._loop.time()
        if now - self._due >= NOTABLE:
            self.fired.append((now, now - self._due))
        if now - self._asked_at > IDLE:  # nobody asks: stop (the next question starts afresh)
            if self._watch.lag is self:
                self._watch.lag = None
            return
        self._due = now  # the next one INTERVAL after this one ran
        self._arm()

    def lateness(self, span: float) -> float:
        """How long the loop ran late within the last ``span`` seconds, in all: each timer
        that ran late stands for the stretch from when it was due to when it ran (the
        stretches do not overlap: the next one is due after it ran), counted for its part
        within the span, and the timer overdue now for its stretch so far."""
        now = self._loop.time()
        self._asked_at = now
        since = now - span
        late = max(now - max(self._due, since), 0.0)  # the timer due and not run yet: late so far
        for fired, by in reversed(self.fired):
            if fired <= since:
                break
            late += fired - max(fired - by, since)
        return late
