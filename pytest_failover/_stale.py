"""The stale-response fallback: the last good GET response per URL, bounded.

When every domain failed or is open, a GET for a URL that recently succeeded is
answered from here, marked ``X-Failover-Stale: 1`` and ``extensions["failover"].stale``.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

import httpx

__all__ = ["StaleCache"]

STALE_HEADER = "X-Failover-Stale"


@dataclass(frozen=True, slots=True)
class _Entry:
    stored_at: float
    status: int
    headers: tuple[tuple[bytes, bytes], ...]
    content: bytes


class StaleCache:
    """An LRU of ``(pool, path?query) -> response``; thread-safe."""

    def __init__(self, *, max_entries: int = 256) -> None:
        self._entries: OrderedDict[tuple[str, str], _Entry] = OrderedDict()
        self._max_entries = max_entries
        self._lock = threading.Lock()

    @staticmethod
    def key(pool: str, url: httpx.URL) -> tuple[str, str]:
        return pool, url.raw_path.decode("ascii")

    def store(self, pool: str, url: httpx.URL, response: httpx.Response, now: float) -> None:
        entry = _Entry(
            stored_at=now,
            status=response.status_code,
            headers=tuple(
                (k, v)
                for k, v in response.headers.raw
                if k.lower() not in (b"content-encoding", b"transfer-encoding", b"content-length")
            ),
            content=response.content,
        )
        key = self.key(pool, url)
        with self._lock:
            self._entries[key] = entry
            self._entries.move_to_end(key)
            while len(self._entries) > self._max_entries:
                self._entries.popitem(last=False)

    def get(self, pool: str, url: httpx.URL, now: float, *, max_age: float) -> httpx.Response | None:
        with self._lock:
            entry = self._entries.get(self.key(pool, url))
        if entry is None or now - entry.stored_at > max_age:
            return None
        headers = httpx.Headers(list(entry.headers))
        headers[STALE_HEADER] = "1"
        headers["Age"] = str(int(now - entry.stored_at))
        return httpx.Response(entry.status, headers=headers, content=entry.content)
