"""The files an ``agent.toml`` names, loaded as the agent will load them.

:func:`~failover_agent.config.load_config` calls :func:`file_errors` after the file itself
validates, so ``failover-agent check-config`` and ``run`` report a key file that is not a
JWK, an override file that does not parse, a maintenance file that does not verify with the
signing key, a CA bundle that is not PEM or a history file that is not SQLite, each at its
key, before anything starts. Nothing here creates or
changes a file: folders the agent would create are only checked to be creatable.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Callable
from pathlib import Path

from .config import AgentConfig, ControlConfig

__all__ = ["file_errors"]


def file_errors(config: AgentConfig) -> list[tuple[str, str]]:
    """``(key, message)`` for every named file the agent could not use (empty: all good)."""
    from .control_writer import load_override, signing_key

    checks: list[tuple[str, Callable[[], None]]] = []
    if config.ca_file is not None:
        ca_file = config.ca_file
        checks.append(("ca_file", lambda: _read_ca(ca_file)))
    control = config.control
    if control is not None:
        checks.append(("control.signing_key_file", lambda: _exists_then(control.signing_key_file,
                                                                         lambda: signing_key(control))))
        override = control.override_file
        if override is not None and override.exists():  # absent: no overrides until it appears
            checks.append(("control.override_file", lambda: _exists_then(override, lambda: load_override(override))))
        maintenance = control.maintenance_file
        if maintenance is not None and maintenance.exists():  # absent: no run-time windows yet
            checks.append(("control.maintenance_file", lambda: _maintenance(maintenance, control)))
        if control.output_file is not None:
            output = control.output_file
            checks.append(("control.output_file", lambda: _writable(output)))
    history = config.status.history_path
    if history is not None:
        checks.append(("status.history_path", lambda: _history(history)))
    errors = []
    for key, check in checks:
        try:
            check()
        except (OSError, ValueError) as exc:
            errors.append((key, str(exc)))
    return errors


def _exists_then(path: Path, load: Callable[[], object]) -> None:
    if not path.is_file():
        raise ValueError(f"no such file: {path}")
    load()


def _maintenance(path: Path, control: ControlConfig) -> None:
    """The file verifies with the signing key, as the agent reads it (no key: reported at its own key)."""
    from .control_writer import signing_key
    from .maintenance_file import read_windows

    try:
        key = signing_key(control)
    except (OSError, ValueError):
        return  # the key's own error, at control.signing_key_file, says it all
    if not path.is_file():
        raise ValueError(f"{path}: is a folder, not a file")
    try:
        read_windows(path.read_bytes(), key)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}; move it aside to start with no run-time windows") from None


def _read_ca(path: Path) -> None:
    def load() -> None:
        try:
            ssl.create_default_context(cafile=str(path))
        except ssl.SSLError as exc:
            raise ValueError(f"{path}: not a PEM bundle of CA certificates ({exc.reason or exc})") from None

    _exists_then(path, load)


def _writable(path: Path) -> None:
    """The agent can write ``path``, creating its folders: checked without creating anything."""
    if path.is_dir():
        raise ValueError(f"{path}: is a folder, not a file")
    existing = path if path.exists() else next(p for p in path.parents if p.exists())
    if existing != path and not existing.is_dir():
        raise ValueError(f"{path}: cannot create it: {existing} is not a folder")
    if not os.access(existing, os.W_OK):
        raise ValueError(f"{path}: cannot write it: no permission to write {existing}")


def _history(path: Path) -> None:
    from .status.store import HistoryFile, HistoryFileError

    _writable(path)
    try:
        HistoryFile(path, retention_days=1.0, max_rows=1000).check()
    except HistoryFileError as exc:
        raise ValueError(str(exc)) from None
