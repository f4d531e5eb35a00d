"""The tus 1.0 client without I/O: which request comes next, and what each answer means.

Rules
-----
* No upload URL yet: ``POST`` the creation URL with ``Upload-Length`` (and
  ``Upload-Metadata``). It carries an ``Idempotency-Key``, so the failover transport
  may send it again on another domain; the worst a repeat costs is an empty upload
  the server expires. ``201`` with ``Location`` gives the upload URL.
* After a failed chunk, or when resuming an upload made earlier, ask ``HEAD`` for
  ``Upload-Offset``. ``HEAD`` is idempotent, so the transport tries the pool's
  domains in its order (the domain that just failed is suspect and comes last).
  The answer is the offset to go on from; an offset *below* the bytes already
  acknowledged means the answering domain has other storage, and stops the upload.
* Otherwise ``PATCH`` the next chunk at the acknowledged offset. It is sent with
  ``{"idempotent": False}``: the transport never sends it twice once bytes have left
  (a failure before any byte left, such as a refused connect, still moves to the
  next domain at once). The uploader decides what happens next: ``HEAD``, then the
  next chunk from the offset the storage reports. So no byte the server has is sent
  again, beyond the one chunk in flight when the failure struck.
* ``404``/``410`` for the upload URL: the answering domain does not know the
  upload. ``UploadNotFoundError``, never a silent restart from byte 0.
* ``409`` (offset conflict), ``423``, ``408``, ``429`` and ``5xx`` on a ``PATCH`` count as
  a failed chunk; ``retries`` failed chunks in a row without a byte stored stop the
  upload (``UploadFailedError``). A ``HEAD`` or creation that every domain failed
  stops it at once: the transport has already tried the whole pool.
* Any other answer that is not a success is a ``TusProtocolError``.
"""

from __future__ import annotations

import base64
import enum
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from ._errors import TusError, TusProtocolError, UploadFailedError, UploadNotFoundError

__all__ = ["TUS_VERSION", "Answer", "Kind", "Step", "UploadPlan", "encode_metadata"]

TUS_VERSION = "1.0.0"
OFFSET_CONTENT_TYPE = "application/offset+octet-stream"

#: Answers to a ``PATCH`` after which the chunk may be tried again (after a ``HEAD``).
_RETRYABLE = frozenset({408, 409, 423, 429})
_GONE = frozenset({404, 410})


class Kind(enum.Enum):
    CREATE = "create"
    HEAD = "head"
    PATCH = "patch"


@dataclass(frozen=True, slots=True, kw_only=True)
class Step:
    """One request to make. For a ``PATCH``, ``size`` bytes from ``offset`` go as its body."""

    kind: Kind
    method: str
    url: str
    headers: Mapping[str, str]
    offset: int
    size: int
    extensions: Mapping[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class Answer:
    """What an answer (or a failure) did: bytes newly stored, and who answered."""

    stored: int = 0
    resumed: bool = False
    domain: str | None = None
    pool: str | None = None


def encode_metadata(metadata: Mapping[str, str | bytes] | None) -> str | None:
    """``Upload-Metadata``: ``key base64(value)`` pairs joined by commas; keys are checked."""
    if metadata is None:
        return None
    if not isinstance(metadata, Mapping):
        raise TypeError(f"metadata must be a mapping of str to str or bytes, not {type(metadata).__name__}")
    pairs = []
    for key, value in metadata.items():
        if not isinstance(key, str) or not key or not key.isascii() or any(c in key for c in " ,\t\r\n"):
            raise ValueError(
                f"metadata key {key!r}: tus keys are non-empty ASCII without spaces or commas"
            )
        if isinstance(value, str):
            value = value.encode()
        elif not isinstance(value, bytes):
            raise TypeError(f"metadata[{key!r}] must be str or bytes, not {type(value).__name__}")
        pairs.append(f"{key} {base64.b64encode(value).decode('ascii')}")
    return ",".join(pairs) or None


def _offset_header(response: httpx.Response) -> int | None:
    raw = response.headers.get("Upload-Offset")
    return int(raw) if raw is not None and raw.isdigit() else None


def _who(response: httpx.Response) -> tuple[str | None, str | None]:
    """The domain that answered and its pool (the failover transport's result), if known."""
    result = response.extensions.get("failover")
    domain = getattr(result, "domain", None)
    pool = getattr(result, "pool", None)
    return (domain if isinstance(domain, str) else None, pool if isinstance(pool, str) else None)


def _excerpt(response: httpx.Response) -> str:
    text = response.text.strip().replace("\n", " ")
    return f": {text[:200]}" if text else ""


class UploadPlan:
    """One upload's state: the upload URL, the acknowledged offset, what to ask next."""

    def __init__(
        self,
        *,
        create_url: str,
        length: int,
        chunk_size: int,
        metadata: str | None,
        headers: Mapping[str, str],
        upload_url: str | None,
        retries: int,
    ) -> None:
        self.create_url = create_url
        self.length = length
        self.chunk_size = chunk_size
        self._metadata = metadata
        self._headers = {**headers, "Tus-Resumable": TUS_VERSION}
        self.url = upload_url
        self.offset = 0
        self.retries = retries
        self.resumes = 0
        self._resume = upload_url is not None  # an upload made earlier: ask where it stands
        self._failures = 0
        self._last_failure: BaseException | None = None

    @property
    def done(self) -> bool:
        return self.url is not None and not self._resume and self.offset >= self.length

    def start(self) -> None:
        """A new call of ``upload()``: failures are counted afresh."""
        self._failures = 0
        self._last_failure = None

    def interrupted(self) -> None:
        """``upload()`` stopped: the next call asks where the upload stands first. The last
        failed chunk's error goes (the error that stopped it holds it as its cause, if it
        is the cause): its traceback holds the frames that drove this plan, and this plan
        would hold them in a cycle."""
        self._last_failure = None
        if self.url is not None:
            self._resume = True

    # -- what next

    def next(self) -> Step | None:
        if self.url is None:
            headers = {**self._headers, "Upload-Length": str(self.length)}
            if self._metadata is not None:
                headers["Upload-Metadata"] = self._metadata
            headers["Idempotency-Key"] = uuid.uuid4().hex
            return self._step(Kind.CREATE, "POST", self.create_url, headers, size=0)
        if self._resume:
            return self._step(Kind.HEAD, "HEAD", self.url, dict(self._headers), size=0)
        if self.offset >= self.length:
            return None
        size = min(self.chunk_size, self.length - self.offset)
        headers = {
            **self._headers,
            "Upload-Offset": str(self.offset),
            "Content-Type": OFFSET_CONTENT_TYPE,
        }
        return self._step(Kind.PATCH, "PATCH", self.url, headers, size=size)

    def _step(self, kind: Kind, method: str, url: str, headers: dict[str, str], *, size: int) -> Step:
        # The uploader decides about resending a PATCH (HEAD first); a creation may go
        # again (its Idempotency-Key says so); HEAD is idempotent anyway.
        extensions = {"failover": {"idempotent": False}} if kind is Kind.PATCH else {}
        return Step(
            kind=kind, method=method, url=url, headers=headers, offset=self.offset, size=size,
            extensions=extensions,
        )

    # -- what happened

    def answered(self, step: Step, response: httpx.Response) -> Answer:
        """Take an answer; raises a ``TusError`` when the upload cannot go on."""
        status = response.status_code
        domain, pool = _who(response)
        if step.kind is Kind.CREATE:
            return self._created(response, status, domain, pool)
        if status in _GONE:
            where = f"{domain} answered" if domain else "the server answered"
            raise UploadNotFoundError(
                f"upload {self.url}: {where} {status} to {step.method}, with {self.offset} of "
                f"{self.length} bytes stored. The domains of a pool must share the upload "
                "storage (see docs/uploads.md); the upload is not started again from byte 0",
                url=self.url, offset=self.offset, status=status, domain=domain,
            )
        if step.kind is Kind.HEAD:
            return self._headed(response, status, domain, pool)
        return self._patched(step, response, status, domain, pool)

    def failed(self, step: Step, exc: BaseException) -> Answer:
        """Take a transport failure; raises ``UploadFailedError`` when the upload cannot go on."""
        if step.kind is not Kind.PATCH:
            what = "creating the upload" if step.kind is Kind.CREATE else "asking for its offset (HEAD)"
            raise self._error(UploadFailedError, f"{what} failed on every domain: {exc}") from exc
        return self._chunk_failed(exc)

    def _created(self, response: httpx.Response, status: int, domain: str | None, pool: str | None) -> Answer:
        location = response.headers.get("Location")
        if not 200 <= status < 300:
            kind: type[TusError] = UploadFailedError if status >= 500 else TusProtocolError
            raise self._error(
                kind, f"creating an upload at {self.create_url}: {status}{_excerpt(response)}",
                status=status,
            )
        if not location:
            raise self._error(
                TusProtocolError,
                f"creating an upload at {self.create_url}: {status} without a Location header",
                status=status,
            )
        self.url = str(httpx.URL(self.create_url).join(location))
        self.offset = 0
        self._resume = False
        return Answer(domain=domain, pool=pool)

    def _headed(self, response: httpx.Response, status: int, domain: str | None, pool: str | None) -> Answer:
        if not 200 <= status < 300:
            kind: type[TusError] = UploadFailedError if status >= 500 or status in _RETRYABLE else TusProtocolError
            raise self._error(kind, f"HEAD {self.url}: {status}{_excerpt(response)}", status=status)
        offset = _offset_header(response)
        if offset is None:
            raise self._error(TusProtocolError, f"HEAD {self.url}: {status} without an Upload-Offset", status=status)
        declared = response.headers.get("Upload-Length")
        if declared is not None and declared != str(self.length):
            raise self._error(
                TusProtocolError,
                f"HEAD {self.url}: Upload-Length {declared}, but this upload has {self.length} bytes",
                status=status,
            )
        if offset > self.length:
            raise self._error(
                TusProtocolError, f"HEAD {self.url}: Upload-Offset {offset} is past the length {self.length}",
                status=status,
            )
        if offset < self.offset:
            where = domain or "the server"
            raise self._error(
                TusProtocolError,
                f"HEAD {self.url}: {where} has {offset} bytes, fewer than the {self.offset} already "
                "acknowledged: the domains do not share the upload storage (see docs/uploads.md)",
                status=status,
            )
        stored, self.offset = offset - self.offset, offset
        if stored:
            self._failures = 0
        self._resume = False
        self.resumes += 1
        return Answer(stored=stored, resumed=True, domain=domain, pool=pool)

    def _patched(
        self, step: Step, response: httpx.Response, status: int, domain: str | None, pool: str | None
    ) -> Answer:
        if status >= 500 or status in _RETRYABLE:
            return self._chunk_failed(None, f"{status}{_excerpt(response)}", domain=domain, pool=pool)
        if not 200 <= status < 300:
            raise self._error(
                TusProtocolError, f"PATCH {self.url} at {step.offset}: {status}{_excerpt(response)}",
                status=status,
            )
        offset = _offset_header(response)
        if offset is None or not step.offset <= offset <= step.offset + step.size:
            raise self._error(
                TusProtocolError,
                f"PATCH {self.url} at {step.offset} ({step.size} bytes): {status} with Upload-Offset "
                f"{response.headers.get('Upload-Offset')!r}",
                status=status,
            )
        if offset == step.offset:  # nothing taken: as a failed chunk
            return self._chunk_failed(None, f"{status}, no byte stored", domain=domain, pool=pool)
        stored, self.offset = offset - step.offset, offset
        self._failures, self._last_failure = 0, None
        return Answer(stored=stored, domain=domain, pool=pool)

    def _chunk_failed(
        self, exc: BaseException | None, what: str | None = None, *, domain: str | None = None,
        pool: str | None = None,
    ) -> Answer:
        self._failures += 1
        self._resume = True
        if exc is not None:
            self._last_failure = exc
        if self._failures > self.retries:
            reason = what or str(exc)
            error = self._error(
                UploadFailedError,
                f"upload {self.url}: {self._failures} chunks in a row failed at offset "
                f"{self.offset} (the last: {reason})",
            )
            try:
                raise error from (exc or self._last_failure)
            finally:  # the error's traceback holds this frame: no local may hold the error
                del error
        return Answer(domain=domain, pool=pool)

    def _error(self, kind: type[TusError], message: str, *, status: int | None = None) -> TusError:
        if issubclass(kind, TusProtocolError):
            return kind(message, url=self.url, offset=self.offset, status=status)
        return kind(message, url=self.url, offset=self.offset)
