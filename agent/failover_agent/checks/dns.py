"""The DNS comparison of a pinned probe: the domain's addresses from the system resolver and
from the pool's configured resolver (``[pools.resolver]``, DoH or HTTPDNS), side by side.

Their address sets not overlapping is a sign the system's answer is hijacked at this location
(``failover_dns_mismatch`` 1). Either side failing leaves the question open (``mismatch`` None:
no series), never a mismatch: a resolver that is down says nothing about poisoning.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from pytest_failover.resolve import ResolveError, Resolver, SystemResolver

__all__ = ["DnsCheck", "DnsComparer"]


@dataclass(frozen=True, slots=True, kw_only=True)
class DnsCheck:
    """One comparison: each side's addresses (empty when it failed) and what went wrong."""

    system: tuple[str, ...]
    resolver: tuple[str, ...]
    error: str | None = None

    @property
    def mismatch(self) -> bool | None:
        """True when both answered and share no address; None when either failed."""
        if self.error is not None:
            return None
        return not set(self.system) & set(self.resolver)


class DnsComparer:
    """Resolves a host through the system and through ``resolver``, concurrently."""

    def __init__(self, resolver: Resolver, *, timeout: float) -> None:
        self.resolver = resolver
        self.system = SystemResolver(timeout=timeout)

    async def compare(self, host: str) -> DnsCheck:
        """Both answers for ``host``; raises nothing but cancellation."""
        system, configured = await asyncio.gather(
            self.system.aresolve(host), self.resolver.aresolve(host), return_exceptions=True
        )
        for outcome in (system, configured):
            if isinstance(outcome, BaseException) and not isinstance(outcome, Exception):
                raise outcome  # cancelled: the job is being stopped
        errors = [f"{side}: {exc if isinstance(exc, ResolveError) else repr(exc)}"
                  for side, exc in (("system", system), ("resolver", configured)) if isinstance(exc, Exception)]
        return DnsCheck(
            system=() if isinstance(system, BaseException) else system.addresses,
            resolver=() if isinstance(configured, BaseException) else configured.addresses,
            error="; ".join(errors) or None,
        )

    async def aclose(self) -> None:
        await self.resolver.aclose()
        await self.system.aclose()
