"""The pool probe: one request through the real failover client, as a user would send it.

The client is ``httpx.AsyncClient`` over the library's ``AsyncFailoverTransport`` with the
pool's policy, so failover, breakers (which live across probes), the retry budget and the
client's telemetry are the library's own. Under it, each attempt is one
:class:`failover_agent.wire.ProbeTransport` exchange.
"""

from __future__ import annotations

import asyncio
import ssl
from time import perf_counter

import httpx
from opentelemetry.metrics import MeterProvider
from opentelemetry.trace import TracerProvider

from pytest_failover import (
    AsyncFailoverTransport,
    CircuitOpenError,
    FailoverError,
    FailoverResult,
    Policy,
    error_type_of,
)
from pytest_failover.semconv import ERROR_TIMEOUT, OUTCOME_CIRCUIT_OPEN

from ..config import PoolConfig
from ..wire import ProbeTransport
from .body import check_body
from .result import ProbeResult

__all__ = ["PoolProber"]


class PoolProber:
    """Owns one :class:`AsyncFailoverTransport` per pool; its breakers live across probes."""

    def __init__(
        self,
        cfg: PoolConfig,
        *,
        region: str | None,
        context: ssl.SSLContext,
        tracer_provider: TracerProvider,
        meter_provider: MeterProvider,
        policy: Policy | None = None,
    ) -> None:
        """``policy``: the library's Policy of ``cfg.policy``, if the caller built it already
        (a frozen value, so pools with equal policies may share one)."""
        self.cfg = cfg
        self.pool = cfg.to_pool()
        self.policy = cfg.policy.to_policy() if policy is None else policy
        self.url = self.pool.order(region)[0].url + cfg.probe.path
        self.transport = AsyncFailoverTransport(
            [self.pool],
            self.policy,
            ProbeTransport(context),
            region=region,
            tracer_provider=tracer_provider,
            meter_provider=meter_provider,
        )
        self.client = httpx.AsyncClient(transport=self.transport, trust_env=False)

    async def aclose(self) -> None:
        await self.client.aclose()

    def breakers(self) -> dict[str, str]:
        """Breaker state per domain, from the transport."""
        pool = self.transport.state().pools[self.pool.name]
        return {d.domain: d.breaker for d in pool.domains}

    async def probe(self) -> ProbeResult:
        """One logical request through the failover client; never raises."""
        start = perf_counter()
        probe = self.cfg.probe
        timeout = self.policy.deadline + probe.timeout
        try:
            async with asyncio.timeout(timeout):  # no extra task, unlike wait_for
                response = await self.client.request(probe.method, self.url, headers=probe.headers)
        except CircuitOpenError as exc:
            return ProbeResult(False, None, OUTCOME_CIRCUIT_OPEN, perf_counter() - start,
                               attempts=len(exc.attempts), detail=str(exc))
        except FailoverError as exc:
            last = exc.attempts[-1].error_type if exc.attempts else None
            return ProbeResult(False, None, last or error_type_of(exc), perf_counter() - start,
                               attempts=len(exc.attempts), detail=f"{exc.reason}: {exc}")
        except TimeoutError:
            return ProbeResult(False, None, ERROR_TIMEOUT, perf_counter() - start,
                               detail=f"no answer within {timeout:g} s")
        except Exception as exc:  # a probe never kills its job
            return ProbeResult(False, None, error_type_of(exc), perf_counter() - start,
                               detail=str(exc) or type(exc).__name__)
        duration = perf_counter() - start
        result = response.extensions.get("failover")
        served_by = result.domain if isinstance(result, FailoverResult) else None
        attempts = len(result.attempts) if isinstance(result, FailoverResult) else 0
        status = response.status_code
        if status not in probe.expected_status:
            return ProbeResult(False, status, str(status), duration, served_by=served_by,
                               attempts=attempts, detail=f"status {status}")
        reason = check_body(response.content, probe.json_check)
        if reason is not None:
            return ProbeResult(False, status, "body_mismatch", duration, served_by=served_by,
                               attempts=attempts, detail=reason)
        return ProbeResult(True, status, None, duration, served_by=served_by, attempts=attempts)
