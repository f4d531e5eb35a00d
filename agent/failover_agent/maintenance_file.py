"""Maintenance windows started at run time: a signed file the agent verifies.

``failover-agent maintenance start|end agent.toml ...`` reads ``control.maintenance_file``,
changes its list of windows, signs it with ``control.signing_key_file`` (the agent's own key)
and replaces the file atomically. The agent re-reads the file when it changes and takes it
only if:

- it is a JWS (compact) whose ``typ`` is :data:`TYP`, signed with the agent's key under the
  key's own algorithm (the allow-list of :mod:`pytest_failover.control`: a control document,
  of another ``typ``, is not a maintenance file, nor the other way round);
- its ``version`` is not lower than the highest this agent has taken (an older signed file
  copied back does not bring back windows that were ended).

Otherwise it logs why and keeps the windows it had. Why this is safe: writing the file
is not enough to start or end a window, one must sign it, and the signing key is the one
that already decides what every client does (the control document); the file's windows
have absolute end times, so a file that stops changing stops mattering. The command
needs no listener, no port and no running agent, and one signed file can be copied to every
location's agent.

Payload::

    {"version": 1733364000123,
     "windows": [{"id": "m-1733364000-1", "pool": "api", "domains": ["https://api.example.com"],
                  "start": 1733364000.0, "end": 1733367600.0, "drain": 300.0, "reason": "upgrade"}]}
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_failover.control import MAX_DOCUMENT_BYTES, ControlKey

from .control_writer import signing_key
from .maintenance import Window

if TYPE_CHECKING:
    from .config import ControlConfig

__all__ = ["TYP", "MaintenanceFile", "read_windows", "sign_windows"]

log = logging.getLogger("failover_agent.maintenance")

TYP = "failover-maintenance+jwt"
"""The ``typ`` header of a maintenance file."""

_WINDOW_KEYS = {"id", "pool", "domains", "start", "end", "drain", "reason"}


def sign_windows(windows: Sequence[Window], version: int, key: ControlKey) -> bytes:
    """The signed file holding ``windows`` (each ``source`` is its id)."""
    from joserfc import jws

    header: dict[str, Any] = {"alg": key.alg, "typ": TYP}
    if key.kid is not None:
        header["kid"] = key.kid
    payload = {"version": version, "windows": [
        {"id": w.source, "pool": w.pool, "domains": sorted(w.domains), "start": w.start, "end": w.end,
         "drain": w.drain, "reason": w.reason} for w in windows]}
    body = json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()
    return jws.serialize_compact(header, body, key.jose_key(private=True), registry=key.jws_registry()).encode()


def read_windows(raw: bytes, key: ControlKey) -> tuple[int, list[Window]]:
    """``(version, windows)`` of a signed file; ``ValueError`` saying what is wrong."""
    from joserfc import jws
    from joserfc.errors import JoseError

    if len(raw) > MAX_DOCUMENT_BYTES:
        raise ValueError(f"larger than {MAX_DOCUMENT_BYTES} bytes")
    try:
        token = jws.deserialize_compact(raw.strip(), key.jose_key(private=False), registry=key.jws_registry())
    except (JoseError, ValueError, TypeError) as exc:
        raise ValueError(f"not signed with {key.describe()} ({type(exc).__name__}: {exc})") from None
    if token.headers().get("typ") != TYP:
        raise ValueError(f"typ is {token.headers().get('typ')!r}, not {TYP!r}: not a maintenance file")
    try:
        data = json.loads(token.payload)
        version = data["version"]
        items = data["windows"]
        if not isinstance(version, int) or not isinstance(items, list):
            raise TypeError("version must be an integer and windows a list")
        windows = []
        for item in items:
            if not isinstance(item, dict) or set(item) != _WINDOW_KEYS:
                raise TypeError(f"a window has exactly the keys {sorted(_WINDOW_KEYS)}")
            windows.append(Window(pool=str(item["pool"]), domains=frozenset(map(str, item["domains"])),
                                  start=float(item["start"]), end=float(item["end"]), drain=float(item["drain"]),
                                  reason=str(item["reason"]), source=str(item["id"])))
    except (ValueError, TypeError, KeyError) as exc:
        raise ValueError(f"malformed payload: {exc}") from None
    return version, windows


@dataclass(slots=True)
class MaintenanceFile:
    """The agent's reader: the windows of the latest good file (see the module docstring)."""

    path: Path
    key: ControlKey
    version: int = -1
    windows: tuple[Window, ...] = ()
    _mtime: float | None = None

    @classmethod
    def of(cls, control: ControlConfig) -> MaintenanceFile | None:
        """The reader of ``control.maintenance_file`` with the control key (None: no such file
        configured); for an agent and for the quorum publisher alike."""
        if control.maintenance_file is None:
            return None
        return cls(control.maintenance_file, signing_key(control))

    def current(self) -> tuple[Window, ...]:
        """The windows, re-reading the file if it changed (a bad file is logged and ignored)."""
        try:
            mtime = self.path.stat().st_mtime
        except FileNotFoundError:
            if self._mtime is not None:
                log.info("maintenance file %s removed; the windows it started stay until they end", self.path)
            self._mtime = None
            return self.windows
        if mtime == self._mtime:
            return self.windows
        self._mtime = mtime
        try:
            version, windows = read_windows(self.path.read_bytes(), self.key)
        except (OSError, ValueError) as exc:
            log.error("maintenance file %s ignored, the previous windows kept: %s", self.path, exc)
            return self.windows
        if version < self.version:
            log.error("maintenance file %s ignored: version %d is older than %d, already taken (a copy of an "
                      "older file?)", self.path, version, self.version)
            return self.windows
        self.version, self.windows = version, tuple(windows)
        log.info("maintenance file %s: version %d, %d window(s)", self.path, version, len(windows))
        return self.windows
