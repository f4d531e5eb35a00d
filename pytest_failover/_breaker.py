"""Per-domain circuit breakers: one notion of "this domain is failing".

Rules and theory of operation
-----------------------------
A breaker is the whole health record of one domain in one transport. Stickiness
and the breaker read the same record, so they cannot disagree.

Breaker states (the ``failover.breaker.state`` gauge) and their transitions::

    state      event                    next state   what else
    ---------  -----------------------  -----------  ---------------------------------
    CLOSED     success                  CLOSED       failures = 0, suspicion cleared
    CLOSED     failure (< threshold)    CLOSED       failures += 1, suspect from now
    CLOSED     failure (= threshold)    OPEN         open for one cooldown
    CLOSED     too many slow calls      OPEN         open for one cooldown (``eject``)
    OPEN       probe (cooldown over,    HALF_OPEN    the one probe is in flight
               or an early probe)
    HALF_OPEN  probe succeeded          CLOSED       failures = 0, suspicion cleared
    HALF_OPEN  probe failed             OPEN         open for one more cooldown
               (or answered slowly)
    HALF_OPEN  probe abandoned          OPEN         due again at once

A closed breaker that failed within the last cooldown is *suspect*: with
``sticky`` it ranks behind domains that work, which is how traffic stays on a
backup. Once that cooldown is over the domain is *due*: the next request that
chooses it holds a probe lease, exactly like a half-open probe, and everybody
else keeps using the domain that works until the probe reports. So failback
sends one real request per cooldown to a recovering domain, whether or not its
breaker ever opened.

The *standing* of a domain (:meth:`Breaker.standing`) is what the pool's choice
reads; it is derived from the state, never stored::

    standing  when                                                    chosen
    --------  ------------------------------------------------------  ---------------------
    HEALTHY   closed, not suspect (or not sticky)                     first, in pool order
    DUE       open with its cooldown over; suspect a cooldown ago     first, as the probe
    SUSPECT   closed, failed within the cooldown (sticky)             behind the others
    PROBING   its one probe is in flight (here or in another process) never
    OPEN      open within its cooldown, for a tenth of it at least    only as an early probe
    RESTING   open (or re-opened) less than a tenth of a cooldown ago never

An early probe (the pool's rule for when every other domain is out) can only
reach a domain that has rested a tenth of its cooldown since it opened, so a
dead pool sees at most ten early probes per domain and cooldown, and a request
right after a failed probe does not probe the same domain again at once.

Late outcomes carry no information about the current episode: an attempt that
started before the domain's latest failure cannot clear the suspicion, one that
started before its latest recovery cannot count against it, and in OPEN and
HALF_OPEN only the probe's own outcome counts.

Shared health (``pytest_failover.shared``) brings other processes' word about a
domain, applied under the pool's lock like any event, with the same rule: while a
probe of this process is in flight only its own outcome counts, so the word is
ignored (a late outcome of the fleet)::

    state      word from another process   next state   what else
    ---------  --------------------------  -----------  ------------------------------
    CLOSED     its attempt failed          CLOSED/OPEN  failures += 1, as a failure here
    CLOSED     it opened the domain        OPEN         until its deadline; suspect now
    OPEN       it opened the domain        OPEN         the later of the two deadlines
    OPEN       its probe succeeded         CLOSED       failures = 0, suspicion cleared
    CLOSED     its probe succeeded         CLOSED       failures = 0, suspicion cleared
    CLOSED     it moved off the domain     CLOSED       suspect from now (if it was not)
    any        it holds the probe lease    (same)       PROBING until it reports, or the
                                                        lease expires (``release_remote``)

Time is always passed in (seconds on a monotonic clock); nothing here sleeps,
reads a clock or does I/O. Callers serialise access (the pool's lock).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from .semconv import BREAKER_CLOSED, BREAKER_GAUGE, BREAKER_HALF_OPEN, BREAKER_OPEN

__all__ = ["Breaker", "BreakerState", "BreakerTransition", "Standing"]


class BreakerState(str, enum.Enum):
    """A breaker's state; the values are ``semconv.BREAKER_STATES``."""

    CLOSED = BREAKER_CLOSED
    HALF_OPEN = BREAKER_HALF_OPEN
    OPEN = BREAKER_OPEN

    @property
    def gauge(self) -> int:
        """The value of the ``failover.breaker.state`` gauge (``semconv.BREAKER_GAUGE``)."""
        return _GAUGE[self]


_GAUGE = {state: BREAKER_GAUGE[state.value] for state in BreakerState}

# The members every request reads, as module globals. On CPython 3.11 a member read
# through its class (``BreakerState.CLOSED``) costs 170 ns, as EnumType's
# ``__getattr__`` defeats the interpreter's attribute cache, against 20 ns for a global
# (timeit); see the happy-path note in docs/benchmarks.md.
_CLOSED = BreakerState.CLOSED
_OPEN = BreakerState.OPEN


class Standing(enum.Enum):
    """How the pool's choice sees a domain now (see the module's table). Each
    standing says what the choice needs of it:

    - ``admissible``: an ordinary attempt may be sent to it;
    - ``lease``: the attempt chosen for it takes the domain's probe lease;
    - ``suspect``: it ranks behind the domains that work;
    - ``early``: it may be probed early, when every other domain is out.
    """

    #          label       admissible  lease  suspect  early
    HEALTHY = ("healthy", True, False, False, False)
    DUE = ("due", True, True, False, False)
    SUSPECT = ("suspect", True, False, True, False)
    PROBING = ("probing", False, False, False, False)
    OPEN = ("open", False, True, False, True)
    RESTING = ("resting", False, False, False, False)

    def __init__(self, label: str, admissible: bool, lease: bool, suspect: bool, early: bool) -> None:
        self.label = label
        self.admissible = admissible
        self.lease = lease
        self.suspect = suspect
        self.early = early


_HEALTHY = Standing.HEALTHY  # read by every request: see _CLOSED

# The fields ``Breaker.quiet`` is made of.
_QUIET_FIELDS = frozenset({"state", "failed_at", "leased"})


# The share of its cooldown an open domain rests before an early probe may reach it.
EARLY_PROBE_REST = 0.1


@dataclass(frozen=True, slots=True, kw_only=True)
class BreakerTransition:
    """A breaker changed state at time ``at``."""

    before: BreakerState
    after: BreakerState
    at: float


class Breaker:
    """The breaker of one domain. Mutable; owned and locked by its pool."""

    __slots__ = (
        "cooldown",
        "failed_at",
        "failures",
        "leased",
        "open_until",
        "opened_at",
        "quiet",
        "recovered_at",
        "remote_until",
        "state",
        "threshold",
    )

    # ``quiet``: the breaker is closed, with no failure since the last success and no probe
    # in flight. An ordinary success then changes nothing, and the pool's choice reads the
    # domain as healthy, whatever the time. Kept by each write of the three fields it is
    # made of (``__setattr__``), so that the happy path reads one attribute where it asked
    # the breaker with a call: ``PoolCore.first_attempt`` and ``RequestPlan.answered_alone``,
    # without the pool's lock (see the latter). A call costs a request more than its
    # opcodes: between the client's own work, the called function's code is out of the
    # processor's caches at each request (about 0.35 µs a call in process, paired).
    quiet: bool

    def __init__(self, *, threshold: int, cooldown: float) -> None:
        self.threshold = threshold
        self.cooldown = cooldown
        self.forget()

    def __setattr__(self, name: str, value: object) -> None:
        object.__setattr__(self, name, value)
        if name in _QUIET_FIELDS:
            try:
                quiet = self.state is _CLOSED and self.failed_at is None and not self.leased
            except AttributeError:  # (a breaker being built: ``forget`` sets them all)
                return
            object.__setattr__(self, "quiet", quiet)

    def forget(self) -> None:
        """Closed, as built: no failure counted, no suspicion, no probe in flight (what a
        test that starts afresh sees: ``State.forget``). Its pool's lock is held."""
        self.state = BreakerState.CLOSED
        self.failures = 0  # consecutive, in CLOSED
        self.open_until = 0.0
        self.opened_at = 0.0
        self.failed_at: float | None = None  # the latest counted failure: suspect since then
        self.recovered_at = float("-inf")  # the latest time the suspicion was cleared
        self.leased = False  # a probe (half-open or failback) is in flight
        self.remote_until: float | None = None  # ... in another process, until then

    # -- questions (no state change) -------------------------------------------------

    # The pool's choice and record call these for a request off the happy path (which reads
    # ``quiet``), positionally: on CPython 3.11 a call with keywords skips the interpreter's
    # specialised call.
    def standing(self, now: float, sticky: bool) -> Standing:
        """How the pool's choice sees this domain at ``now``."""
        if self.leased:
            return Standing.PROBING
        if self.state is _OPEN:
            if now >= self.open_until:
                return Standing.DUE
            rested = now - self.opened_at >= self.cooldown * EARLY_PROBE_REST
            return Standing.OPEN if rested else Standing.RESTING
        if not sticky or self.failed_at is None:
            return _HEALTHY
        return Standing.DUE if now - self.failed_at >= self.cooldown else Standing.SUSPECT

    @property
    def early_probe_at(self) -> float:
        """When an open breaker has rested enough for an early probe."""
        return min(self.opened_at + self.cooldown * EARLY_PROBE_REST, self.open_until)

    def admits(self, now: float, *, sticky: bool) -> bool:
        """Would an ordinary request sent now be let through?"""
        return self.standing(now, sticky=sticky).admissible

    # -- events ----------------------------------------------------------------------

    def acquire(self, now: float, *, early: bool = False) -> BreakerTransition | None:
        """Take the probe lease: the attempt about to be sent is this domain's one probe.
        ``early`` probes an open breaker before its cooldown is over (the pool's rule
        for when every other domain is out)."""
        if self.leased:
            where = "in another process" if self.remote_until is not None else "already"
            raise RuntimeError(f"breaker: a probe is {where} in flight; a second one does not fit")
        standing = self.standing(now, sticky=True)
        if standing is Standing.RESTING or (standing is Standing.OPEN and not early):
            raise RuntimeError(f"breaker is {standing.label} within its cooldown: a probe does not fit now")
        self.leased = True
        if self.state is BreakerState.OPEN:
            return self._move(BreakerState.HALF_OPEN, now)
        return None  # a failback probe of a suspect domain: the breaker stays closed

    def success(self, now: float, started: float, probe: bool) -> BreakerTransition | None:
        if not probe and self.quiet:
            return None  # a healthy domain stays healthy: the common case, first
        if probe:
            self.leased = False
        elif self.state is not BreakerState.CLOSED or (
            self.failed_at is not None and started < self.failed_at
        ):
            return None  # late: it says nothing about the current episode
        return self._recovered(now)

    def failure(self, now: float, started: float, probe: bool) -> BreakerTransition | None:
        if probe:
            self.leased = False
        elif self.state is not BreakerState.CLOSED or started < self.recovered_at:
            return None  # late: it says nothing about the current episode
        if self.state is BreakerState.HALF_OPEN:  # the probe failed: open for another cooldown
            self.failed_at = now
            self.open_until = now + self.cooldown
            return self._move(BreakerState.OPEN, now)
        return self._failed(now)

    # The two rules local and remote word share (``apply_remote_*`` below).

    def _recovered(self, now: float) -> BreakerTransition | None:
        """The domain answered: its failures are forgotten, and it is closed again."""
        self.failures = 0
        if self.failed_at is not None:
            self.failed_at = None
            self.recovered_at = now
        return None if self.state is _CLOSED else self._move(_CLOSED, now)

    def _failed(self, now: float) -> BreakerTransition | None:
        """A closed domain failed: counted; at the threshold it opens for one cooldown."""
        self.failed_at = now
        self.failures += 1
        if self.failures < self.threshold:
            return None
        self.open_until = now + self.cooldown
        return self._move(_OPEN, now)

    def abandon(self, now: float, *, probe: bool) -> BreakerTransition | None:
        """The attempt ended without an outcome: release its probe lease, if it held it."""
        if not probe:
            return None
        self.leased = False
        if self.state is BreakerState.HALF_OPEN:
            self.open_until = now  # due again at once
            return self._move(BreakerState.OPEN, now)
        return None

    def eject(self, now: float) -> BreakerTransition | None:
        """Too many slow calls (``SlowCalls``): a closed breaker opens now, for one
        cooldown, and the domain comes back through the single probe."""
        if self.state is not _CLOSED:
            return None
        return self._open(now + self.cooldown, now)

    def _open(self, until: float, now: float) -> BreakerTransition | None:
        self.failed_at = now
        self.failures = 0
        self.open_until = until
        return self._move(_OPEN, now)

    def suspect_since(self, now: float) -> None:
        """Count the domain as failed at ``now`` without evidence (a restart resumes
        on the domain that last served, so the ones ahead of it wait one cooldown)."""
        self.failed_at = now

    # -- other processes' word (shared health) -------------------------------------------

    def hold_remote(self, until: float) -> None:
        """Another process holds this domain's probe lease until ``until``: here the
        domain is PROBING until that process reports or the lease expires."""
        if not self.leased:
            self.leased = True
            self.remote_until = until

    def release_remote(self, now: float) -> bool:
        """Forget another process's probe lease if it has expired at ``now`` (pass
        ``math.inf`` to forget it at once). True if one was released."""
        if self.remote_until is None or now < self.remote_until:
            return False
        self.leased = False
        self.remote_until = None
        return True

    def _local_probe(self) -> bool:
        """Is a probe of this process in flight? Then only its outcome counts."""
        if self.remote_until is not None:  # whatever the other process says ends its lease
            self.leased = False
            self.remote_until = None
        return self.leased

    def apply_remote_open(self, until: float, now: float) -> BreakerTransition | None:
        """Another process opened this domain until ``until`` (its deadline on this
        clock; the caller bounds it by a cooldown)."""
        if self._local_probe():
            return None
        if self.state is _OPEN:
            self.open_until = max(self.open_until, until)
            return None
        return self._open(until, now)

    def apply_remote_close(self, now: float) -> BreakerTransition | None:
        """Another process's probe of this domain succeeded: healthy again."""
        if self._local_probe():
            return None
        return self._recovered(now)

    def apply_remote_failure(self, now: float) -> BreakerTransition | None:
        """Another process's attempt on this closed domain failed: it counts here too,
        so the fleet opens the domain after about ``threshold`` failures in all."""
        if self._local_probe() or self.state is not _CLOSED:
            return None
        return self._failed(now)

    def apply_remote_suspect(self, now: float, *, again: bool) -> None:
        """Another process failed on this closed domain at ``now`` and moved off it
        (``again``: its failback probe failed, so due again one cooldown from now;
        else suspect from now only if it was not already)."""
        if self._local_probe() or self.state is not _CLOSED:
            return
        if again or self.failed_at is None:
            self.failed_at = now

    def _move(self, after: BreakerState, now: float) -> BreakerTransition | None:
        before, self.state = self.state, after
        if after is BreakerState.OPEN and before is not after:
            self.opened_at = now
        return None if before is after else BreakerTransition(before=before, after=after, at=now)
