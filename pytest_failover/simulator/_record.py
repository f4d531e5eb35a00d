"""What a fake domain saw: the requests it received and the faults it injected."""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from ..faults import Fault

__all__ = ["RECORD_LIMIT", "FaultEvent", "RecordedRequest", "Recorder", "Stage"]

Stage = Literal["resolve", "connect", "handshake", "respond"]


@dataclass(frozen=True, slots=True, kw_only=True)
class RecordedRequest:
    """One HTTP request as a fake domain received it.

    ``path`` is the request target as sent (query included); ``headers`` has
    lower-case names (repeated headers joined with ``", "``); ``fault`` is the
    fault this request actually got (``Healthy()`` when it was answered normally,
    ``Status(503)`` when a ``flapping`` domain failed it, ...).
    """

    host: str
    scheme: Literal["http", "https"]
    method: str
    path: str
    headers: Mapping[str, str]
    body: bytes
    fault: Fault
    time: float

    def json(self) -> Any:
        """The body decoded as JSON."""
        return json.loads(self.body)


@dataclass(frozen=True, slots=True, kw_only=True)
class FaultEvent:
    """A fault that struck: ``stage`` says where (a lookup, a connect, a handshake, a request)."""

    host: str
    stage: Stage
    fault: Fault
    time: float


#: How many requests (and, separately, fault events) are kept; older ones are dropped, so a
#: long-running demo cannot grow without bound.
RECORD_LIMIT = 100_000


class Recorder:
    """Thread-safe log of requests and fault events, in arrival order (the newest ``limit``)."""

    def __init__(self, limit: int = RECORD_LIMIT) -> None:
        self._lock = threading.Lock()
        self._requests: deque[RecordedRequest] = deque(maxlen=limit)
        self._events: deque[FaultEvent] = deque(maxlen=limit)

    def request(self, request: RecordedRequest) -> None:
        with self._lock:
            self._requests.append(request)

    def event(self, host: str, stage: Stage, fault: Fault) -> None:
        with self._lock:
            self._events.append(FaultEvent(host=host, stage=stage, fault=fault, time=time.time()))

    def requests(self, host: str | None = None) -> list[RecordedRequest]:
        with self._lock:
            return [r for r in self._requests if host is None or r.host == host]

    def events(self, host: str | None = None) -> list[FaultEvent]:
        with self._lock:
            return [e for e in self._events if host is None or e.host == host]

    def clear(self) -> None:
        with self._lock:
            self._requests.clear()
            self._events.clear()
