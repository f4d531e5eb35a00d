"""The sans-I/O decision core of the failover client: every pool of one transport.

:class:`FailoverCore` routes a request to its pool (by the origin its URL names, a
pinned domain or a named pool), opens its plan, snapshots the pools and applies
control documents. The rules live beside it, one module per subject, each opening
with its own rules and theory of operation:

- ``_pools.py``: pool state and the choice of domain ("which domain next");
- ``_plan.py``: one request's decisions (whether to retry, wait, hedge or stop);
- ``_breaker.py``: a domain's health, as a transition table;
- ``_budget.py``, ``_slowness.py``, ``_steering.py``: the retry budget, slow calls and
  hedging's throttle, traffic steering.

The decision core does no I/O and reads no clock of its own: time and randomness
are arguments. The pool's lock is held only while deciding and recording, never
during I/O, so a slow domain never blocks requests to another.
"""

from __future__ import annotations

import operator
import random as _random
import threading
import time as _time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from ._fork import renew_locks
from ._plan import RequestPlan
from ._policy import Policy
from ._pool import Domain, Pool
from ._pools import PoolCore
from ._snapshot import TransportState
from ._values import DEFAULT_OPTIONS, RequestOptions

if TYPE_CHECKING:
    from ._lib import URL, Headers
    from .control import ControlDocument

__all__ = ["FailoverCore", "Route"]

# Where a request goes: its pool, its pinned domain (if any), and the pool domain its URL
# already points at (if any).
Route = tuple[PoolCore, Domain | None, Domain | None]


# (scheme, host, port) of an httpx or httpx2 URL's ``_uri_reference`` (a ``ParseResult``
# named tuple, both libraries alike): the default port is None there too.
ORIGIN = operator.itemgetter(0, 2, 3)


class FailoverCore:
    """All pools of one transport, and the request routing between them."""

    def __init__(
        self,
        pools: Sequence[Pool],
        policy: Policy | Mapping[str, Policy] | None = None,
        *,
        region: str | None = None,
        random: Callable[[], float] = _random.random,
        wall_clock: Callable[[], float] = _time.time,
    ) -> None:
        if isinstance(pools, Pool):
            pools = [pools]
        if not pools:
            raise ValueError("FailoverTransport needs at least one Pool")
        names = [p.name for p in pools]
        if len(set(names)) != len(names):
            raise ValueError(f"pool names must be unique, got {names}")
        seen: dict[Domain, str] = {}
        for p in pools:
            for d in p.domains:
                if d in seen:
                    raise ValueError(f"domain {d} is in pools {seen[d]!r} and {p.name!r}")
                seen[d] = p.name
        policies = self._policies(policy, names)
        self.pools: dict[str, PoolCore] = {
            p.name: PoolCore(p, policies[p.name], region=region) for p in pools
        }
        # (scheme, host, port) as URL gives them (a default port is None)
        self._by_origin = {(d.scheme, d.host, d.port): (d, self.pools[name]) for d, name in seen.items()}
        # The route of a request with no options whose URL names a pool domain, made once,
        # by the origin of its URL (:data:`ORIGIN`): :meth:`route`'s first look-up, which a
        # front-end may make itself before it calls it (``_FailoverBase._begin``).
        self.routes: dict[tuple[str, str, int | None], Route] = {
            origin: (pool_core, None, domain) for origin, (domain, pool_core) in self._by_origin.items()
        }
        self.random = random
        self.wall_clock = wall_clock  # Unix time, read only for pools with time windows
        for pool_core in self.pools.values():  # what each request's plan reads of them
            pool_core.random, pool_core.wall_clock = random, wall_clock
        self.control_version: int | None = None
        self._control_lock = threading.Lock()
        renew_locks(self, "_control_lock")

    @staticmethod
    def _policies(policy: Policy | Mapping[str, Policy] | None, names: list[str]) -> dict[str, Policy]:
        if policy is None or isinstance(policy, Policy):
            shared = policy or Policy()
            return {n: shared for n in names}
        unknown = sorted(set(policy) - set(names))
        if unknown:
            raise ValueError(f"policy given for unknown pool(s) {unknown}")
        for name, value in policy.items():
            if not isinstance(value, Policy):
                raise TypeError(f"policy for pool {name!r} must be a Policy")
        return {n: policy.get(n) or Policy() for n in names}

    def route(self, url: URL, options: RequestOptions) -> Route | None:
        """The pool a request belongs to, its pinned domain, and the domain its URL
        already points at (if any), or None when the request passes through."""
        if options is DEFAULT_OPTIONS:  # most requests: the route of the URL's origin, if any
            # The URL's parsed parts, read at C level: its ``scheme``, ``host`` and ``port``
            # properties are three Python calls (22 of a request's opcodes, every frame counted). An IDNA host is
            # in its ASCII form there: it misses, and the general path below finds it.
            route = self.routes.get(ORIGIN(url._uri_reference))
            if route is not None:
                return route
        if not options.enabled:
            return None
        # (scheme, host, port) as URL gives them (a default port is None)
        scheme, host, port = url.scheme, url.host, url.port
        found = self._by_origin.get((scheme, host, port))
        if found is None and host.endswith("."):  # a fully qualified name
            found = self._by_origin.get((scheme, host.rstrip("."), port))
        origin = None if found is None else found[0]
        if options.domain is not None:
            try:
                pinned = Domain.parse(options.domain)
            except ValueError as exc:
                raise ValueError(f'extensions["failover"]["domain"]: {exc}') from None
            pinned_in = self._find_domain(pinned)
            if pinned_in is None:
                raise ValueError(f"pinned domain {pinned} is not in any pool")
            return pinned_in, pinned, origin
        if options.pool is not None:
            pool_core = self.pools.get(options.pool)
            if pool_core is None:
                raise ValueError(f"unknown pool {options.pool!r}; pools are {sorted(self.pools)}")
            return pool_core, None, origin
        if found is None:
            return None
        return found[1], None, origin

    def _find_domain(self, domain: Domain) -> PoolCore | None:
        found = self._by_origin.get((domain.scheme, domain.host, domain.port))
        return None if found is None else found[1]

    def begin(
        self,
        pool_core: PoolCore,
        method: str,
        headers: Headers,
        options: RequestOptions,
        replayable: bool,
        pinned: Domain | None,
        now: float,
        wall: float | None = None,
    ) -> RequestPlan:
        """A plan for one request at ``now`` (the transport's clock); ``wall`` is the
        Unix time for the pool's time windows (``wall_clock()`` when not given). A front-end's
        :class:`~pytest_failover._exchange.Exchange` is a plan of its own, made the same way."""
        return RequestPlan(pool_core, method.upper(), headers, options, replayable, pinned, now, wall)

    def state(self, now: float) -> TransportState:
        return TransportState(
            pools={name: pc.snapshot(now) for name, pc in self.pools.items()},
            control_version=self.control_version,
        )

    def apply_control(self, doc: ControlDocument) -> None:
        """Apply a verified control document, or raise ``ControlError`` and change nothing."""
        with self._control_lock:
            doc.check([pc.pool for pc in self.pools.values()], self.control_version)
            # Pools the document names get exactly its disabled set (the others of
            # the pool are enabled again); pools it does not name are left alone.
            disabled = {
                name: frozenset(Domain.parse(url) for url in urls)
                for name, urls in doc.disabled.items()
            }
            for name, domains in disabled.items():
                pool_core = self.pools[name]
                with pool_core.lock:
                    pool_core.disabled = domains
            self.control_version = doc.version
