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

Writing is atomic, coalesced, and off the event loop where asked:

- ``save(mapping)`` writes in the calling thread (a sync front-end's request waits for
  it); ``save(mapping, wait=False)`` hands the write to the process's sticky writer
  thread and returns at once (an async front-end's request: an ``fsync`` takes
  milliseconds on a real disk, 1 to 15 ms on the CI's ext4, seconds on a busy one, and
  the loop must not wait). Both go through one rule: a write writes the newest mapping
  asked for, one write per file at a time, so a burst of changes while a write is
  under way costs one more write, not one each.
- ``flush()`` waits for a background write (``AsyncFailoverTransport.aclose`` does, from
  a worker thread); at interpreter exit an ``atexit`` hook waits for every pending one
  (10 s at most).

Writing leaves nothing behind for long:

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

import atexit
import contextlib
import json
import logging
import os
import queue
import re
import secrets
import stat
import threading
import time
from collections.abc import Mapping

from ._fork import renew_in_child

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
        self._lock = threading.Lock()  # guards the fields below; never held across I/O
        self._io = threading.Lock()  # one write at a time
        renew_in_child(self, StickyFile._forked)
        self._saved: dict[str, str] = {}  # what the file holds
        self._wanted: dict[str, str] = {}  # what it should hold (a new dict at each change)
        self._idle = threading.Event()  # clear while a background write is pending
        self._idle.set()

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
            self._saved = self._wanted = dict(pools)
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

    def save(self, serving: Mapping[str, str], *, wait: bool = True) -> None:
        """Make the file hold ``serving`` merged over the mapping asked for so far, if that
        changes anything; errors are logged, never raised. ``wait=False``: the process's
        sticky writer thread writes it and this returns at once (for an event loop)."""
        with self._lock:
            merged = {**self._wanted, **serving}
            pending = not self._idle.is_set()
            if merged == self._wanted and (merged == self._saved or (pending and not wait)):
                return  # written, or about to be
            self._wanted = merged
            if not wait:
                if not pending:
                    self._idle.clear()
                    _writer.submit(self)
                return
        self._write_wanted(background=False)

    def _forked(self) -> None:
        """In a fork's child (``_fork``): free locks, and a write the parent's writer thread
        had pending handed to the child's (the child's copy of the file's state still waits
        for it: no later save would hand it over, and ``flush`` would wait in vain)."""
        self._lock = threading.Lock()
        self._io = threading.Lock()
        if not self._idle.is_set():
            _writer.submit(self)

    def flush(self, timeout: float | None = None) -> bool:
        """Wait up to ``timeout`` seconds for a background write; True if none is pending."""
        return self._idle.wait(timeout)

    def _write_behind(self) -> None:
        """The writer thread's turn for this file."""
        try:
            self._write_wanted(background=True)
        finally:  # even after something unexpected: later saves submit it again
            self._idle.set()

    def _write_wanted(self, *, background: bool) -> None:
        """Write the newest mapping asked for until the file holds it (one attempt per
        mapping: a failed one waits for the next ``save``)."""
        with self._io:
            tried: dict[str, str] | None = None
            while True:
                with self._lock:
                    wanted = self._wanted
                    if wanted == self._saved or wanted is tried:
                        if background:
                            self._idle.set()  # under the lock: a save from now on submits it again
                        return
                if self._commit(wanted):
                    with self._lock:
                        self._saved = wanted
                tried = wanted

    def _commit(self, pools: dict[str, str]) -> bool:
        """Write ``pools`` to the file atomically; False (and one warning) if it failed."""
        data = json.dumps({"version": 1, "pools": pools}, sort_keys=True).encode("utf-8")
        if len(data) > MAX_BYTES:
            logger.warning(
                "could not persist sticky domains to %s: %d bytes is over %d", self.path, len(data), MAX_BYTES
            )
            return False
        folder = self._folder()
        tmp = os.path.join(folder, f"{self._prefix}{secrets.token_hex(8)}.tmp")
        try:
            self._write(tmp, data)
        except OSError as exc:
            logger.warning("could not persist sticky domains to %s: %s", self.path, exc)
            return False
        _fsync_folder(folder)
        return True

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


class _Writer:
    """The process's one sticky writer: a daemon thread writing the files handed to it,
    in turn. Handing one over is a queue put (microseconds); the thread starts with the
    first (a few milliseconds, once per process, again in a forked child) and, at
    interpreter exit, what was handed over is written first (``atexit``, 10 s at most)."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[StickyFile | threading.Event] = queue.SimpleQueue()
        self._lock = threading.Lock()
        renew_in_child(self, _Writer._forked)
        self._thread: threading.Thread | None = None

    def _forked(self) -> None:
        """In a fork's child (``_fork``): a free lock and an empty queue (each file hands its
        pending write over again: :meth:`StickyFile._forked`); :meth:`submit` starts the
        child's thread."""
        self._lock = threading.Lock()
        self._queue = queue.SimpleQueue()

    def submit(self, sticky: StickyFile) -> None:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():  # first, or in a forked child
                if self._thread is None:
                    atexit.register(self.drain, 10.0)
                self._thread = threading.Thread(target=self._run, name="pytest-failover sticky writer", daemon=True)
                self._thread.start()
        self._queue.put(sticky)

    def drain(self, timeout: float) -> bool:
        """Wait until everything handed over so far is written; False after ``timeout``."""
        with self._lock:
            running = self._thread is not None and self._thread.is_alive()
        if not running:
            return True
        marker = threading.Event()
        self._queue.put(marker)
        return marker.wait(timeout)

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if isinstance(item, threading.Event):
                item.set()
            else:
                try:
                    item._write_behind()
                except Exception:  # a bug, not the disk (that is logged and survived): keep writing
                    logger.exception("sticky writer: writing %s failed", item.path)


_writer = _Writer()


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
