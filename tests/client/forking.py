"""Running a test's code in a fork's child of the test process (``test_fork.py``, and
shared health's in ``tests/shared``)."""

from __future__ import annotations

import os
import select
import signal
from collections.abc import Callable

WITHIN = 15.0  # seconds a child has to report


def in_child(body: Callable[[], str]) -> str:
    """What ``body()`` returned in a fork's child of this process (``raised ...`` if it
    raised), or ``no answer`` if it said nothing within :data:`WITHIN` (it is killed)."""
    out, into = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report, and leave without running any of the parent's exit work
        try:
            said = body()
        except BaseException as exc:
            said = f"raised {exc!r}"
        os.write(into, said.encode()[:4096] or b"-")
        os._exit(0)
    try:
        ready, _, _ = select.select([out], [], [], WITHIN)
        said = os.read(out, 4096).decode() if ready else "no answer"
    finally:
        os.close(out)
        os.close(into)
        os.kill(pid, signal.SIGKILL)  # (gone already, unless it hangs)
        os.waitpid(pid, 0)
    return said
