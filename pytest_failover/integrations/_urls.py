"""``httpx.URL`` from a URL string, remembered: parsing one costs more than the rest of a
front-end's conversions together, and an application calls the same URLs again and again."""

from __future__ import annotations

import httpx

__all__ = ["parse"]

_LIMIT = 512  # URLs remembered; the table starts afresh when full
_seen: dict[str, httpx.URL] = {}


def parse(url: str) -> httpx.URL:
    """``httpx.URL(url)``; the same immutable object for the same string."""
    parsed = _seen.get(url)
    if parsed is None:
        parsed = httpx.URL(url)
        if len(_seen) >= _LIMIT:
            _seen.clear()
        _seen[url] = parsed
    return parsed
