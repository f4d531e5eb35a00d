"""The ``failover-agent`` console script and ``python -m failover_agent``.

The click group lives in :mod:`failover_agent.cli`, which needs the ``[agent]`` extra
(click, pydantic, ...). Importing it here, behind a guard, turns a missing extra into one
line with the install command instead of a ``ModuleNotFoundError`` traceback. With the
extra installed, :data:`main` *is* the click group.

Before that, when the agent's process has not imported httpx yet (the console script, ``python
-m failover_agent``), :func:`skip_httpx_command_line` keeps httpx from importing its own
command line: ``import httpx`` loads ``httpx._main`` whenever click, rich and pygments are
installed, which the agent extra installs, and that cost the agent **3.1 MiB** of RSS (rich,
pygments and httpx's CLI code: 52.3 -> 49.2 MiB for the agent on 2 domains, 2026-12-01) for a
command it never runs. httpx's own fallback for a missing CLI then stands in for ``httpx.main``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

__all__ = ["INSTALL_HINT", "main", "missing_module_hint", "skip_httpx_command_line"]

INSTALL_HINT = "pip install 'pytest-failover[agent]'"
_OUR_PACKAGES = ("failover_agent", "pytest_failover")


def missing_module_hint(exc: ModuleNotFoundError) -> str | None:
    """One line telling how to install what ``exc`` misses, or None when the missing module is
    one of ours (a bug, not a missing extra)."""
    top = (exc.name or "").partition(".")[0]
    if not top or top in _OUR_PACKAGES:
        return None
    return f"failover-agent needs the agent extra (missing module {top!r}): {INSTALL_HINT}"


def _missing(hint: str) -> Callable[..., Any]:
    def main(*_args: Any, **_kwargs: Any) -> None:
        sys.stderr.write(hint + "\n")
        sys.exit(1)

    return main


def skip_httpx_command_line() -> bool:
    """Mark ``httpx._main`` absent if httpx is not imported yet (then ``import httpx`` takes
    its fallback ``main``); True if it did. A process that imported httpx keeps it whole."""
    if "httpx" in sys.modules:
        return False
    # None in sys.modules means "cannot be imported" (the import system's rule); typeshed
    # types the mapping's values as modules only
    sys.modules["httpx._main"] = None  # type: ignore[assignment]
    return True


def _load() -> Callable[..., Any]:
    try:
        from .cli import main
    except ModuleNotFoundError as exc:
        hint = missing_module_hint(exc)
        if hint is None:
            raise
        return _missing(hint)
    return main


skip_httpx_command_line()
main = _load()

if __name__ == "__main__":
    main()
