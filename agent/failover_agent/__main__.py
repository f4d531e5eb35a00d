"""The ``failover-agent`` console script and ``python -m failover_agent``.

The click group lives in :mod:`failover_agent.cli`, which needs the ``[agent]`` extra
(click, pydantic, ...). Importing it here, behind a guard, turns a missing extra into one
line with the install command instead of a ``ModuleNotFoundError`` traceback. With the
extra installed, :data:`main` *is* the click group.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

__all__ = ["INSTALL_HINT", "main", "missing_module_hint"]

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


def _load() -> Callable[..., Any]:
    try:
        from .cli import main
    except ModuleNotFoundError as exc:
        hint = missing_module_hint(exc)
        if hint is None:
            raise
        return _missing(hint)
    return main


main = _load()

if __name__ == "__main__":
    main()
