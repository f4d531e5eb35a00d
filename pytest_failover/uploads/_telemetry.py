"""Spans and the bytes counter of uploads (OpenTelemetry API only).

A span ``failover.upload`` (INTERNAL) per ``upload()`` call, with a child span
``failover.upload.chunk`` per ``PATCH``; the failover transport's own request spans
(creation, ``HEAD``, each ``PATCH``) nest under them. ``failover.upload.bytes`` counts
the bytes servers acknowledged, by pool and domain. Instruments are made once per
pair of providers.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING

import httpx
from opentelemetry import metrics, trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from .._classify import error_type_of
from .._httpx import FailoverError
from .._telemetry import redact_url
from ..semconv import (
    ERROR_TYPE,
    EVENT_UPLOAD_RESUMED,
    FAILOVER_DOMAIN,
    FAILOVER_POOL,
    FAILOVER_UPLOAD_BYTES,
    FAILOVER_UPLOAD_OFFSET,
    FAILOVER_UPLOAD_RESUMES,
    FAILOVER_UPLOAD_SIZE,
    HTTP_REQUEST_BODY_SIZE,
    HTTP_RESPONSE_STATUS_CODE,
    SCHEMA_URL,
    UNIT_BYTES,
    UPLOAD_CHUNK_SPAN,
    UPLOAD_SCOPE,
    UPLOAD_SPAN,
    URL_FULL,
)
from ._protocol import Answer, Step

if TYPE_CHECKING:
    from opentelemetry.metrics import MeterProvider
    from opentelemetry.trace import Span, TracerProvider

__all__ = ["UploadTelemetry", "telemetry_for"]

_VERSION = "0.1.0"


def error_type(exc: BaseException) -> str:
    """``error.type`` of a failure: the failover transport's last attempt's, when it has one."""
    if isinstance(exc, FailoverError):
        last = exc.attempts[-1].error_type if exc.attempts else None
        return last or exc.reason
    if isinstance(exc, httpx.TransportError):
        return error_type_of(exc)
    return type(exc).__qualname__


class UploadTelemetry:
    """The tracer and the bytes counter for one pair of providers."""

    def __init__(self, tracer_provider: TracerProvider | None, meter_provider: MeterProvider | None) -> None:
        self.tracer = trace.get_tracer(UPLOAD_SCOPE, _VERSION, tracer_provider=tracer_provider, schema_url=SCHEMA_URL)
        meter = metrics.get_meter(UPLOAD_SCOPE, _VERSION, meter_provider=meter_provider, schema_url=SCHEMA_URL)
        self.bytes = meter.create_counter(
            FAILOVER_UPLOAD_BYTES, unit=UNIT_BYTES, description="Bytes of uploads the servers acknowledged"
        )

    def upload(self, url: str, length: int) -> AbstractContextManager[Span]:
        """The span of one ``upload()`` call, current while it runs."""
        return self._span(UPLOAD_SPAN, {URL_FULL: redact_url(httpx.URL(url)), FAILOVER_UPLOAD_SIZE: length})

    def chunk(self, step: Step) -> AbstractContextManager[Span]:
        """The span of one ``PATCH``, current while it is sent."""
        return self._span(UPLOAD_CHUNK_SPAN, {FAILOVER_UPLOAD_OFFSET: step.offset, HTTP_REQUEST_BODY_SIZE: step.size})

    @contextmanager
    def _span(self, name: str, attributes: dict[str, str | int]) -> Iterator[Span]:
        with self.tracer.start_as_current_span(
            name, kind=SpanKind.INTERNAL, attributes=attributes, record_exception=False,
            set_status_on_exception=False,
        ) as span:
            try:
                yield span
            except BaseException as exc:  # the upload stopped here: say why, and let it go on
                span.set_status(Status(StatusCode.ERROR, str(exc)))
                span.set_attribute(ERROR_TYPE, type(exc).__qualname__)
                raise

    def answered(
        self, upload: Span, chunk: Span | None, response: httpx.Response, answer: Answer, offset: int
    ) -> None:
        """An answer to a request of the upload; ``offset`` is the acknowledged offset after it."""
        if chunk is not None and chunk.is_recording():
            chunk.set_attribute(HTTP_RESPONSE_STATUS_CODE, response.status_code)
            if answer.domain is not None:
                chunk.set_attribute(FAILOVER_DOMAIN, answer.domain)
            if not answer.stored:
                chunk.set_status(Status(StatusCode.ERROR, f"{response.status_code}: no byte stored"))
                chunk.set_attribute(ERROR_TYPE, str(response.status_code))
        if answer.resumed and upload.is_recording():
            event: dict[str, str | int] = {FAILOVER_UPLOAD_OFFSET: offset}
            if answer.domain is not None:
                event[FAILOVER_DOMAIN] = answer.domain
            upload.add_event(EVENT_UPLOAD_RESUMED, event)
        if answer.stored:
            attributes: dict[str, str] = {}
            if answer.pool is not None:
                attributes[FAILOVER_POOL] = answer.pool
            if answer.domain is not None:
                attributes[FAILOVER_DOMAIN] = answer.domain
            self.bytes.add(answer.stored, attributes)

    @staticmethod
    def failed(chunk: Span | None, exc: BaseException) -> None:
        """A request of the upload failed in the transport (a chunk's span says why)."""
        if chunk is not None and chunk.is_recording():
            chunk.set_status(Status(StatusCode.ERROR, str(exc)))
            chunk.set_attribute(ERROR_TYPE, error_type(exc))

    @staticmethod
    def finished(upload: Span, offset: int, resumes: int, url: str | None) -> None:
        if upload.is_recording():
            upload.set_attribute(FAILOVER_UPLOAD_OFFSET, offset)
            upload.set_attribute(FAILOVER_UPLOAD_RESUMES, resumes)
            if url is not None:
                upload.set_attribute(URL_FULL, redact_url(httpx.URL(url)))


@functools.lru_cache(maxsize=16)
def telemetry_for(tracer_provider: TracerProvider | None, meter_provider: MeterProvider | None) -> UploadTelemetry:
    """One ``UploadTelemetry`` per pair of providers (``None``: the global ones)."""
    return UploadTelemetry(tracer_provider, meter_provider)
