"""What the status page is served: its bundled assets and the ``/status.json`` document.

The page (``assets/index.html``, ``status.js``, ``status.css``: hand-written, no library, no
CDN, so it works offline) is static; its script fetches ``/status.json`` and updates the page
in place. The document is :meth:`AgentState.as_dict <failover_agent.state.AgentState.as_dict>`
plus ``now`` (the agent's clock), ``refresh`` (how often the page fetches the document:
half the shortest probe interval, 0.5 to 5 s), ``history`` (where it is kept), and a
``history`` object in every pool and every domain (the schema is in docs/agent.md).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from importlib import resources
from typing import Any

from ..config import AgentConfig
from ..maintenance import NOTHING, Decision, Window
from ..state import AgentState
from .history import Series
from .recorder import Recorder, refresh_for

__all__ = ["ASSETS", "asset", "status_document"]

ASSETS = {
    "index.html": "text/html",
    "status.js": "text/javascript",
    "status.css": "text/css",
}
"""The bundled files, with their content types."""


def asset(name: str) -> bytes:
    """The bytes of one bundled file (a name of :data:`ASSETS`)."""
    if name not in ASSETS:
        raise KeyError(name)
    return (resources.files(__package__) / "assets" / name).read_bytes()


def status_document(state: AgentState, config: AgentConfig, recorder: Recorder | None,
                    now: float | None = None, maintenance: Decision | None = None) -> Callable[[], dict[str, Any]]:
    """The ``/status.json`` document, in two steps: call this on the event loop (it takes a
    consistent snapshot, copying arrays in C), then call what it returns anywhere (it formats
    the history: the costly part, about 0.3 s at 1,000 domains, best done in a thread)."""
    now = time.time() if now is None else now
    doc: dict[str, Any] = state.as_dict()
    doc["now"] = now
    doc["refresh"] = refresh_for(config)
    doc["history"] = None if recorder is None else recorder.describe()
    decision = maintenance or NOTHING
    doc["maintenance"] = {
        "active": [_window(w) for w in sorted(set(decision.active.values()), key=lambda w: (w.end, w.pool, w.source))],
        "upcoming": [_window(w) for w in decision.upcoming],
    }
    for name, pool in doc["pools"].items():
        for url, domain in pool["domains"].items():
            domain["maintenance"] = decision.is_active(name, url)
    copies: dict[tuple[str, str], Series] = {}
    if recorder is not None:
        for name, pool in doc["pools"].items():
            for key in [(name, ""), *((name, url) for url in pool["domains"])]:
                series = recorder.history.get(key)
                if series is not None:
                    copies[key] = series.copy()

    def finish() -> dict[str, Any]:
        for name, pool in doc["pools"].items():
            pool["history"] = _describe(copies.get((name, "")), now)
            for url, domain in pool["domains"].items():
                domain["history"] = _describe(copies.get((name, url)), now)
        return doc

    return finish


def _window(window: Window) -> dict[str, object]:
    return {"pool": window.pool, "domains": sorted(window.domains), "start": window.start, "end": window.end,
            "drain": window.drain, "reason": window.reason}


def _describe(series: Series | None, now: float) -> dict[str, object] | None:
    return None if series is None else series.describe(now)
