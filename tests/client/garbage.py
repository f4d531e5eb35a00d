"""What a run leaves to the cyclic garbage collector (rather than to reference counting)."""

from __future__ import annotations

import gc
from collections.abc import Callable


def left_for_the_collector(run: Callable[[], object], kinds: tuple[type, ...]) -> list[object]:
    """The objects of ``kinds`` that only the cyclic collector would free after ``run()``
    (called twice: the first warms imports and caches)."""
    run()
    gc.collect()
    gc.disable()
    try:
        gc.set_debug(gc.DEBUG_SAVEALL)
        run()
        gc.collect()
        return [o for o in gc.garbage if isinstance(o, kinds)]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
