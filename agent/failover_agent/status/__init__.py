"""The status page: its history (memory and SQLite), what ``/status.json`` serves, the assets.

- :mod:`.history`: per check, the last results and the uptime counts (pure, bounded);
- :mod:`.store`: the SQLite history file (``[status] history_path``);
- :mod:`.recorder`: feeds the results of the agent's checks into both;
- :mod:`.page`: the bundled page (``assets/``) and the ``/status.json`` document.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .history import History, Sample, Series
from .page import asset, status_document
from .recorder import Recorder

if TYPE_CHECKING:
    from .store import HistoryFile, HistoryFileError

__all__ = ["History", "HistoryFile", "HistoryFileError", "Recorder", "Sample", "Series", "asset",
           "status_document"]


def __getattr__(name: str) -> Any:
    """:mod:`.store` (and with it ``sqlite3``: 1 MiB of RSS) is imported when a history file
    is configured, or its names are asked for here."""
    if name in ("HistoryFile", "HistoryFileError"):
        from . import store

        return getattr(store, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
