"""The "did you mean ...?" rule, for every misspelt name a user can give.

Fault names (:func:`pytest_failover.faults.by_name`) suggest through :func:`did_you_mean`;
the agent's configuration keys use the same difflib rule (the agent imports only public
names of the library, and a one-line standard-library call is not worth one).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = ["did_you_mean"]


def did_you_mean(name: object, known: Iterable[str]) -> str | None:
    """The one name of ``known`` closest to ``name`` (``difflib``'s default cut-off), or None."""
    close = difflib.get_close_matches(str(name), list(known), n=1)
    return close[0] if close else None
