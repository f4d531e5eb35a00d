"""``TusUpload`` and ``AsyncTusUpload``: short loops over the protocol plan (``_protocol``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import TYPE_CHECKING, Generic, TypeVar

import anyio.to_thread
import httpx

from ._protocol import Kind, Step, UploadPlan, encode_metadata
from ._source import Data, Source, source_of
from ._telemetry import UploadTelemetry, telemetry_for

if TYPE_CHECKING:
    from opentelemetry.metrics import MeterProvider
    from opentelemetry.trace import Span, TracerProvider

__all__ = ["DEFAULT_CHUNK_SIZE", "AsyncTusUpload", "Progress", "TusUpload"]

#: 1 MiB: at most this much is sent again after a failure.
DEFAULT_CHUNK_SIZE = 1024 * 1024
DEFAULT_RETRIES = 5

#: ``on_progress(offset, length)``: called whenever the acknowledged offset grows.
Progress = Callable[[int, int], object]

ClientT = TypeVar("ClientT", httpx.Client, httpx.AsyncClient)


def _count(name: str, value: object, *, least: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    if value < least:
        raise ValueError(f"{name} must be >= {least}, not {value}")
    return value


def _url(name: str, value: object) -> str:
    if not isinstance(value, str | httpx.URL):
        raise TypeError(f"{name} must be a URL (str or httpx.URL), not {type(value).__name__}")
    try:
        url = httpx.URL(value)
    except httpx.InvalidURL as exc:
        raise ValueError(f"{name} {str(value)!r}: {exc}") from None
    if url.scheme not in ("http", "https") or not url.host:
        raise ValueError(f"{name} {str(value)!r}: expected an absolute http(s) URL")
    return str(url)


class _Upload(Generic[ClientT]):
    """What the sync and async uploads share: validation, the plan, telemetry, progress."""

    _client_type: type[ClientT]

    def __init__(
        self,
        client: ClientT,
        create_url: str | httpx.URL,
        data: Data,
        *,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        metadata: Mapping[str, str | bytes] | None = None,
        headers: Mapping[str, str] | None = None,
        upload_url: str | httpx.URL | None = None,
        on_progress: Progress | None = None,
        retries: int = DEFAULT_RETRIES,
        tracer_provider: TracerProvider | None = None,
        meter_provider: MeterProvider | None = None,
    ) -> None:
        if not isinstance(client, self._client_type):
            twin = "AsyncTusUpload" if isinstance(client, httpx.AsyncClient) else None
            hint = f"; use {twin} for an httpx.AsyncClient" if twin else ""
            raise TypeError(
                f"{type(self).__name__} needs an {self._client_type.__module__}."
                f"{self._client_type.__qualname__}, not {type(client).__name__}{hint}"
            )
        if on_progress is not None and not callable(on_progress):
            raise TypeError(f"on_progress must be callable(offset, length), not {type(on_progress).__name__}")
        if headers is not None and not isinstance(headers, Mapping):
            raise TypeError(f"headers must be a mapping, not {type(headers).__name__}")
        self._client: ClientT = client
        self._source: Source = source_of(data)
        self._plan = UploadPlan(
            create_url=_url("create_url", create_url),
            length=self._source.length,
            chunk_size=_count("chunk_size", chunk_size, least=1),
            metadata=encode_metadata(metadata),
            headers=dict(headers or {}),
            upload_url=None if upload_url is None else _url("upload_url", upload_url),
            retries=_count("retries", retries, least=0),
        )
        self._on_progress = on_progress
        self._telemetry: UploadTelemetry = telemetry_for(tracer_provider, meter_provider)

    @property
    def url(self) -> str | None:
        """The upload URL, once the upload is created."""
        return self._plan.url

    @property
    def offset(self) -> int:
        """How many bytes the server has acknowledged."""
        return self._plan.offset

    @property
    def length(self) -> int:
        """How many bytes the upload has in all."""
        return self._plan.length

    @property
    def resumes(self) -> int:
        """How many times the upload asked ``HEAD`` where it stands (after a failure, or to resume)."""
        return self._plan.resumes

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self._plan.url or self._plan.create_url} {self.offset}/{self.length}>"

    # -- one upload() call, shared by both loops

    @contextmanager
    def _running(self) -> Iterator[Span]:
        plan = self._plan
        plan.start()
        with self._telemetry.upload(plan.url or plan.create_url, plan.length) as span, self._source.opened():
            try:
                yield span
            except BaseException:
                plan.interrupted()
                raise
            finally:
                self._telemetry.finished(span, plan.offset, plan.resumes, plan.url)

    def _attempt(self, step: Step) -> AbstractContextManager[Span | None]:
        """A ``PATCH`` gets a span of its own; creation and ``HEAD`` have the transport's."""
        return self._telemetry.chunk(step) if step.kind is Kind.PATCH else nullcontext(None)

    def _answered(self, upload: Span, chunk: Span | None, step: Step, response: httpx.Response) -> None:
        before = self._plan.offset
        answer = self._plan.answered(step, response)
        self._telemetry.answered(upload, chunk, response, answer, self._plan.offset)
        if self._on_progress is not None and self._plan.offset > before:
            self._on_progress(self._plan.offset, self._plan.length)

    def _failed(self, chunk: Span | None, step: Step, exc: httpx.TransportError) -> None:
        self._telemetry.failed(chunk, exc)
        self._plan.failed(step, exc)


class TusUpload(_Upload[httpx.Client]):
    """A tus 1.0 upload through an ``httpx.Client`` (with a ``FailoverTransport``, it survives
    a failover).

    ``data`` is bytes, a path, or a seekable binary file (read from its current position
    to its end). ``upload()`` creates the upload (or, with ``upload_url=``, resumes one
    made earlier), sends it in ``chunk_size`` pieces, and returns the upload URL. When
    a chunk fails it asks ``HEAD`` for the offset, on the next domain the transport
    picks, and goes on from there. See ``pytest_failover.uploads`` for every rule.
    """

    _client_type = httpx.Client

    def upload(self) -> str:
        """Send what the server does not have yet; returns the upload URL."""
        plan, client = self._plan, self._client
        with self._running() as span:
            while (step := plan.next()) is not None:
                body = self._source.read(step.offset, step.size) if step.size else None
                with self._attempt(step) as chunk:
                    try:
                        response = client.request(
                            step.method, step.url, headers=step.headers, content=body, extensions=step.extensions
                        )
                    except httpx.TransportError as exc:
                        self._failed(chunk, step, exc)
                        continue
                    self._answered(span, chunk, step, response)
        assert plan.url is not None
        return plan.url


class AsyncTusUpload(_Upload[httpx.AsyncClient]):
    """The ``httpx.AsyncClient`` twin of :class:`TusUpload`: ``await upload.upload()``.

    Chunks of a file or path are read in a worker thread, so the event loop never waits
    on the disk.
    """

    _client_type = httpx.AsyncClient

    async def upload(self) -> str:
        """Send what the server does not have yet; returns the upload URL."""
        plan, client, source = self._plan, self._client, self._source
        with self._running() as span:
            while (step := plan.next()) is not None:
                body = None
                if step.size:
                    body = (
                        await anyio.to_thread.run_sync(source.read, step.offset, step.size)
                        if source.blocking
                        else source.read(step.offset, step.size)
                    )
                with self._attempt(step) as chunk:
                    try:
                        response = await client.request(
                            step.method, step.url, headers=step.headers, content=body, extensions=step.extensions
                        )
                    except httpx.TransportError as exc:
                        self._failed(chunk, step, exc)
                        continue
                    self._answered(span, chunk, step, response)
        assert plan.url is not None
        return plan.url
