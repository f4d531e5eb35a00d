"""What the pool knows about slow domains: latency windows, slow-call windows, the
hedge throttle.

Rules and theory of operation
-----------------------------
*Hedging* ("The Tail at Scale"; ``Policy.hedging``) needs, per domain, the
latency at a percentile over a bounded window: :class:`LatencyWindow` keeps the
durations of the domain's last ``LATENCY_SAMPLES`` answers (failures say nothing
about how fast the domain answers; an attempt cut off because its hedge won counts
with the time it ran, a lower bound of its answer's: left out, the window would
keep only the answers that beat their hedges, and the delay would sink) in arrival
order and sorted, so adding one is
two ``bisect`` operations on a short list and the percentile is an index. Until
it holds ``MIN_SAMPLES`` answers it has no opinion, and the hedge waits
``UNKNOWN_DELAY``.

Hedges are throttled by :class:`HedgeThrottle`, a token bucket per pool that
starts empty: every hedgeable request earns ``max_ratio`` of a token, a hedge
costs one, and at most ``HEDGE_BURST`` tokens are saved up. So at any moment the
pool's hedges are at most ``max_ratio`` of its hedgeable requests, and after a
quiet spell a burst of slow answers may be hedged a few at a time. A burst of 20
was tried: in the tail benchmark's 50-task run the hedges it let through together
each closed a connection (a cut HTTP/1.1 attempt's connection cannot be reused), the
new connections slowed the next requests past the delay, and p50 rose to 15-25 ms
(one run; a second, on a disturbed machine, 60-71 ms) where 5 gave 2.3 ms.

When hedges are being refused (the bucket ran dry less than ``CONTENTION``
seconds ago), the last token is kept for a request that was refused a hedge
before: a refused request asks again one delay later, and by then the merely
slowish requests that crowded it out have mostly answered, so the ones still
waiting are the stuck ones the hedge is for. Without the rule, under a loaded
client (50 tasks on a busy machine) requests held 1 s were refused for up to
1.25 s while newer ones took every token as it was earned. On a quiet machine
it changes nothing measurable (the tail benchmark's 50-task mode, side by side
with plain first-come tokens: p99.9 within the runs' noise). The bound stays
``max_ratio``: the rule only chooses who gets a token.

*Slow-call ejection* (resilience4j's ``slowCallRateThreshold``;
``Policy.slow_calls``) counts, per domain, the calls of the last ``window``
seconds and how many took at least ``threshold`` seconds, in
``SLOW_CALL_BUCKETS`` buckets of ``window / SLOW_CALL_BUCKETS`` seconds (so the
window slides in steps of a tenth and costs the same at any traffic). A call
still in flight that has already taken ``threshold`` is known to be slow: each
time a call ends, the ones in flight past the threshold are counted too (once),
so ten concurrent requests stuck on a slow domain eject it when the first of
them ends, not after the next ten were sent there as well (19 primary requests
against 10 in the slow-primary benchmark's concurrent run).
:meth:`SlowCallWindow.add` says when the share of slow calls reaches ``rate``
with at least ``minimum_calls`` calls: the pool then opens the domain's breaker
(``failover.reason = "slow_calls"``) and starts the window afresh; the domain comes
back through the breaker's single probe. A probe that answers slowly counts as a
failed probe, so a domain that is still slow stays out.

Slowness is relative (``PoolCore.faster_elsewhere``): both rules apply only while
another enabled domain's breaker is closed and its latest call was not slow (or it
had none). When every domain is slow at once, slow answers beat none, and the slow
part is often the client itself: an event loop with more tasks than it can serve
times every answer late. Without that condition, 200 such tasks ejected a healthy
backup (users got 503s), and a recovered primary's probes kept failing, so traffic
never came back to it. The condition does not cover a backup that had no calls yet: an
async client's event loop is therefore measured too (:mod:`._looplag`), and a call is
judged on its duration less the time the loop ran late meanwhile.

Pure arithmetic, time passed in; the pool's lock serialises access.
"""

from __future__ import annotations

import bisect
import collections
import math
from collections.abc import Callable

from ._policy import Hedging, SlowCalls

__all__ = [
    "CONTENTION",
    "HEDGE_BURST",
    "LATENCY_SAMPLES",
    "MIN_SAMPLES",
    "SLOW_CALL_BUCKETS",
    "UNKNOWN_DELAY",
    "HedgeThrottle",
    "LatencyWindow",
    "SlowCallWindow",
]

# The answers a latency window holds, and how many it needs before it has a percentile.
LATENCY_SAMPLES = 256
MIN_SAMPLES = 16
# The hedge delay of a domain whose latency is not known yet (seconds).
UNKNOWN_DELAY = 1.0
# Tokens a hedge throttle saves up at most.
HEDGE_BURST = 5.0
# Seconds after a hedge was refused during which the last token waits for a request
# that was refused before (longer than any useful hedge delay).
CONTENTION = 1.0
# The buckets of a slow-call window.
SLOW_CALL_BUCKETS = 10


class LatencyWindow:
    """The durations of one domain's last answers, and their percentiles."""

    __slots__ = ("_arrived", "_sorted")

    def __init__(self) -> None:
        self._arrived: collections.deque[float] = collections.deque()
        self._sorted: list[float] = []

    def __len__(self) -> int:
        return len(self._sorted)

    def add(self, duration: float) -> None:
        if len(self._arrived) == LATENCY_SAMPLES:
            oldest = self._arrived.popleft()
            del self._sorted[bisect.bisect_left(self._sorted, oldest)]
        self._arrived.append(duration)
        bisect.insort(self._sorted, duration)

    def percentile(self, p: float) -> float | None:
        """The duration that ``p`` (0..1] of the window's answers did not exceed, or
        None with fewer than ``MIN_SAMPLES`` answers."""
        count = len(self._sorted)
        if count < MIN_SAMPLES:
            return None
        return self._sorted[min(count - 1, max(0, math.ceil(p * count) - 1))]


class HedgeThrottle:
    """Keeps a pool's hedges at most ``max_ratio`` of its hedgeable requests.

    Each hedgeable request earns ``max_ratio`` of a token, up to ``HEDGE_BURST``. A
    request only counts itself (:meth:`earn`, under the pool's lock); its share is
    credited when the tokens are next looked at (:attr:`tokens`, by :meth:`take`): the
    same tokens as crediting each at once (a cap reached stays reached while more is
    added), without the sum and the cap on every request (25 opcodes -> 9, python -m
    benchmarks opcodes)."""

    __slots__ = ("_credited", "_tokens", "hedges", "ratio", "refused_at", "requests")

    def __init__(self, hedging: Hedging) -> None:
        self.ratio = hedging.max_ratio
        self._tokens = 0.0
        self.requests = 0  # hedgeable requests seen, and hedges let through (for the tests)
        self._credited = 0  # ... of which the tokens count so far
        self.hedges = 0
        self.refused_at = -math.inf  # when a hedge was last refused

    def earn(self) -> None:
        """A hedgeable request began."""
        self.requests += 1

    @property
    def tokens(self) -> float:
        """The tokens saved up, every request seen so far credited."""
        owed = self.requests - self._credited
        if owed:
            self._credited = self.requests
            if self._tokens < HEDGE_BURST:  # saved up in full, as on a quiet pool: nothing to add
                self._tokens = min(HEDGE_BURST, self._tokens + owed * self.ratio)
        return self._tokens

    @tokens.setter
    def tokens(self, value: float) -> None:
        self._credited = self.requests  # what was earned before is spent or saved in ``value``
        self._tokens = value

    def take(self, now: float, *, again: bool = False) -> bool:
        """May a hedge go now? Takes its token if so. ``again``: this request was
        refused a hedge before; while hedges are being refused, the last token is
        only for such a request (see the module's rules)."""
        if self.refuses(now, again=again):
            return False
        self._tokens -= 1.0
        self.hedges += 1
        return True

    def refuses(self, now: float, *, again: bool = False) -> bool:
        """Would a hedge be refused now (:meth:`take`'s rule)? If so, that is a refusal:
        noted, as :meth:`take` notes it."""
        contended = now - self.refused_at < CONTENTION
        if self.tokens < (1.0 if again or not contended else 2.0):
            self.refused_at = now
            return True
        return False


class SlowCallWindow:
    """Calls to one domain over a sliding window, and how many of them were slow."""

    __slots__ = ("_calls", "_counted", "_flying", "_slow", "_start", "_width", "config", "last")

    def __init__(self, config: SlowCalls) -> None:
        self.config = config
        self._width = config.window / SLOW_CALL_BUCKETS
        self._start = 0  # the bucket index the first slot holds
        self._calls = [0] * SLOW_CALL_BUCKETS
        self._slow = [0] * SLOW_CALL_BUCKETS
        self._flying: dict[object, float] = {}  # calls in flight: when each began
        self._counted: set[object] = set()  # ... and those already counted as slow
        self.last: float | None = None  # how long the latest call that ended took

    def is_slow(self, duration: float) -> bool:
        return duration >= self.config.threshold

    def began(self, call: object, now: float) -> None:
        """A call (any hashable key, ended by :meth:`add` or :meth:`forget`) is sent."""
        self._flying[call] = now

    def forget(self, call: object) -> None:
        """A call ended without an outcome."""
        self._flying.pop(call, None)
        self._counted.discard(call)

    def add(self, now: float, duration: float, call: object = None, judged: Callable[[float], float] | None = None) -> bool:
        """Count a call that took ``duration`` at ``now``; when it was slow, the calls in
        flight already past the threshold count too, each judged on ``judged`` of the time
        it has run (the client's own lateness left out, ``RequestPlan._judged``). True
        when the domain's slow calls reach the rate (the window is then cleared).

        Only a slow call's end counts the calls in flight: concurrent calls stuck on a slow
        domain eject it when the first ends, but an answer that came in time is no
        evidence against the calls still waiting. Their time so far holds the client's own
        delays, which nothing measures for a call without its answer (threads waiting for
        the GIL: twelve event loops of ten tasks in threads, on 2 cores, ejected a healthy
        primary in about one run in four, 3 calls counted in flight against 2 answers that
        came in time)."""
        self.last = duration
        index = int(now // self._width)
        self._slide(index)
        slot = index % SLOW_CALL_BUCKETS
        self._flying.pop(call, None)
        threshold = self.config.threshold
        if call in self._counted:  # counted as slow while in flight
            self._counted.discard(call)
        else:
            self._calls[slot] += 1
            if duration >= threshold:
                self._slow[slot] += 1
        if duration >= threshold:
            since = now - threshold
            for other, began in self._flying.items():
                if began <= since and other not in self._counted and (judged is None or judged(now - began) >= threshold):
                    self._counted.add(other)
                    self._calls[slot] += 1
                    self._slow[slot] += 1
        calls = sum(self._calls)
        if calls < self.config.minimum_calls or sum(self._slow) < self.config.rate * calls:
            return False
        self.clear()
        return True

    def clear(self) -> None:
        """Start afresh. Calls in flight that were counted stay counted: they are the
        evidence the window had, not news for the next one."""
        self._calls = [0] * SLOW_CALL_BUCKETS
        self._slow = [0] * SLOW_CALL_BUCKETS

    def _slide(self, index: int) -> None:
        """Empty the buckets that fell out of the window by bucket ``index``."""
        newest = self._start + SLOW_CALL_BUCKETS - 1
        if index <= newest:
            return
        for stale in range(max(self._start, index - SLOW_CALL_BUCKETS + 1), index + 1):
            if stale > newest:
                slot = stale % SLOW_CALL_BUCKETS
                self._calls[slot] = 0
                self._slow[slot] = 0
        self._start = index - SLOW_CALL_BUCKETS + 1

    @property
    def counts(self) -> tuple[int, int]:
        """(calls, slow calls) in the window as of the latest call."""
        return sum(self._calls), sum(self._slow)
