"""What the front-ends convert on every request: URLs (remembered) and header lists.

Parsing an ``httpx.URL`` costs more than the rest of a front-end's conversions
together, and an application calls the same URLs again and again, so parsed URLs are kept.
"""

from __future__ import annotations

import httpx

__all__ = ["decoded", "parse"]

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


def decoded(raw: list[tuple[bytes, bytes]]) -> list[tuple[str, str]]:
    """httpx's raw header list as ``str`` pairs, each name spelt as it was given."""
    return [(name.decode("latin-1"), value.decode("latin-1")) for name, value in raw]
