"""Everything shared health does except talking to Redis: the part both shells share.

:class:`Fleet` is bound to one transport's core. The transport tells it what
happened (:meth:`Fleet.recorded`, :meth:`Fleet.control_applied`, and the probe
lease hook the core calls, :meth:`Fleet.lease`); it turns those into Redis commands
handed to the shell's ``post`` (a queue its publisher drains), and applies what the
shell hears from Redis (:meth:`Fleet.apply`, :meth:`Fleet.catch_up`) to the local
breakers under their pool's lock, through the breaker's own rules (``_breaker.py``).
The only Redis call on a request's path is the lease's ``SET NX PX``, made through
``take`` (the shell's, bounded by its short timeout), and only while connected.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from opentelemetry import metrics
from opentelemetry.metrics import Observation

from .. import __version__, semconv
from .._breaker import BreakerState, BreakerTransition
from .._fork import renew_locks
from .._snapshot import SharedState
from .._telemetry import Readings, Series
from .._values import BreakerEvent, Event, Switch
from . import _wire
from ._wire import Keys, Word

if TYPE_CHECKING:
    from opentelemetry.metrics import MeterProvider

    from .._breaker import Breaker
    from .._core import FailoverCore
    from .._pool import Domain
    from .._pools import PoolCore
    from .._telemetry import Telemetry

__all__ = ["CLOSED", "RELEASE_SCRIPT", "Command", "Fleet"]

logger = logging.getLogger("pytest_failover")

CLOSED = semconv.SHARED_CLOSED
_CONNECTED = semconv.SHARED_CONNECTED
_DISCONNECTED = semconv.SHARED_DISCONNECTED

# One Redis command, as ``execute_command`` takes it.
Command = tuple[Any, ...]

# Let the lease expire in ARGV[2] ms, only if it is still ours (it may have expired and
# been taken since). After a probe's outcome it lingers a little (half a cooldown at most):
# a process that has not heard the outcome yet must not take it and probe again.
RELEASE_SCRIPT = (
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) end return 0"
)
# How long a lease lingers after its probe's outcome (s), at most (see RELEASE_SCRIPT).
_LEASE_LINGER = 1.0

# How long an open key outlives its deadline, in cooldowns: a process that starts
# (or reconnects) just after the deadline still learns the domain is due, not healthy.
_OPEN_KEY_EXTRA = 1.0
# A serving key lives this long (s) after the pool last switched.
_SERVING_TTL = 7 * 24 * 3600
# A lease outlives its probe's time limit by this much (s): the transport's grace.
_LEASE_GRACE = 0.1


def _sender() -> str:
    """How this process signs its words and leases: unique to it in the fleet."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


class Fleet:
    """Shared health of one transport, without the I/O."""

    asynchronous = False

    def __init__(self, *, shown_url: str, prefix: str) -> None:
        self.shown_url = shown_url
        self.keys = Keys(prefix)
        self.sender = _sender()
        self.state = _DISCONNECTED
        self.since = time.time()
        self.fleet_control_version: int | None = None
        self.ignored = 0  # messages naming something this process does not have, or malformed
        self._ever_connected = False
        self._state_lock = threading.Lock()
        renew_locks(self, "_state_lock")
        self._core: FailoverCore | None = None
        self._clock: Callable[[], float] = time.monotonic
        self._wall: Callable[[], float] = time.time
        self._telemetry: Telemetry | None = None
        # (pool name, domain URL) -> (its pool, the domain): everything a word may name
        self._targets: dict[tuple[str, str], tuple[PoolCore, Domain]] = {}
        # fleet leases this process holds: (pool name, domain URL) -> key
        self._held: dict[tuple[str, str], str] = {}
        self._said_once = False
        self._next_sweep = -math.inf

    # -- set-up ------------------------------------------------------------------------

    def bind(
        self,
        core: FailoverCore,
        *,
        clock: Callable[[], float],
        telemetry: Telemetry | None = None,
        meter_provider: MeterProvider | None = None,
    ) -> None:
        """Serve ``core`` (one transport): called by the transport's constructor."""
        if self._core is not None:
            raise ValueError(f"{type(self).__name__} serves one transport; make one per transport")
        self._core = core
        self._clock = clock
        self._telemetry = telemetry
        meter = metrics.get_meter(
            semconv.SHARED_SCOPE, __version__, meter_provider=meter_provider, schema_url=semconv.SCHEMA_URL
        )
        _SHARED.gauge(  # observed at each collection (see Readings)
            meter,
            meter_provider,
            semconv.FAILOVER_SHARED_STATE,
            semconv.UNIT_NONE,
            "Shared health: 1 connected to Redis, 0 local-only.",
        )
        _SHARED.add(self, meter_provider)
        for pool_core in core.pools.values():
            for domain in pool_core.order:
                self._targets[(pool_core.name, domain.url)] = (pool_core, domain)
            pool_core.lease = functools.partial(self.lease, pool_core)

    def post(self, commands: list[Command]) -> None:
        """Hand commands to the shell's publisher (the shells replace this)."""

    def take(self, key: str, ttl_ms: int) -> int | None:
        """``SET key sender NX PX ttl_ms``: None if taken, else the holder's remaining
        milliseconds (the shells replace this; raising means Redis failed)."""
        raise NotImplementedError

    # -- the transport's hooks -----------------------------------------------------------

    def lease(self, pool_core: PoolCore, domain: Domain, breaker: Breaker, at: float, timeout: float) -> bool:
        """The core's ``PoolCore.lease`` (under the pool's lock): may this process
        probe ``domain``? False when another process holds the fleet's lease (the
        breaker is then PROBING here until that process reports)."""
        if self.state is not _CONNECTED:
            return True  # local-only
        key = self.keys.lease(pool_core.name, domain.url)
        try:
            remaining = self.take(key, math.ceil((timeout + _LEASE_GRACE) * 1000))
        except Exception as exc:  # any failure of Redis: act locally, the listener reconnects
            self.lost(f"the probe lease failed ({_describe(exc)})", holding=pool_core)
            return True
        if remaining is None:
            self._held[(pool_core.name, domain.url)] = key
            return True
        breaker.hold_remote(at + max(remaining, 1) / 1000)
        return False

    def recorded(
        self,
        pool_core: PoolCore,
        domain: Domain,
        probe: bool,
        events: Sequence[Event],
        *,
        failed: bool = False,
        abandoned: bool = False,
    ) -> None:
        """An attempt on ``domain`` ended (``abandoned``: without an outcome) with
        ``events``: tell the fleet, and give back the fleet's lease of a probe."""
        if self.state is not _CONNECTED:
            with pool_core.lock:
                self._held.pop((pool_core.name, domain.url), None)
            return
        pool = pool_core.name
        commands: list[Command] = []
        told = False
        for event in events:
            if isinstance(event, BreakerEvent):
                told = told or event.domain == domain
                if event.after is BreakerState.OPEN:
                    commands += self._opened(pool_core, event.domain)
                elif event.after is BreakerState.CLOSED:
                    commands += self._word(pool, event.domain, _wire.CLOSE)
                    commands.append(("DEL", self.keys.open(pool, event.domain.url)))
            elif isinstance(event, Switch):
                commands.append(("SET", self.keys.serving(pool), event.after.url, "EX", _SERVING_TTL))
                if event.reason != semconv.SWITCH_REASON_FAILBACK:
                    commands += self._word(pool, event.before, _wire.SUSPECT)
        if failed and not told and not probe:
            with pool_core.lock:
                counted = pool_core.breakers[domain].state is BreakerState.CLOSED
            if counted:  # a failure below the threshold: the fleet counts it too
                commands += self._word(pool, domain, _wire.FAILED)
        held = None
        linger = 1  # ms: an abandoned probe frees the lease at once
        if probe:
            with pool_core.lock:
                breaker = pool_core.breakers[domain]
                held = self._held.pop((pool, domain.url), None)
                if not abandoned:
                    linger = math.ceil(min(_LEASE_LINGER, breaker.cooldown / 2) * 1000)
                if told:
                    pass  # the breaker's transition said it
                elif abandoned:
                    commands += self._word(pool, domain, _wire.FREE)
                elif breaker.state is BreakerState.CLOSED:  # a failback probe's outcome
                    kind = _wire.CLOSE if breaker.failed_at is None else _wire.SUSPECT
                    commands += self._word(pool, domain, kind, again=True)
        if held is not None:  # after the words: nobody takes the lease before hearing them
            commands.append(("EVAL", RELEASE_SCRIPT, 1, held, self.sender, linger))
        if commands:
            self.post(commands)

    def control_applied(self, version: int) -> None:
        self._control(version)
        if self.state is _CONNECTED:
            word = Word(sender=self.sender, kind=_wire.CONTROL, version=version)
            self.post([("SET", self.keys.control, str(version)), ("PUBLISH", self.keys.channel, _wire.encode(word))])

    def snapshot(self) -> SharedState:
        return SharedState(
            url=self.shown_url, state=self.state, since=self.since, fleet_control_version=self.fleet_control_version
        )

    def _opened(self, pool_core: PoolCore, domain: Domain) -> list[Command]:
        breaker = pool_core.breakers[domain]
        with pool_core.lock:
            left = breaker.open_until - self._clock()
        until = self._wall() + max(left, 0.0)
        ttl_ms = math.ceil((max(left, 0.0) + _OPEN_KEY_EXTRA * breaker.cooldown) * 1000) + 1
        value = f'{{"until":{until!r}}}'
        key = self.keys.open(pool_core.name, domain.url)
        return [("SET", key, value, "PX", ttl_ms), *self._word(pool_core.name, domain, _wire.OPEN, until=until)]

    def _word(self, pool: str, domain: Domain, kind: str, *, until: float = 0.0, again: bool = False) -> list[Command]:
        word = Word(sender=self.sender, kind=kind, pool=pool, domain=domain.url, until=until, again=again)
        return [("PUBLISH", self.keys.channel, _wire.encode(word))]

    # -- what the shells hear ------------------------------------------------------------

    def catch_up_keys(self) -> list[str]:
        """The keys to read (one MGET) on connecting: this process's domains only."""
        pools = self._pools()
        opens = [self.keys.open(pc.name, d.url) for pc in pools for d in pc.order]
        return [*opens, *(self.keys.serving(pc.name) for pc in pools), self.keys.control]

    def catch_up(self, values: Sequence[bytes | str | None]) -> None:
        """Apply what the ``catch_up_keys`` held; the pool's serving domain only on the
        first connection (later, this process's own view is fresher)."""
        pools = self._pools()
        found = iter(values)
        for pool_core in pools:
            for domain in pool_core.order:
                raw = next(found)
                until = _until_of(raw) if raw is not None else None
                if until is not None:
                    self._apply_open(pool_core, domain, until)
        for pool_core in pools:
            raw = next(found)
            if raw is not None and not self._ever_connected:
                self._restore_serving(pool_core, _text(raw))
        raw = next(found)
        if raw is not None and _text(raw).isdigit():
            self._control(int(_text(raw)))

    def apply(self, raw: bytes | str) -> None:
        """One message of the events channel (ignored unless connected, from another
        process, well formed, and naming a pool and domain this process has)."""
        word = _wire.decode(raw)
        if word is None:
            self._ignore("a malformed message")
            return
        if word.sender == self.sender or self.state is not _CONNECTED:
            return
        if word.kind == _wire.CONTROL:
            self._control(word.version)
            return
        target = self._targets.get((word.pool, word.domain))
        if target is None:
            self._ignore(f"a message about {word.domain!r} in pool {word.pool!r}")
            return
        pool_core, domain = target
        if word.kind == _wire.OPEN:
            self._apply_open(pool_core, domain, word.until)
            return
        breaker = pool_core.breakers[domain]
        transition: BreakerTransition | None = None
        with pool_core.lock:
            now = self._clock()
            if word.kind == _wire.CLOSE:
                transition = breaker.apply_remote_close(now)
            elif word.kind == _wire.FAILED:
                transition = breaker.apply_remote_failure(now)
            elif word.kind == _wire.SUSPECT:
                breaker.apply_remote_suspect(now, again=word.again)
            else:  # FREE
                breaker.release_remote(math.inf)
        self._note(pool_core, domain, transition)

    def sweep(self, *, every: float = 0.0) -> None:
        """Forget other processes' leases that expired without a word from them (not
        again within ``every`` seconds: the listener calls it after each message)."""
        now = self._clock()
        if now < self._next_sweep:
            return
        self._next_sweep = now + every
        for pool_core in self._pools():
            with pool_core.lock:
                for breaker in pool_core.breakers.values():
                    breaker.release_remote(now)

    def forked_state(self) -> None:
        """In a fork's child (``_fork``): a process of its own to the fleet, with a sender of
        its own (the parent would take the child's words for its own, and ignore them), no
        lease (those it held are the parent's), and local-only until its own connection is up."""
        self.sender = _sender()
        self._held = {}
        self._change(_DISCONNECTED)

    # -- connection state ------------------------------------------------------------------

    def connected(self) -> None:
        self._said_once = True
        if self._change(_CONNECTED):
            count = len(self._targets)
            logger.info("shared health %s: connected; sharing %d domain(s)", self.shown_url, count)
        self._ever_connected = True

    def lost(self, why: str | BaseException, *, holding: PoolCore | None = None) -> None:
        """Redis failed, or is too slow: local-only from now until the shell
        reconnects. One log line per change (and one for a first connection that
        fails), never one per attempt. ``holding``: the pool whose lock the caller holds."""
        if self._change(_DISCONNECTED, holding) or not self._said_once:
            text = why if isinstance(why, str) else _describe(why)
            logger.warning("shared health %s: %s; local-only until it is back", self.shown_url, text)
        self._said_once = True

    def close_state(self) -> None:
        if self._change(CLOSED):
            logger.info("shared health %s: closed", self.shown_url)

    def _change(self, state: str, holding: PoolCore | None = None) -> bool:
        with self._state_lock:
            if self.state == state or self.state == CLOSED:
                return False
            self.state, self.since = state, time.time()
        if state != _CONNECTED:
            self._forget_remote(holding)
        return True

    def _forget_remote(self, holding: PoolCore | None = None) -> None:
        """Local-only is exactly today's behaviour: no other process's lease holds here."""
        self._held.clear()
        for pool_core in self._pools():
            if pool_core is holding:  # its lock is the caller's already
                self._release_all(pool_core)
                continue
            with pool_core.lock:
                self._release_all(pool_core)

    @staticmethod
    def _release_all(pool_core: PoolCore) -> None:
        for breaker in pool_core.breakers.values():
            breaker.release_remote(math.inf)

    # -- applying ----------------------------------------------------------------------------

    def _apply_open(self, pool_core: PoolCore, domain: Domain, until_wall: float) -> None:
        breaker = pool_core.breakers[domain]
        with pool_core.lock:
            now = self._clock()
            # another clock's deadline, trusted for one cooldown at most
            left = min(max(until_wall - self._wall(), 0.0), breaker.cooldown)
            transition = breaker.apply_remote_open(now + left, now)
        self._note(pool_core, domain, transition)

    def _restore_serving(self, pool_core: PoolCore, url: str) -> None:
        target = self._targets.get((pool_core.name, url))
        if target is None:
            self._ignore(f"a serving domain {url!r} of pool {pool_core.name!r}")
            return
        domain = target[1]
        with pool_core.lock:
            now = self._clock()
            for ahead in pool_core.order[: pool_core.order.index(domain)]:
                pool_core.breakers[ahead].apply_remote_suspect(now, again=False)

    def _control(self, version: int) -> None:
        if self.fleet_control_version is None or version > self.fleet_control_version:
            self.fleet_control_version = version

    def _note(self, pool_core: PoolCore, domain: Domain, transition: BreakerTransition | None) -> None:
        """A remote word moved a breaker: the same transition count as a local one (the
        breaker-state gauge reads the breaker itself)."""
        telemetry = self._telemetry
        if transition is None or telemetry is None:
            return
        attrs = {semconv.FAILOVER_POOL: pool_core.name, semconv.FAILOVER_DOMAIN: domain.url, semconv.SERVER_ADDRESS: domain.host}
        change = {semconv.FAILOVER_BREAKER_FROM: transition.before.value, semconv.FAILOVER_BREAKER_TO: transition.after.value}
        telemetry.transitions.add(1, {**attrs, **change})

    def _ignore(self, what: str) -> None:
        self.ignored += 1
        logger.debug("shared health %s: ignored %s", self.shown_url, what)

    def _pools(self) -> Iterable[PoolCore]:
        return () if self._core is None else tuple(self._core.pools.values())


def _shared_state(fleet: Fleet, series: Series) -> None:
    """``failover.shared.state``'s one series: 1 while every open shared health on the
    provider is connected, 0 while any is local-only; a closed one says nothing."""
    value = semconv.SHARED_GAUGE.get(fleet.state)
    if value is None:  # closed
        return
    held = series.get(())
    if held is None or value < held.value:
        series[()] = Observation(value)


# Every transport's shared health (its ``Fleet``), while it lives.
_SHARED: Readings[Fleet] = Readings(_shared_state)


def _text(raw: bytes | str) -> str:
    return raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw


def _until_of(raw: bytes | str) -> float | None:
    """The deadline an open key holds, or None if it holds anything else."""
    if len(raw) > _wire.MAX_MESSAGE_BYTES:
        return None
    try:
        data = json.loads(raw)
    except ValueError:
        return None
    return _wire.read_until(data.get("until")) if isinstance(data, dict) else None


def _describe(exc: BaseException) -> str:
    text = str(exc).strip().rstrip(".")
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
