"""The status page: its history (memory and SQLite), what ``/status.json`` serves, the assets.

- :mod:`.history`: per check, the last results and the uptime counts (pure, bounded);
- :mod:`.store`: the SQLite history file (``[status] history_path``);
- :mod:`.recorder`: feeds the results of the agent's checks into both;
- :mod:`.page`: the bundled page (``assets/``) and the ``/status.json`` document.
"""

from .history import History, Sample, Series
from .page import asset, status_document
from .recorder import Recorder
from .store import HistoryFile, HistoryFileError

__all__ = ["History", "HistoryFile", "HistoryFileError", "Recorder", "Sample", "Series", "asset",
           "status_document"]
