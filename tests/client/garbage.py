"""What a run leaves to the cyclic garbage collector (rather than to reference counting)."""

from __future__ import annotations

import contextlib
import gc
import sys
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import Any

_exit = contextlib._GeneratorContextManager.__exit__
_PACKAGE = "/pytest_failover/"
_CONTEXTMANAGER_CYCLE: bool = sys.version_info >= (3, 12)


def _exit_clearing_its_frame(
    self: contextlib._GeneratorContextManager[Any],
    typ: type[BaseException] | None,
    value: BaseException | None,
    traceback: TracebackType | None,
) -> bool | None:
    """``_GeneratorContextManager.__exit__``, whose frame lets go of the exception thrown
    into the generator once another one comes out of it."""
    try:
        return _exit(self, typ, value, traceback)
    except BaseException as exc:
        tb = exc.__traceback__
        while tb is not None:
            if tb.tb_frame.f_code is _exit.__code__:
                tb.tb_frame.clear()
            tb = tb.tb_next
        value = traceback = None  # (this frame holds them too)
        raise


@contextlib.contextmanager
def _without_the_contextmanager_cycle() -> Iterator[None]:
    """Since Python 3.12 a ``@contextmanager`` that turns the exception thrown into it into
    another (httpx's and httpcore's ``map_exceptions``: every connect or read error) keeps
    the first in a reference cycle with its own frame (CPython issue 129280, open), and with
    it every frame of the caller chain, the library's included, and what their locals hold.
    A bare client leaves the same cycle: taken out here (its frame cleared, as the fix
    proposed upstream does), what is left is the library's own."""
    if not _CONTEXTMANAGER_CYCLE:
        yield
        return
    contextlib._GeneratorContextManager.__exit__ = _exit_clearing_its_frame  # type: ignore[method-assign,assignment]  # a test's patch (generic over the generator's types), undone below
    try:
        yield
    finally:
        contextlib._GeneratorContextManager.__exit__ = _exit  # type: ignore[method-assign]  # undone


def left_for_the_collector(run: Callable[[], object], kinds: tuple[type, ...]) -> list[object]:
    """The objects of ``kinds`` that only the cyclic collector would free after ``run()``
    (called twice: the first warms imports and caches), on a reference cycle of their own
    or pinned by one of the library's.

    What a cycle of somebody else's holds is not counted: since Python 3.12 a frame kept by
    a traceback holds its caller's frame (CPython issue 100964), so a cycle in the client
    below (anyio's connect, on 3.13) holds the library's frames above it and what their
    locals hold. A cycle the library makes is one through its own objects or frames (an
    error kept in a local of a frame its traceback holds): every object that is the
    library's, of its classes or its code, is looked at, and what such a cycle holds too."""
    with _without_the_contextmanager_cycle():
        run()
        gc.collect()
        gc.disable()
        try:
            gc.set_debug(gc.DEBUG_SAVEALL)
            run()
            gc.collect()
            garbage = list(gc.garbage)
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
            gc.enable()
    try:
        return _held_by_the_library(garbage, kinds)
    finally:
        garbage.clear()


def _library_s(o: object) -> bool:
    """Is ``o`` the library's: an instance of one of its classes, or a frame or function of its code?"""
    code = getattr(o, "f_code", None) or getattr(o, "__code__", None)
    if code is not None:
        return _PACKAGE in code.co_filename
    return type(o).__module__.startswith("pytest_failover")


def _held_by_the_library(garbage: list[object], kinds: tuple[type, ...]) -> list[object]:
    """The objects of ``kinds`` in ``garbage`` that are on a cycle, or reachable from an
    object of the library's that is on one: one of its objects, or one of its frames
    through what the frame holds."""
    ids = {id(o) for o in garbage}

    def reachable(start: object) -> set[int]:
        # A frame's caller is not what it holds: from a frame, the walk starts at its locals
        # (a frame called between two of a client's, as a wrapper's, sits on the client's
        # cycle by its callers alone).
        back = getattr(start, "f_back", None)
        seen: set[int] = set()
        todo = [r for r in gc.get_referents(start) if id(r) in ids and r is not back]
        while todo:
            o = todo.pop()
            if id(o) not in seen:
                seen.add(id(o))
                todo += [r for r in gc.get_referents(o) if id(r) in ids and id(r) not in seen]
        return seen

    held: set[int] = set()
    for o in garbage:
        if isinstance(o, kinds) or _library_s(o):
            below = reachable(o)
            if id(o) in below:  # on a cycle
                held.add(id(o))
                if _library_s(o):
                    held |= below
    return [o for o in garbage if id(o) in held and isinstance(o, kinds)]
