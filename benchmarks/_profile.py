"""cProfile helper: what dominates a variant's cost."""

from __future__ import annotations

import cProfile
import io
import pstats
from collections.abc import Callable


def top(func: Callable[[], None], *, limit: int = 25, sort: str = "tottime") -> str:
    profiler = cProfile.Profile()
    profiler.enable()
    func()
    profiler.disable()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.strip_dirs().sort_stats(sort).print_stats(limit)
    return out.getvalue()
