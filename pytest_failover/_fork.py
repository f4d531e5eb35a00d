"""What a fork's child sets afresh: the library's threads and locks as the parent left them.

A process that forks copies only the thread that called ``fork()``: a pre-fork server
(gunicorn with ``--preload``, uWSGI without ``lazy-apps``), Celery's prefork pool, and
``multiprocessing``'s default start on Linux all hand their children a transport made
before the fork. In the child the library's own threads are gone while their objects say
they run, and a lock that another thread held at the fork stays held for good. Left as
they were, a sync attempt was never cut at its deadline in the child (a trickled answer
held the call until the server stopped, then came back as a short 200), a hedged request
through the requests adapter waited for ever for a thread of the hedge pool, and a pool's
lock caught mid-update would stop every request.

Each object that owns such state registers here as it is made (weakly: it goes with its
last user), and the child renews it before any of the child's own code runs.
What the parent had armed or in flight belongs to the parent's threads, and its sockets
to the parent's connections: the child drops it, never acts on it. (OpenTelemetry's SDK
does the same for its batch processors' threads: ``os.register_at_fork`` there too.)
"""

from __future__ import annotations

import logging
import os
import threading
import weakref
from collections.abc import Callable
from functools import partial
from typing import Any

__all__ = ["call_in_child", "renew_in_child", "renew_locks"]

# id of the weak reference -> (the reference, what the child does with its object). Not a
# WeakKeyDictionary: that would hash the objects, and some (dataclasses) have no hash.
_objects: dict[int, tuple[weakref.ref[Any], Callable[[Any], None]]] = {}
_functions: list[Callable[[], None]] = []

logger = logging.getLogger("pytest_failover")


def renew_in_child(owner: object, renew: Callable[[Any], None]) -> None:
    """Have a fork's child call ``renew(owner)`` (``owner`` held weakly: nothing once it is
    gone): set its threads' state and its locks afresh, and drop what belonged to the
    parent's threads."""
    ref = weakref.ref(owner, _gone)
    _objects[id(ref)] = (ref, renew)


def renew_locks(owner: object, *names: str) -> None:
    """Have a fork's child give ``owner`` a new, free ``threading.Lock`` in each of its
    attributes ``names``: another thread may have held one at the fork, and would never
    let go in the child. (Nothing else keeps these locks: the attribute is read each time.)"""
    renew_in_child(owner, lambda renewed: _new_locks(renewed, names))


def call_in_child(function: Callable[[], None]) -> None:
    """Have a fork's child call ``function()``: a module's own state (held for good)."""
    _functions.append(function)


def _new_locks(owner: object, names: tuple[str, ...]) -> None:
    for name in names:
        setattr(owner, name, threading.Lock())


def _gone(ref: weakref.ref[Any]) -> None:
    _objects.pop(id(ref), None)


def _in_child() -> None:
    renewals: list[Callable[[], None]] = list(_functions)
    for ref, renew in list(_objects.values()):
        owner = ref()
        if owner is not None:
            renewals.append(partial(renew, owner))
    for renewal in renewals:
        try:
            renewal()
        except Exception:  # a bug in one must not leave the others as the parent left them
            logger.exception("failover: renewing the library's state in a fork's child failed")


os.register_at_fork(after_in_child=_in_child)
