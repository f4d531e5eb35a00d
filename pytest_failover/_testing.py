"""Testing mode: no wait before a retry, for test suites (stamina's ``set_testing``).

A test of an outage meets the waits a failover client makes between attempts: the
backoff's jitter, a schedule table's offsets, a server's ``Retry-After``. Two domains
answering 503 with ``Retry-After: 2`` held such a test 2 s, two refusing domains 0.4 s (the
default backoff's). In testing mode a retry goes at once, and nothing else changes: each
retry is still decided as if it had waited (the same attempts to the same domains in the
same order, the same stop when the wait would have passed the deadline, the same attempt
time), only the sleep is skipped. Hedge delays and the wait for another request's probe
are kept: they decide which attempts go out, not when a decided one does.

The mode is one flag for the process, read by the plan's one backoff rule
(``RequestPlan._in_time``); the pytest plugin sets it for a run with the ini option
``failover_testing = true``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

__all__ = ["MODE", "is_testing", "set_testing"]


class _Mode:
    """The process's testing mode (one object, so the plan reads one attribute)."""

    __slots__ = ("skip_waits",)

    def __init__(self) -> None:
        self.skip_waits = False


MODE = _Mode()


def set_testing(testing: bool) -> contextlib.AbstractContextManager[None]:
    """Turn testing mode on (``True``: no wait before a retry) or off, at once, for every
    failover client in the process. Used as a context manager, the mode it found comes back
    when the block ends::

        with pytest_failover.set_testing(True):
            ...
    """
    previous = MODE.skip_waits
    MODE.skip_waits = bool(testing)
    return _restoring(previous)


def is_testing() -> bool:
    """Is testing mode on (:func:`set_testing`)?"""
    return MODE.skip_waits


@contextlib.contextmanager
def _restoring(previous: bool) -> Iterator[None]:
    try:
        yield
    finally:
        MODE.skip_waits = previous
