"""Persistence of each pool's last good domain across restarts (optional).

The file is JSON (``{"version": 1, "pools": {"api": "https://api2.example.com"}}``).

Loading never raises and never blocks:

- the path is ``stat``-ed first and opened only if it names a regular file (so a FIFO,
  a device or a directory is never opened), then opened with ``O_NONBLOCK`` and checked
  again with ``fstat`` on the open descriptor (the path may have been swapped in
  between); symlinks are followed, to a regular file only;
- at most :data:`MAX_BYTES` (64 KiB) are read; a larger file is ignored;
- any failure (``OSError``, undecodable bytes, bad JSON, ``RecursionError`` from deep
  nesting, a wrong shape or type) is ignored with exactly one warning on the
  ``pytest_failover`` logger. A missing file is normal and silent.

Writing is atomic and leaves nothing behind for long:

- the mapping goes to ``.<basename>.failover-<random>.tmp`` in the target's folder,
  is ``fsync``-ed, then ``os.replace``-d over the target (and the folder is ``fsync``-ed,
  best effort, so the rename survives a power cut);
- a temporary file outlives its writer only if the process dies between creating it and
  the replace (kill -9, power loss). ``load()`` removes such leftovers *for this target*
  once they are older than :data:`LEFTOVER_AGE` seconds, so a writer in another process
  that is still busy is not disturbed. Leftovers of versions before this naming
  (``.failover-XXXXXXXX``, from ``tempfile.mkstemp``) in the same folder are removed
  under the same age rule.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import secrets
import stat
import threading
import time
from collections.abc import Mapping

__all__ = ["StickyFile"]

logger = logging.getLogger("pytest_failover")

MAX_BYTES = 64 * 1024
"""The largest sticky file read (and written); a larger one is ignored."""

LEFTOVER_AGE = 10.0
"""Seconds after which a temporary file of this target is a crash leftover."""

# What ``tempfile.mkstemp(prefix=".failover-")`` produced before temporary files were named.
_LEGACY_LEFTOVER = re.compile(r"\.failover-[a-z0-9_]{8}")

_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_BINARY = getattr(os, "O_BINARY", 0)  # Windows: no newline translation
_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)


class _Ignored(Exception):
    """Why the file on disk is not used; logged once by ``load``."""


class StickyFile:
    """One JSON file holding ``pool -> last good domain``; thread-safe, never raises."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self._lock = threading.Lock()
        self._saved: dict[str, str] = {}

    @property
    def _prefix(self) -> str:
        return f".{os.path.basename(self.path)}.failover-"

    def _folder(self) -> str:
        return os.path.dirname(os.path.abspath(self.path))

    def load(self) -> dict[str, str]:
        """The saved mapping, or ``{}`` when the file is missing or unusable (one warning)."""
        self._remove_leftovers()
        try:
            raw = self._read()
            if raw is None:
                return {}
            pools = self._parse(raw)
        except _Ignored as exc:
            logger.warning("ignoring sticky-domain file %s: %s", self.path, exc)
            return {}
        with self._lock:
            self._saved = dict(pools)
        return dict(pools)

    def _read(self) -> bytes | None:
        """The file's bytes; None if it does not exist."""
        try:
            before = os.stat(self.path)
            if not stat.S_ISREG(before.st_mode):
                raise _Ignored(f"not a regular file (mode {stat.filemode(before.st_mode)})")
            if before.st_size > MAX_BYTES:
                raise _Ignored(f"larger than {MAX_BYTES} bytes ({before.st_size})")
            fd = os.open(self.path, os.O_RDONLY | _O_NONBLOCK | _O_CLOEXEC | _O_BINARY)
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:  # ValueError: a NUL in the path
            raise _Ignored(str(exc)) from exc
        try:
            opened = os.fstat(fd)
            if not stat.S_ISREG(opened.st_mode):
                raise _Ignored(f"not a regular file (mode {stat.filemode(opened.st_mode)})")
            if opened.st_size > MAX_BYTES:
                raise _Ignored(f"larger than {MAX_BYTES} bytes ({opened.st_size})")
            chunks: list[bytes] = []
            size = 0
            while size <= MAX_BYTES:
                chunk = os.read(fd, MAX_BYTES + 1 - size)
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
            if size > MAX_BYTES:
                raise _Ignored(f"larger than {MAX_BYTES} bytes (grew while read)")
            return b"".join(chunks)
        except OSError as exc:
            raise _Ignored(str(exc)) from exc
        finally:
            os.close(fd)

    @staticmethod
    def _parse(raw: bytes) -> dict[str, str]:
        try:
            data = json.loads(raw)
        except (ValueError, RecursionError) as exc:  # ValueError covers bad UTF-8 and bad JSON
            raise _Ignored(f"not JSON ({type(exc).__name__}: {str(exc)[:200]})") from None
        if not isinstance(data, dict):
            raise _Ignored("unknown format (not an object)")
        version = data.get("version")
        if type(version) is not int or version != 1:  # True == 1 and 1.0 == 1: neither is version 1
            raise _Ignored("unknown format (version is not 1)")
        pools = data.get("pools")
        if not isinstance(pools, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in pools.items()
        ):
            raise _Ignored("'pools' is not a map of strings")
        return pools

    def _remove_leftovers(self) -> None:
        """Delete this target's temporary files older than ``LEFTOVER_AGE``; errors are ignored."""
        folder = self._folder()
        prefix = self._prefix
        cutoff = time.time() - LEFTOVER_AGE
        try:
            with os.scandir(folder) as listing:
                names = [
                    e.name
                    for e in listing
                    if (e.name.startswith(prefix) and e.name.endswith(".tmp"))
                    or _LEGACY_LEFTOVER.fullmatch(e.name)
                ]
        except (OSError, ValueError):
            return
        for name in names:
            leftover = os.path.join(folder, name)
            try:
                info = os.lstat(leftover)
                if stat.S_ISREG(info.st_mode) and info.st_mtime < cutoff:
                    os.unlink(leftover)
            except OSError:
                continue  # gone already, or not ours to remove

    def save(self, serving: Mapping[str, str]) -> None:
        """Write the mapping if it changed; errors are logged, never raised."""
        with self._lock:
            merged = {**self._saved, **serving}
            if merged == self._saved:
                return
            data = json.dumps({"version": 1, "pools": merged}, sort_keys=True).encode("utf-8")
            if len(data) > MAX_BYTES:
                logger.warning(
                    "could not persist sticky domains to %s: %d bytes is over %d",
                    self.path,
                    len(data),
                    MAX_BYTES,
                )
                return
            folder = self._folder()
            tmp = os.path.join(folder, f"{self._prefix}{secrets.token_hex(8)}.tmp")
            try:
                self._write(tmp, data)
            except OSError as exc:
                logger.warning("could not persist sticky domains to %s: %s", self.path, exc)
                return
            self._saved = merged
            _fsync_folder(folder)

    def _write(self, tmp: str, data: bytes) -> None:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_CLOEXEC | _O_BINARY, 0o600)
        try:
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise


def _fsync_folder(folder: str) -> None:
    """Make a rename in ``folder`` durable where the platform allows it (POSIX)."""
    if os.name != "posix":
        return
    try:
        fd = os.open(folder, os.O_RDONLY | _O_CLOEXEC)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
