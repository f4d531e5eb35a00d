"""Helpers shared by the agent's tests: fake domains, a running agent, scraping."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from failover_agent.config import AgentConfig, parse_config
from failover_agent.runner import Agent
from failover_agent.telemetry import Telemetry
from prometheus_client.parser import text_string_to_metric_families

from pytest_failover.control import ControlKey
from pytest_failover.simulator import FakeDomains, Response

HMAC_KEY = b"agent-test-key-0123456789abcdef!"
"""The agent's HS256 secret in these tests (32 bytes, as ``ControlKey.from_secret`` needs)."""

Sample = tuple[str, frozenset[tuple[str, str]]]


def cors_handler(origin: str = "https://app.example.com", methods: str = "GET, POST",
                 status: str = "ok") -> Callable[[Any], Any]:
    """A fake API: JSON health answer, and a CORS preflight answer."""

    def handler(request: Any) -> Any:
        if request.method == "OPTIONS":
            return Response(status=204, headers={
                "Access-Control-Allow-Origin": origin,
                "Access-Control-Allow-Methods": methods,
            })
        return {"status": status}

    return handler


@pytest.fixture
def fake_domains() -> Iterator[FakeDomains]:
    with FakeDomains() as fd:
        yield fd


def config(fd: FakeDomains, tmp_path: Path, domains: list[str], **extra: Any) -> AgentConfig:
    """A fast agent config over ``domains`` (fractions of a second everywhere)."""
    key = tmp_path / "control.key"
    key.write_text(ControlKey.from_secret(HMAC_KEY).to_json(private=True))
    pool: dict[str, Any] = {
        "name": "api",
        "domains": domains,
        "policy": {"attempt_timeout": 1.0, "deadline": 2.5, "breaker_threshold": 2,
                   "breaker_cooldown": 30.0, "backoff": {"base": 0.01, "cap": 0.02, "max_attempts": 3}},
        "probe": {"path": "/health", "interval": 0.3, "timeout": 0.3},
        "readiness": {"interval": 0.5, "timeout": 0.5},
    }
    for key_name in ("policy", "probe", "readiness"):
        pool[key_name].update(extra.pop(key_name, {}))
    if "resolver" in extra:  # [pools.resolver]
        pool["resolver"] = extra.pop("resolver")
    data: dict[str, Any] = {
        "location": "test-lab",
        "ca_file": Path(fd.ca_bundle),
        "pools": [pool],
        "exporters": {"prometheus": {"listen": "127.0.0.1:0"}},
        "control": {"signing_key_file": key, "interval": 0.2, "expires_in": 30.0, "disable_after": 2},
    }
    data.update(extra)
    return parse_config(data)


@asynccontextmanager
async def running(cfg: AgentConfig, **kwargs: Any) -> AsyncIterator[Agent]:
    agent = Agent(cfg, telemetry=kwargs.pop("telemetry", None) or Telemetry(
        location=cfg.location, otlp=cfg.exporters.otlp, **kwargs))
    await agent.start()
    try:
        yield agent
    finally:
        await agent.stop(flush_timeout=1.0)


async def eventually(check: Callable[[], Awaitable[Any] | Any], timeout: float = 20.0, step: float = 0.05) -> Any:
    """Poll ``check`` until it returns something truthy (bounded), and return it."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if asyncio.iscoroutine(last):
            last = await last
        if last:
            return last
        await asyncio.sleep(step)
    raise AssertionError(f"condition not met within {timeout} s (last value {last!r})")


async def scrape(agent: Agent) -> dict[Sample, float]:
    """GET /metrics over HTTP and parse it: {(sample name, labels): value}."""
    assert agent.address is not None
    host, port = agent.address
    async with httpx.AsyncClient(trust_env=False) as client:
        response = await client.get(f"http://{host}:{port}/metrics")
    response.raise_for_status()
    out: dict[Sample, float] = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            out[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return out


def pick(samples: Mapping[Sample, float], name: str, **labels: str) -> list[float]:
    """Values of ``name`` whose labels include ``labels``."""
    want = set(labels.items())
    return [v for (n, ls), v in samples.items() if n == name and want <= ls]
