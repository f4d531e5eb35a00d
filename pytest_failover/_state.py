"""What a failover front-end serves from: the state one transport, or a ``sharing``
group of front-ends, holds once.

:class:`State` gathers everything a request reads beyond its own plan: the decision
core (pools, breakers, budget, control document), telemetry, the stale cache, the
sticky files, shared health, the fallback and the clock. A front-end builds one (or
takes another's, with ``sharing``) and hands it down to each
:class:`~pytest_failover._exchange.Exchange`; nothing below a front-end reads a
front-end's attributes, so the exchange, the race and the core can be read and
changed apart from the transports.
"""

from __future__ import annotations

import dataclasses
import logging
import random as _random
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from ._core import FailoverCore, PoolCore
from ._pool import Domain, Pool
from ._snapshot import TransportState
from ._stale import StaleCache
from ._sticky import StickyFile
from ._telemetry import Telemetry

if TYPE_CHECKING:
    from opentelemetry.metrics import MeterProvider
    from opentelemetry.trace import TracerProvider

    from ._exchange import Fallback
    from ._policy import Policy
    from .control import ControlDocument
    from .shared import AsyncRedisHealth, RedisHealth

__all__ = ["State"]

logger = logging.getLogger("pytest_failover")


class State:
    """The shared state of one front-end or ``sharing`` group (see the module's doc).

    Built once, by the first front-end; every field is read-only afterwards (the
    objects it holds keep their own locks)."""

    __slots__ = ("clock", "core", "fallback", "shared", "stale", "sticky", "telemetry")

    def __init__(
        self,
        pools: Sequence[Pool] | Pool,
        policy: Policy | Mapping[str, Policy] | None = None,
        *,
        region: str | None = None,
        fallback: Fallback | None = None,
        tracer_provider: TracerProvider | None = None,
        meter_provider: MeterProvider | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        random: Callable[[], float] = _random.random,
        shared: RedisHealth | AsyncRedisHealth | None = None,
    ) -> None:
        self.core = FailoverCore(
            pools if isinstance(pools, Sequence) else [pools],
            policy,
            region=region,
            random=random,
            wall_clock=wall_clock,
        )
        self.fallback = fallback
        self.clock = clock
        self.telemetry = Telemetry(tracer_provider, meter_provider)
        self.telemetry.initial_breaker_states((name, pc.pool.domains) for name, pc in self.core.pools.items())
        self.stale = StaleCache()
        self.sticky: Mapping[str, StickyFile] = self._restore_sticky()
        self.shared = shared
        if shared is not None:
            shared.bind(self.core, clock=clock, telemetry=self.telemetry, meter_provider=meter_provider)

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
