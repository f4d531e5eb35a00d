"""Persistence of each pool's last good domain across restarts (optional).

The file is JSON (``{"version": 1, "pools": {"api": "https://api2.example.com"}}``),
written atomically (a temporary file in the same folder, then ``os.replace``). A
missing file is normal; a corrupt one is ignored with a warning.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import threading
from collections.abc import Mapping

__all__ = ["StickyFile"]

logger = logging.getLogger("pytest_failover")


class StickyFile:
    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self._lock = threading.Lock()
        self._saved: dict[str, str] = {}

    def load(self) -> dict[str, str]:
        try:
            with open(self.path, encoding="utf-8") as f:
                data = json.load(f)
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            logger.warning("ignoring sticky-domain file %s: %s", self.path, exc)
            return {}
        if not isinstance(data, dict) or data.get("version") != 1:
            logger.warning("ignoring sticky-domain file %s: unknown format", self.path)
            return {}
        pools = data.get("pools")
        if not isinstance(pools, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in pools.items()
        ):
            logger.warning("ignoring sticky-domain file %s: 'pools' is not a map of strings", self.path)
            return {}
        self._saved = dict(pools)
        return dict(pools)

    def save(self, serving: Mapping[str, str]) -> None:
        """Write the mapping if it changed; errors are logged, never raised."""
        with self._lock:
            merged = {**self._saved, **serving}
            if merged == self._saved:
                return
            folder = os.path.dirname(os.path.abspath(self.path))
            try:
                fd, tmp = tempfile.mkstemp(prefix=".failover-", dir=folder)
                try:
                    with os.fdopen(fd, "w", encoding="utf-8") as f:
                        json.dump({"version": 1, "pools": merged}, f, sort_keys=True)
                    os.replace(tmp, self.path)
                except BaseException:
                    os.unlink(tmp)
                    raise
            except OSError as exc:
                logger.warning("could not persist sticky domains to %s: %s", self.path, exc)
                return
            self._saved = merged
