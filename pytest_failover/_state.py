"""What a failover front-end serves from: the state one transport, or a ``sharing``
group of front-ends, holds once.

:class:`State` gathers everything a request reads beyond its own plan: the decision
core (pools, breakers, budget, control document), telemetry, the stale cache, the
sticky files, shared health, the fallback and the clock. A front-end builds one (or
takes another's, with ``sharing``) and hands it down to each
:class:`~pytest_failover._exchange.Exchange`; nothing below a front-end reads a
front-end's attributes, so the exchange, the race and the core can be read and
changed apart from the transports.

The options a front-end is built with are written once, here, as ``TypedDict`` s
(:class:`TransportOptions` and its kin), and every public constructor takes them as
``**options: Unpack[...]`` (PEP 692), decorated with :func:`spelt_out`. Why this shape:

- the public constructors keep their keywords: ``FailoverTransport(pools, region="eu")``
  stays the call, where an ``Options`` object would make every caller build one (or
  still leave the keywords to be written out in each constructor to build it from);
- mypy checks each keyword against the ``TypedDict`` as it did against the parameters
  (a misspelt name or a wrong type is an error at the call), and a front-end passes its
  ``**options`` on to the transport it wraps, and that to :class:`State`, unchanged;
- what differs between front-ends is a type, not a copy: the transports also take the
  core's injectable inputs (``clock``, ``wall_clock``, ``random``), the integrations do
  not; the sync ones take ``shared=RedisHealth``, the async ones ``AsyncRedisHealth`` too;
- the cost of ``**options`` is paid here once: :func:`spelt_out` gives each constructor
  the signature with every option spelt out, with its type and default (what
  ``inspect.signature``, ``help()`` and IDEs show), and refuses an unknown keyword with
  Python's own ``TypeError``; the defaults are :data:`DEFAULTS`, used by :class:`State`.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import logging
import random as _random
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, ForwardRef, TypedDict, TypeVar, cast

from ._core import FailoverCore
from ._fork import renew_locks
from ._pool import Domain, Pool
from ._pools import PoolCore
from ._snapshot import TransportState
from ._stale import StaleCache
from ._sticky import StickyFile
from ._suggest import did_you_mean
from ._telemetry import Telemetry
from .semconv import SHARED_CLOSED

if TYPE_CHECKING:
    from opentelemetry.metrics import MeterProvider
    from opentelemetry.trace import TracerProvider
    from typing_extensions import Unpack

    from ._dial import Dialer
    from ._exchange import Fallback
    from ._policy import Policy
    from .control import ControlDocument
    from .resolve import Resolver
    from .shared import AsyncRedisHealth, RedisHealth

__all__ = [
    "DEFAULTS",
    "AdapterOptions",
    "AsyncTransportOptions",
    "MiddlewareOptions",
    "State",
    "TransportOptions",
    "forget_everywhere",
    "spelt_out",
]

logger = logging.getLogger("pytest_failover")


# -- the options of the front-ends' constructors, written once -------------------------------


class _Options(TypedDict, total=False):
    """What every front-end's constructor takes besides its pools and policy."""

    region: str | None
    fallback: Fallback | None
    tracer_provider: TracerProvider | None
    meter_provider: MeterProvider | None


class _Injected(_Options, total=False):
    """The transports also take the core's inputs, for tests."""

    clock: Callable[[], float]  # monotonic seconds: breakers, backoff, deadlines
    wall_clock: Callable[[], float]  # Unix time, read only for pools with ``time_orders``
    random: Callable[[], float]  # a float in [0, 1): jitter and weight draws


class _SyncShared(TypedDict, total=False):
    shared: RedisHealth | None


class _AnyShared(TypedDict, total=False):
    shared: RedisHealth | AsyncRedisHealth | None  # AsyncRedisHealth: its tasks need the event loop


class TransportOptions(_Injected, _SyncShared, total=False):
    """``FailoverTransport``'s keyword options."""


class AsyncTransportOptions(_Injected, _AnyShared, total=False):
    """``AsyncFailoverTransport``'s keyword options (and :class:`State`'s: the widest)."""


class AdapterOptions(_Options, _SyncShared, total=False):
    """``FailoverAdapter``'s keyword options."""


class MiddlewareOptions(_Options, _AnyShared, total=False):
    """``FailoverMiddleware``'s keyword options."""


DEFAULTS: Final[AsyncTransportOptions] = {
    "region": None,
    "fallback": None,
    "tracer_provider": None,
    "meter_provider": None,
    "clock": time.monotonic,
    "wall_clock": time.time,
    "random": _random.random,
    "shared": None,
}
"""The value of each option a constructor is not given."""

Init = TypeVar("Init", bound=Callable[..., None])


def spelt_out(options: type[Mapping[str, Any]]) -> Callable[[Init], Init]:
    """Decorate an ``__init__(self, ..., **options: Unpack[options])``: its signature
    shows each of ``options`` as a keyword-only parameter (type and default), ahead of
    the constructor's own keyword-only ones, and a keyword that neither names is refused
    with the ``TypeError`` Python raises for a named parameter, naming the class built (not
    the base that holds the ``__init__``) and the closest keyword it takes."""
    spelt = [
        inspect.Parameter(
            name,
            inspect.Parameter.KEYWORD_ONLY,
            default=DEFAULTS[name],  # type: ignore[literal-required]  # a name of ``options``, so of DEFAULTS (a KeyError at import otherwise)
            annotation=kind.__forward_arg__ if isinstance(kind, ForwardRef) else kind,
        )
        for name, kind in options.__annotations__.items()
    ]

    def decorate(init: Init) -> Init:
        signature = inspect.signature(init)
        own = signature.parameters.values()
        keywords = [p for p in own if p.kind is inspect.Parameter.KEYWORD_ONLY]
        positional = [p for p in own if p.kind < inspect.Parameter.KEYWORD_ONLY]
        named = frozenset(p.name for p in [*positional, *spelt, *keywords])

        @functools.wraps(init)
        def checked(*args: Any, **kwargs: Any) -> None:
            for name in kwargs:
                if name not in named:
                    close = did_you_mean(name, named)
                    raise TypeError(
                        f"{type(args[0]).__qualname__}.__init__() got an unexpected keyword argument {name!r}"
                        + (f"; did you mean {close!r}?" if close else "")
                    )
            init(*args, **kwargs)

        checked.__signature__ = signature.replace(parameters=[*positional, *spelt, *keywords])  # type: ignore[attr-defined]  # read by inspect.signature
        return cast(Init, checked)

    return decorate


class State:
    """The shared state of one front-end or ``sharing`` group (see the module's doc).

    Built once, by the first front-end; every field is read-only afterwards (the
    objects it holds keep their own locks)."""

    __slots__ = (
        "__weakref__", "_front_ends", "_lock", "_restored", "clock", "core", "dialer", "fallback", "shared", "stale",
        "sticky", "telemetry",
    )  # fmt: skip

    def __init__(
        self,
        pools: Sequence[Pool] | Pool,
        policy: Policy | Mapping[str, Policy] | None = None,
        **given: Unpack[AsyncTransportOptions],
    ) -> None:
        options: AsyncTransportOptions = {**DEFAULTS, **given}
        self.core = FailoverCore(
            pools if isinstance(pools, Sequence) else [pools],
            policy,
            region=options["region"],
            random=options["random"],
            wall_clock=options["wall_clock"],
        )
        self.fallback = options["fallback"]
        self.clock = clock = options["clock"]
        meter_provider = options["meter_provider"]
        self.telemetry = Telemetry(options["tracer_provider"], meter_provider)
        self._lock = threading.Lock()  # (a fork's child gets a free one: _fork)
        renew_locks(self, "_lock")
        self._front_ends: weakref.WeakSet[object] = weakref.WeakSet()
        self.stale = StaleCache()
        self.dialer = self._dialer()
        self.sticky: Mapping[str, StickyFile] = self._restore_sticky()
        self.shared = shared = options["shared"]
        if shared is not None:
            shared.bind(self.core, clock=clock, telemetry=self.telemetry, meter_provider=meter_provider)
            # Every front-end garbage-collected unclosed: nothing else would stop its threads
            # or tasks, which hold it (an exiting interpreter needs nothing stopped).
            weakref.finalize(self, shared.abandon).atexit = False
        ref = weakref.ref(self, _gone)
        _LIVE[id(ref)] = ref

    def join(self, front_end: object) -> None:
        """``front_end`` serves from this state (the front-end that built it, and each one
        that shares it): until the last of them is closed (or garbage-collected unclosed),
        the breaker gauge reports the state's domains, and its shared health stays open. A
        front-end garbage-collected unclosed counts as closed (:meth:`_dropped`)."""
        if self.shared is not None:
            # Registered before the set holds it: a weak reference's callbacks run from the
            # newest, so the set has let the front-end go when this one runs (``_dropped``).
            weakref.finalize(front_end, self._dropped).atexit = False
        with self._lock:
            first = not self._front_ends  # the first (or the first again, after the last left)
            self._front_ends.add(front_end)
            if first:
                self.telemetry.watch(self.core, self._front_ends)

    def leave(self, front_end: object) -> bool:
        """``front_end`` is closed: True if it was the last, and then its domains leave the
        breaker gauge (the caller closes the shared health, if any). Leaving twice, or
        without joining, is False."""
        with self._lock:
            if front_end not in self._front_ends:
                return False
            self._front_ends.discard(front_end)
            if self._front_ends:
                return False
        self.telemetry.unwatch()
        return True

    def _dropped(self) -> None:
        """A front-end of this state was garbage-collected. With none open left, the shared
        health stops, as at the last close: the others were dropped unclosed while a closed
        one keeps the state alive, so the state's own finalizer (every front-end collected)
        would not run, and its threads or tasks, which hold it, would run for good. Called
        by a collection in any thread, which may hold any lock: it takes none (``len`` of the
        set is one read; ``abandon`` takes none either)."""
        shared = self.shared
        if shared is not None and not self._front_ends and shared.state != SHARED_CLOSED:
            shared.abandon()

    def forget(self) -> None:
        """Forget what traffic taught this state, as a test that starts afresh needs (the
        pytest plugin calls :func:`forget_everywhere` before each test): every pool's
        breakers, serving domain, retry budget and slow-domain counts as built
        (``PoolCore.forget``; a pool resumed from its sticky file when built resumes there
        again), the stale cache empty, no address held bad. What it was told stays: the
        configuration, the control document, the telemetry providers, the sticky files on
        disk. The fleet's word heard through shared health goes with the rest: Redis keeps
        it, and its next message says it again."""
        now = self.clock()
        for pool_core in self.core.pools.values():
            pool_core.forget()
        for pool_core, domain in self._restored:
            pool_core.restore_serving(domain, now)
        self.stale.clear()
        if self.dialer is not None:
            self.dialer.forget()

    def _dialer(self) -> Dialer | None:
        """The resolving state of the pools that have a resolver (``Policy.resolver``),
        or None when none has: then nothing below the exchange changes."""
        resolvers: dict[str, Resolver] = {}
        for name, pool_core in self.core.pools.items():
            resolver = pool_core.policy.resolver
            if resolver is None:
                continue
            for domain in pool_core.pool.domains:
                if resolvers.setdefault(domain.host, resolver) is not resolver:
                    raise ValueError(
                        f"pool {name!r}: {domain.host} is a domain of another pool with another "
                        "resolver; a host resolves one way (give both pools the same resolver)"
                    )
        if not resolvers:
            return None
        from ._dial import Dialer  # the resolvers' package, only when one is configured

        return Dialer(resolvers, clock=self.clock, telemetry=self.telemetry)

    def _restore_sticky(self) -> dict[str, StickyFile]:
        """The sticky file of each pool that has one (pools naming one path share it),
        with each pool's last-good domain restored from it."""
        sticky: dict[str, StickyFile] = {}
        files: dict[str, StickyFile] = {}
        for name, pool_core in self.core.pools.items():
            path = pool_core.policy.sticky_path
            if path is not None:
                sticky[name] = files.setdefault(path, StickyFile(path))
        loaded = {path: f.load() for path, f in files.items()}
        self._restored: tuple[tuple[PoolCore, Domain], ...] = ()
        now = self.clock()
        for name, file in sticky.items():
            url = loaded[file.path].get(name)
            if url is None:
                continue
            pool_core = self.core.pools[name]
            try:
                domain: Domain | None = Domain.parse(url)
            except ValueError:
                domain = None
            if domain is None or domain not in pool_core.order:
                logger.warning("sticky file %s: %r is not a domain of pool %r; ignored", file.path, url, name)
                continue
            pool_core.restore_serving(domain, now)
            self._restored += ((pool_core, domain),)  # what State.forget resumes on again
        return sticky

    def persist_sticky(self, pool_core: PoolCore, *, wait: bool) -> None:
        """Write the pool's serving domain to its sticky file, if it has one (``wait``:
        the caller may block on the disk; an event loop never does, a thread writes it)."""
        sticky = self.sticky.get(pool_core.name)
        serving = pool_core.serving
        if sticky is not None and serving is not None:
            sticky.save({pool_core.name: serving.url}, wait=wait)

    def snapshot(self) -> TransportState:
        """Every pool's breakers, enabled domains, serving domain and budget; and shared
        health, if configured."""
        state = self.core.state(self.clock())
        if self.shared is None:
            return state
        return dataclasses.replace(state, shared=self.shared.snapshot())

    def apply_control(self, doc: ControlDocument) -> None:
        """Apply a verified control document (see ``FailoverTransport.apply_control``)."""
        self.core.apply_control(doc)
        if self.shared is not None:
            self.shared.control_applied(doc.version)


# Every State alive, held weakly (the id of the reference -> the reference), for
# :func:`forget_everywhere`. A dict read whole by ``list()`` in C, as ``_fork``'s
# registry is: no lock, and a thread building a transport meanwhile changes nothing being read.
_LIVE: dict[int, weakref.ref[State]] = {}


def _gone(ref: weakref.ref[State]) -> None:
    _LIVE.pop(id(ref), None)


def forget_everywhere() -> int:
    """:meth:`State.forget` of every front-end's state in the process (one per transport
    or ``sharing`` group): how many. The pytest plugin's ``failover_fresh_state``."""
    forgotten = 0
    for ref in list(_LIVE.values()):
        state = ref()
        if state is not None:
            state.forget()
            forgotten += 1
    return forgotten
