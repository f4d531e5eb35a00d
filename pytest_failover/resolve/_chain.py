"""A chain of resolvers: the first that answers wins.

Every resolver is asked in turn and has its own timeout. When all fail, the chain raises
``NoAddresses`` if every one of them said so (the name has no address: a cache keeps that),
else ``AllResolversFailed`` with each one's error.
"""

from __future__ import annotations

from collections.abc import Sequence

from ._base import AllResolversFailed, Answer, NoAddresses, ResolveError, Resolver, normalize_host

__all__ = ["ChainResolver"]


class ChainResolver:
    """Ask ``resolvers`` in order; the first answer wins (say DoH, then the system resolver)."""

    def __init__(self, resolvers: Sequence[Resolver]) -> None:
        if not resolvers:
            raise ValueError("ChainResolver needs at least one resolver")
        self.resolvers: tuple[Resolver, ...] = tuple(resolvers)

    def __repr__(self) -> str:
        return f"ChainResolver({list(self.resolvers)!r})"

    def resolve(self, host: str) -> Answer:
        name = normalize_host(host)
        errors: list[ResolveError] = []
        for resolver in self.resolvers:
            try:
                return resolver.resolve(name)
            except ResolveError as exc:
                errors.append(exc)
        try:
            raise _failed(name, errors)
        finally:  # each error's traceback holds this frame: no local may hold them
            del errors

    async def aresolve(self, host: str) -> Answer:
        name = normalize_host(host)
        errors: list[ResolveError] = []
        for resolver in self.resolvers:
            try:
                return await resolver.aresolve(name)
            except ResolveError as exc:
                errors.append(exc)
        try:
            raise _failed(name, errors)
        finally:  # each error's traceback holds this frame: no local may hold them
            del errors

    def close(self) -> None:
        for resolver in self.resolvers:
            resolver.close()

    async def aclose(self) -> None:
        for resolver in self.resolvers:
            await resolver.aclose()


def _failed(name: str, errors: Sequence[ResolveError]) -> ResolveError:
    said = "; ".join(f"{type(e).__name__}: {e}" for e in errors)
    if all(isinstance(e, NoAddresses) for e in errors):
        return NoAddresses(f"no resolver has an address for {name!r} ({said})", host=name)
    return AllResolversFailed(f"every resolver failed for {name!r} ({said})", host=name, errors=errors)
