"""A tus 1.0 server for fake domains, with storage that several of them share.

    storage = TusStorage()
    fd.add("api.example.com", TusServer(storage))
    fd.add("api2.example.com", TusServer(storage))   # a backup that shares the storage
    fd.add("api3.example.com", TusServer())          # one that does not: 404 for the others' uploads

``TusServer`` is an ordinary handler (``handler(request) -> Response``), so every fault
of the simulator applies to it as to any fake domain. It speaks the core protocol
(``HEAD``, ``PATCH``, ``OPTIONS``) with the ``creation`` and ``termination`` extensions
(https://tus.io/protocols/resumable-upload): an upload is created by ``POST`` with
``Upload-Length`` (``201`` and an absolute ``Location`` on the domain that answered),
``HEAD`` reports ``Upload-Offset``, ``PATCH`` with
``Content-Type: application/offset+octet-stream`` at the current ``Upload-Offset``
appends (``409`` at any other offset, ``204`` with the new offset), ``DELETE`` removes
it; an unknown upload is ``404``; a request without ``Tus-Resumable: 1.0.0`` gets
``412``. Uploads are kept in memory, in a ``TusStorage``.
"""

from __future__ import annotations

import base64
import binascii
import threading
import uuid
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from ._handlers import Response
from ._record import RecordedRequest

__all__ = ["StoredUpload", "TusServer", "TusStorage"]

TUS_VERSION = "1.0.0"
OFFSET_CONTENT_TYPE = "application/offset+octet-stream"
EXTENSIONS = "creation,termination"


@dataclass(slots=True, kw_only=True)
class StoredUpload:
    """One upload as the storage holds it: its declared length, metadata and bytes so far."""

    id: str
    length: int
    metadata: dict[str, bytes]
    data: bytearray = field(default_factory=bytearray)

    @property
    def offset(self) -> int:
        """How many bytes are stored."""
        return len(self.data)

    @property
    def complete(self) -> bool:
        return len(self.data) == self.length


class OffsetConflict(Exception):
    """A ``PATCH`` at an offset other than the stored one."""


class TusStorage:
    """Uploads kept in memory, shared by every ``TusServer`` given this storage. Thread-safe.

    ``max_size`` (bytes), if given, is announced as ``Tus-Max-Size`` and larger uploads
    are refused with ``413``.
    """

    def __init__(self, *, max_size: int | None = None) -> None:
        if max_size is not None and (
            not isinstance(max_size, int) or isinstance(max_size, bool) or max_size < 0
        ):
            raise ValueError(f"max_size must be a number of bytes >= 0 or None, not {max_size!r}")
        self.max_size = max_size
        self._lock = threading.Lock()
        self._uploads: dict[str, StoredUpload] = {}

    def create(self, length: int, metadata: dict[str, bytes] | None = None) -> StoredUpload:
        with self._lock:
            upload = StoredUpload(id=uuid.uuid4().hex, length=length, metadata=dict(metadata or {}))
            self._uploads[upload.id] = upload
            return upload

    def get(self, upload: str) -> StoredUpload | None:
        """The upload of that id or upload URL, or None."""
        with self._lock:
            return self._uploads.get(_upload_id(upload))

    def append(self, upload_id: str, offset: int, data: bytes) -> int | None:
        """Append ``data`` at ``offset``; returns the new offset (None: no such upload).

        Raises ``OffsetConflict`` when ``offset`` is not the stored offset, ``ValueError``
        when the data would pass the upload's length.
        """
        with self._lock:
            upload = self._uploads.get(upload_id)
            if upload is None:
                return None
            if offset != upload.offset:
                raise OffsetConflict(f"Upload-Offset {offset} but {upload.offset} bytes are stored")
            if upload.offset + len(data) > upload.length:
                raise ValueError(
                    f"{len(data)} bytes at offset {offset} pass the Upload-Length {upload.length}"
                )
            upload.data += data
            return upload.offset

    def delete(self, upload: str) -> bool:
        """Remove an upload (by id or URL); returns whether it existed."""
        with self._lock:
            return self._uploads.pop(_upload_id(upload), None) is not None

    def content(self, upload: str) -> bytes:
        """The bytes stored for an upload (by id or URL); ``KeyError`` if there is none."""
        with self._lock:
            found = self._uploads.get(_upload_id(upload))
            if found is None:
                raise KeyError(f"no upload {upload!r} in this storage; it holds {sorted(self._uploads)}")
            return bytes(found.data)

    def uploads(self) -> list[StoredUpload]:
        """Every upload, oldest first (the objects themselves: read, do not change them)."""
        with self._lock:
            return list(self._uploads.values())

    def clear(self) -> None:
        with self._lock:
            self._uploads.clear()


def _upload_id(upload: str) -> str:
    """An upload's id from itself or from its URL (the last path segment)."""
    return urlsplit(upload).path.rstrip("/").rsplit("/", 1)[-1]


class TusServer:
    """A tus 1.0 server as a fake domain's handler: ``fd.add(host, TusServer(storage))``.

    Uploads are created under ``path`` (``/files/`` by default) and live in
    ``storage``: give several fake domains the same storage for backups that share
    it, their own for backups that do not. Requests outside ``path`` get ``404``.
    """

    def __init__(self, storage: TusStorage | None = None, *, path: str = "/files/") -> None:
        if storage is not None and not isinstance(storage, TusStorage):
            raise TypeError(f"storage must be a TusStorage, not {type(storage).__name__}")
        if not isinstance(path, str) or not path.startswith("/"):
            raise ValueError(f"path must be an absolute URL path such as '/files/', not {path!r}")
        self.storage = storage if storage is not None else TusStorage()
        self.path = path if path.endswith("/") else path + "/"

    def __call__(self, request: RecordedRequest) -> Response:
        path = urlsplit(request.path).path
        if path != self.path.rstrip("/") and not path.startswith(self.path):
            return _answer(404, f"no tus endpoint at {path}; uploads live under {self.path}")
        if request.method == "OPTIONS":
            return self._options()
        if request.headers.get("tus-resumable") != TUS_VERSION:
            return _answer(
                412, f"Tus-Resumable: {TUS_VERSION} required", {"Tus-Version": TUS_VERSION}
            )
        upload_id = path[len(self.path) :].strip("/")
        if not upload_id:
            if request.method == "POST":
                return self._create(request)
            return _answer(405, f"{request.method} {path}: create uploads with POST")
        if "/" in upload_id:
            return _answer(404, f"no upload at {path}")
        match request.method:
            case "HEAD":
                return self._head(upload_id)
            case "PATCH":
                return self._patch(upload_id, request)
            case "DELETE":
                return _answer(204) if self.storage.delete(upload_id) else _unknown(upload_id)
        return _answer(405, f"{request.method} is not a tus method for an upload")

    def _options(self) -> Response:
        headers = {"Tus-Version": TUS_VERSION, "Tus-Extension": EXTENSIONS}
        if self.storage.max_size is not None:
            headers["Tus-Max-Size"] = str(self.storage.max_size)
        return _answer(204, headers=headers)

    def _create(self, request: RecordedRequest) -> Response:
        raw = request.headers.get("upload-length")
        if raw is None:
            reason = "Upload-Defer-Length is not supported" if "upload-defer-length" in request.headers else ""
            return _answer(400, reason or "Upload-Length is required")
        if not raw.isdigit():
            return _answer(400, f"Upload-Length {raw!r} is not a number of bytes")
        length = int(raw)
        if self.storage.max_size is not None and length > self.storage.max_size:
            return _answer(413, f"Upload-Length {length} is over Tus-Max-Size {self.storage.max_size}")
        try:
            metadata = _decode_metadata(request.headers.get("upload-metadata", ""))
        except ValueError as exc:
            return _answer(400, f"Upload-Metadata: {exc}")
        if request.body:
            return _answer(400, "creation-with-upload is not supported: send the bytes with PATCH")
        upload = self.storage.create(length, metadata)
        host = request.headers.get("host", request.host)
        location = f"{request.scheme}://{host}{self.path}{upload.id}"
        return _answer(201, headers={"Location": location, "Upload-Offset": "0"})

    def _head(self, upload_id: str) -> Response:
        upload = self.storage.get(upload_id)
        if upload is None:
            return _unknown(upload_id)
        headers = {
            "Upload-Offset": str(upload.offset),
            "Upload-Length": str(upload.length),
            "Cache-Control": "no-store",
        }
        if upload.metadata:
            headers["Upload-Metadata"] = _encode_metadata(upload.metadata)
        return _answer(200, headers=headers)

    def _patch(self, upload_id: str, request: RecordedRequest) -> Response:
        if request.headers.get("content-type", "").split(";")[0].strip() != OFFSET_CONTENT_TYPE:
            return _answer(415, f"Content-Type must be {OFFSET_CONTENT_TYPE}")
        raw = request.headers.get("upload-offset", "")
        if not raw.isdigit():
            return _answer(400, f"Upload-Offset {raw!r} is not a number of bytes")
        try:
            offset = self.storage.append(upload_id, int(raw), request.body)
        except OffsetConflict as exc:
            return _answer(409, str(exc))
        except ValueError as exc:
            return _answer(400, str(exc))
        if offset is None:
            return _unknown(upload_id)
        return _answer(204, headers={"Upload-Offset": str(offset)})


def _answer(status: int, text: str = "", headers: dict[str, str] | None = None) -> Response:
    return Response(status, text, {"Tus-Resumable": TUS_VERSION, **(headers or {})})


def _unknown(upload_id: str) -> Response:
    return _answer(404, f"no upload {upload_id} in this server's storage")


def _decode_metadata(header: str) -> dict[str, bytes]:
    """``key base64value,key2,...`` (a key may come without a value)."""
    metadata: dict[str, bytes] = {}
    for pair in filter(None, (part.strip() for part in header.split(","))):
        key, _, value = pair.partition(" ")
        if not key or " " in value.strip():
            raise ValueError(f"{pair!r} is not 'key base64-value'")
        try:
            metadata[key] = base64.b64decode(value.strip(), validate=True)
        except binascii.Error:
            raise ValueError(f"the value of {key!r} is not base64") from None
    return metadata


def _encode_metadata(metadata: dict[str, bytes]) -> str:
    return ",".join(
        f"{key} {base64.b64encode(value).decode('ascii')}" if value else key
        for key, value in metadata.items()
    )
