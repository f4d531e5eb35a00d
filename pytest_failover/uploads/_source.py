"""What is uploaded: bytes, a seekable binary file, or a path, read one chunk at an offset."""

from __future__ import annotations

import io
import os
import stat
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import BinaryIO, Protocol, TypeAlias

__all__ = ["Data", "Source", "source_of"]

#: What ``TusUpload`` accepts as its data.
Data: TypeAlias = bytes | bytearray | memoryview | str | os.PathLike[str] | BinaryIO


class Source(Protocol):
    """A fixed number of bytes, each chunk read at its offset (again after a failover)."""

    length: int
    #: Whether ``read`` may block on a disk (the async uploader then reads in a thread).
    blocking: bool

    def opened(self) -> AbstractContextManager[None]:
        """Hold the data readable (a path is opened) for one ``upload()``."""
        ...

    def read(self, offset: int, size: int) -> bytes: ...


class _Bytes:
    blocking = False

    def __init__(self, data: bytes | bytearray | memoryview) -> None:
        view = memoryview(data)
        if not view.contiguous:
            raise ValueError("data: a memoryview must be contiguous")
        self._view = view.cast("B")
        self.length = self._view.nbytes

    @contextmanager
    def opened(self) -> Iterator[None]:
        yield

    def read(self, offset: int, size: int) -> bytes:
        return bytes(self._view[offset : offset + size])


class _File:
    """A caller's open file, from the position it had when the upload was made to its end."""

    blocking = True

    def __init__(self, file: BinaryIO, *, name: str = "data") -> None:
        if isinstance(file, io.TextIOBase):
            raise TypeError(f"{name}: the file is open in text mode; open it with 'rb'")
        if not (callable(getattr(file, "seekable", None)) and file.seekable()):
            raise ValueError(
                f"{name}: the file must be seekable: each chunk is read at its offset, and "
                "again after a failover"
            )
        self._file = file
        self._start = file.tell()
        end = file.seek(0, io.SEEK_END)
        file.seek(self._start)
        self.length = max(0, end - self._start)

    @contextmanager
    def opened(self) -> Iterator[None]:
        yield  # the caller's file: opened and closed by the caller

    def read(self, offset: int, size: int) -> bytes:
        self._file.seek(self._start + offset)
        parts: list[bytes] = []
        left = size
        while left > 0:
            part = self._file.read(left)
            if not part:
                break
            if not isinstance(part, bytes | bytearray):
                raise TypeError("data: the file returned text; open it with 'rb'")
            parts.append(bytes(part))
            left -= len(part)
        if left:
            raise ValueError(
                f"data: the file ended {left} bytes before offset {offset + size}, within the "
                f"{self.length} bytes it had when the upload started: it changed meanwhile"
            )
        return b"".join(parts)


class _Path:
    """A file by name, opened for the duration of ``upload()``."""

    blocking = True

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._path = os.fspath(path)
        info = os.stat(self._path)  # FileNotFoundError names the path
        if not stat.S_ISREG(info.st_mode):
            raise ValueError(f"data: {self._path!r} is not a regular file")
        self.length = info.st_size
        self._file: _File | None = None

    @contextmanager
    def opened(self) -> Iterator[None]:
        with open(self._path, "rb") as file:
            self._file = _File(file, name=repr(self._path))
            if self._file.length != self.length:
                raise ValueError(
                    f"data: {self._path!r} holds {self._file.length} bytes now, not the "
                    f"{self.length} it had when the upload was made"
                )
            try:
                yield
            finally:
                self._file = None

    def read(self, offset: int, size: int) -> bytes:
        if self._file is None:
            raise RuntimeError("read outside opened()")
        return self._file.read(offset, size)


def source_of(data: object) -> Source:
    """The source for ``data``, validated: bytes-like, a path, or a seekable binary file."""
    if isinstance(data, bytes | bytearray | memoryview):
        return _Bytes(data)
    if isinstance(data, str | os.PathLike):
        return _Path(data)
    if callable(getattr(data, "read", None)) and callable(getattr(data, "seek", None)):
        return _File(data)  # type: ignore[arg-type]  # duck-typed: any object with read and seek
    raise TypeError(
        "data must be bytes, a path (str or os.PathLike) or a seekable binary file, "
        f"not {type(data).__name__}"
    )
