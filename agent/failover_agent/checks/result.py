"""What a domain probe or a pool probe returns."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["PHASES", "ProbeResult"]

PHASES = ("dns", "connect", "tls", "ttfb", "transfer", "total")
"""The timed phases of a pinned probe, in order."""


@dataclass(frozen=True, slots=True)
class ProbeResult:
    """One probe of one domain (or of a pool, through the failover client)."""

    success: bool
    status: int | None
    error_type: str | None
    duration: float
    phases: Mapping[str, float] = field(default_factory=dict)
    at: float = field(default_factory=time.time)
    detail: str = ""
    # pinned probes of https domains: the earliest notAfter (Unix time) of the verified chain
    cert_not_after: float | None = None
    # pool probes only
    served_by: str | None = None
    attempts: int = 0
