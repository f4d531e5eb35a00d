"""Prometheus's HTTP API, ``GET /api/v1/query``, with bounded time and size and a validated answer.

The same API is served by Thanos Query and by Mimir (under its ``/prometheus`` prefix), so
the publisher works with any of them: ``prometheus_url`` is the API's base URL, and
``headers`` carry what the deployment needs (Mimir's ``X-Scope-OrgID``, an
``Authorization``). Every failure is a :class:`QuorumSourceError` whose ``reason`` is one of
:data:`REASONS`; nothing from the answer is trusted before it passed :class:`QueryAnswer`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Literal

import httpx
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from .promql import VOTE_LABELS

__all__ = ["MAX_ANSWER_BYTES", "REASONS", "PrometheusQuery", "QueryAnswer", "QuorumSourceError", "Sample"]

MAX_ANSWER_BYTES = 16 * 1024 * 1024
"""A larger answer is refused (``too_large``): the votes of 1,000 domains from 10 locations are ~3 MB."""

REASONS = ("unreachable", "http_status", "refused", "too_large", "invalid")
"""Why an answer was not used: no connection or no answer in time, an HTTP error status
without a Prometheus error body, a Prometheus error (``status: error``), more than
:data:`MAX_ANSWER_BYTES`, or a body that is not the answer this query must have."""


class QuorumSourceError(Exception):
    """Prometheus gave no usable answer; ``reason`` is one of :data:`REASONS`."""

    def __init__(self, reason: str, message: str) -> None:
        assert reason in REASONS, reason
        self.reason = reason
        super().__init__(message)


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, frozen=True, extra="forbid")


class Sample(_Strict):
    """One series of an instant vector: its labels and ``[unix time, "value"]``."""

    metric: dict[str, str]
    value: tuple[float, str] = Field(strict=False)  # a JSON array: strict mode wants a Python tuple

    @field_validator("metric")
    @classmethod
    def _labels(cls, metric: dict[str, str]) -> dict[str, str]:
        missing = [label for label in VOTE_LABELS if not metric.get(label)]
        if missing:
            raise ValueError(f"a series without {', '.join(missing)}: not the votes query's answer")
        return metric

    @field_validator("value")
    @classmethod
    def _number(cls, value: tuple[float, str]) -> tuple[float, str]:
        try:
            number = float(value[1])
        except ValueError:
            raise ValueError(f"the value {value[1]!r} is not a number") from None
        if math.isnan(number):
            raise ValueError("the value is NaN")
        return value


class _Vector(_Strict):
    resultType: Literal["vector"]  # Prometheus's own member name
    result: list[Sample] = Field(max_length=1_000_000)


class QueryAnswer(BaseModel):
    """A successful ``/api/v1/query`` answer holding an instant vector.

    Top-level members the API may add (``warnings``, ``infos``, ``stats``) are allowed;
    everything inside ``data`` must be exactly what the API documents.
    """

    model_config = ConfigDict(strict=True, frozen=True, extra="ignore")

    status: Literal["success"]
    data: _Vector
    warnings: list[str] = []


def _error_message(body: bytes) -> str | None:
    """Prometheus's own error (``errorType: error``) from an error body, if it is one."""
    try:
        data = json.loads(body)
    except ValueError:
        return None
    if isinstance(data, dict) and data.get("status") == "error":
        return f"{data.get('errorType', '?')}: {str(data.get('error', ''))[:500]}"
    return None


def _first_error(exc: ValidationError) -> str:
    err = exc.errors(include_url=False)[0]
    where = ".".join(str(part) for part in err["loc"]) or "the body"
    return f"{where}: {err['msg'].removeprefix('Value error, ')}"


class PrometheusQuery:
    """Runs one PromQL query against ``base_url``'s HTTP API (an ``httpx.AsyncClient`` of its own)."""

    def __init__(self, base_url: str, *, timeout: float, headers: Mapping[str, str] | None = None,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.url = f"{base_url.rstrip('/')}/api/v1/query"
        self.timeout = timeout
        self._http = httpx.AsyncClient(
            timeout=httpx.Timeout(timeout), headers=dict(headers or {}), trust_env=False,
            follow_redirects=False, transport=transport,
        )

    async def aclose(self) -> None:
        await self._http.aclose()

    async def query(self, expr: str) -> QueryAnswer:
        """The answer to ``expr`` at Prometheus's now, or :class:`QuorumSourceError`."""
        # the server's own evaluation timeout a little under ours, so it answers with an error
        params = {"query": expr, "timeout": f"{max(int(self.timeout * 900), 100)}ms"}
        try:
            async with self._http.stream("GET", self.url, params=params) as response:
                received = bytearray()
                async for chunk in response.aiter_bytes():
                    received += chunk
                    if len(received) > MAX_ANSWER_BYTES:
                        raise QuorumSourceError(
                            "too_large", f"{self.url}: the answer is larger than {MAX_ANSWER_BYTES} bytes")
        except httpx.TimeoutException:
            raise QuorumSourceError("unreachable", f"{self.url}: no answer within {self.timeout:g} s") from None
        except httpx.HTTPError as exc:
            raise QuorumSourceError("unreachable", f"{self.url}: {type(exc).__name__}: {exc}") from None
        body = bytes(received)
        if response.status_code != 200:
            error = _error_message(body)
            if error is not None:
                raise QuorumSourceError("refused", f"{self.url}: HTTP {response.status_code}, {error}")
            raise QuorumSourceError("http_status", f"{self.url}: HTTP {response.status_code} "
                                    f"({response.headers.get('content-type', 'no content type')})")
        try:
            data = json.loads(body)
        except ValueError as exc:
            raise QuorumSourceError("invalid", f"{self.url}: the answer is not JSON ({exc})") from None
        if isinstance(data, dict) and data.get("status") == "error":
            raise QuorumSourceError("refused", f"{self.url}: {_error_message(body)}")
        try:
            return QueryAnswer.model_validate(data)
        except ValidationError as exc:
            raise QuorumSourceError("invalid", f"{self.url}: not an instant vector of votes: {_first_error(exc)}") from None
