"""Per-request failover options for clients without per-request extensions."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator, Mapping

from .._values import RequestOptions

__all__ = ["current", "current_extensions", "failover_options"]

Current = tuple[dict[str, object], RequestOptions]  # the extensions and the options they hold, checked

_NONE: Current = ({}, RequestOptions.from_extensions({}))
_current: contextvars.ContextVar[Current] = contextvars.ContextVar("pytest_failover_options", default=_NONE)


@contextlib.contextmanager
def failover_options(options: Mapping[str, object]) -> Iterator[None]:
    """Give ``options`` (the transports' ``extensions["failover"]`` dict) to every
    request a failover adapter or middleware sends inside the block::

        with failover_options({"domain": "https://api2.example.com"}):
            session.get("https://api.example.com/v1/rooms")

    The dict is checked on entry (an unknown key is a ``ValueError``). An inner
    block replaces an outer one; the block follows the current thread and asyncio task.
    """
    extensions: dict[str, object] = {"failover": dict(options)}
    checked = RequestOptions.from_extensions(extensions)  # a misspelt option fails here, not per request
    token = _current.set((extensions, checked))
    try:
        yield
    finally:
        _current.reset(token)


# The ``extensions`` of a request sent now (``{"failover": {...}}`` or ``{}``) and the
# ``RequestOptions`` they hold, read once on entering the block: the context variable's own
# ``get`` (asked for every request: a C call, no Python frame of ours around it).
current: Callable[[], Current] = _current.get


def current_extensions() -> dict[str, object]:
    """The ``extensions`` of a request sent now: ``{"failover": {...}}`` or ``{}``."""
    return _current.get()[0]
