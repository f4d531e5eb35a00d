"""The clients compared, each a policy on a :class:`~._sides.Stack` (its library per side).

- ``ours``: ``FailoverTransport`` / ``AsyncFailoverTransport`` with the default ``Policy()``
  (only the time constants a scenario must scale, such as ``breaker_cooldown``, changed);
- ``ours+hedging``: the same with issue 11's tools on, as a user turns them on:
  ``Hedging()`` (adaptive delay) and ``SlowCalls(threshold=0.5)``. Under these loads it
  found hedges sent to a suspect domain (past the single-probe rule), slow calls that
  ejected a healthy backup when the event loop itself was the slow part, and a sync
  hedge reported unsent that the network saw;
- ``requests+aiohttp``: the same policy as ``ours`` through the front-ends of issue 12, the
  ``requests`` adapter on the thread side and the aiohttp middleware on the task side
  (``_frontends``);
- ``seed``: our transports with the seed schedule,
  ``Policy.agora(retry_budget=None, breaker_threshold=10**9)``: no budget, no breakers;
- ``httpx-retries``: ``httpx_retries.RetryTransport()`` with its defaults, pointed at the
  primary (it cannot fail over, which is the point of the comparison).

Every client counts the attempts that reached the network layer under it (``_sides``),
whatever it reports.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, replace

from pytest_failover import Hedging, Policy, SlowCalls

from ._frontends import FRONTENDS
from ._httpx import HTTPX, ShardedTransport
from ._sides import AsyncSide, Calls, Stack, SyncSide

__all__ = ["FRONTENDS_KEY", "OURS", "TARGETED", "Client", "ShardedTransport", "clients"]

OURS = "ours"
FRONTENDS_KEY = "requests+aiohttp"
HEDGING_KEY = "ours+hedging"
#: The clients the issues' targets are for (the others are the comparison).
TARGETED = (OURS, FRONTENDS_KEY, HEDGING_KEY)
#: What ``ours+hedging`` adds to the default policy: issue 11's tools, as a user turns them on.
HEDGING = Hedging()
SLOW_CALLS = SlowCalls(threshold=0.5)


@dataclass(frozen=True, slots=True)
class Client:
    """One of the compared clients: its key, how the tables name it, its policy and its stack."""

    key: str
    label: str
    policy: Policy | None  # None: httpx-retries on the primary alone
    stack: Stack = HTTPX

    @property
    def deadline(self) -> float | None:
        """The client's own bound on a logical request, if it has one."""
        return None if self.policy is None else self.policy.deadline

    @property
    def reports_attempts(self) -> bool:
        """Does it say, per request, which attempts it made?"""
        return self.policy is not None

    def sync_side(self, urls: Sequence[str], calls: Calls) -> SyncSide:
        """The side every thread of a run shares."""
        return self.stack.sync_side(self.policy, urls, calls)

    def async_side(self, urls: Sequence[str], calls: Calls, *, shards: int) -> AbstractAsyncContextManager[AsyncSide]:
        """The side every task of a run shares (enter it inside the event loop)."""
        return self.stack.async_side(self.policy, urls, calls, shards=shards)


def clients(*, cooldown: float, deadline: float | None = None) -> tuple[Client, ...]:
    """Every client, with the same scaled time constants."""
    extra: dict[str, float] = {"breaker_cooldown": cooldown}
    if deadline is not None:
        extra["deadline"] = deadline
    ours = (
        Policy(breaker_cooldown=cooldown)
        if deadline is None
        else Policy(breaker_cooldown=cooldown, deadline=deadline)
    )
    seed = Policy.agora(retry_budget=None, breaker_threshold=10**9, **extra)
    shown = ", ".join(f"{k}={v:g}" for k, v in extra.items())
    return (
        Client(OURS, f"ours: Policy({shown})", ours),
        Client(
            HEDGING_KEY,
            f"ours+hedging: Policy({shown}, hedging=Hedging(), slow_calls=SlowCalls(threshold=0.5))",
            replace(ours, hedging=HEDGING, slow_calls=SLOW_CALLS),
        ),
        Client(
            FRONTENDS_KEY,
            f"requests+aiohttp: Policy({shown}) through FailoverAdapter (threads) and FailoverMiddleware (tasks)",
            ours,
            FRONTENDS,
        ),
        Client("seed", f"seed: Policy.agora(retry_budget=None, breaker_threshold=10**9, {shown})", seed),
        Client("httpx-retries", "httpx-retries: RetryTransport() on the primary", None),
    )
