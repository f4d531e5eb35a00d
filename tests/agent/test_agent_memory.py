"""Guards of the agent's memory (issue 30: at most 64 MiB of RSS at 1,000 domains).

``python -m benchmarks agent`` measures the RSS; these hold, without a clock, what it
rests on: the modules a run imports and what the agent keeps per domain."""

from __future__ import annotations

import subprocess
import sys
import tracemalloc

import httpx
import pytest
from failover_agent import prometheus_text
from failover_agent.status.history import History, Sample
from opentelemetry.exporter.prometheus import _mapping as official

# what `failover-agent run` imports before its first check: the console script's module, the
# service, the runner and its telemetry, the listener and the status page
_RUN_IMPORTS = ("failover_agent.__main__", "failover_agent.service", "failover_agent.server")
_NEVER: tuple[str, ...] = ("prometheus_client", "http.server", "wsgiref", "opentelemetry.exporter.prometheus",
                           "aiohttp", "rich", "sqlite3")  # sqlite3: only with a history file
# httpcore: httpx imports it on first use since 0.28, and with its own import before (0.27,
# the httpx extra's floor, which .ci/floors.py runs these tests at)
if tuple(int(part) for part in httpx.__version__.split(".")[:2]) >= (0, 28):
    _NEVER += ("httpcore",)


def test_a_run_imports_neither_prometheus_client_nor_the_former_dependencies() -> None:
    """A fresh interpreter importing what a run imports loads none of prometheus_client (the
    exporter package's import), httpcore (from httpx 0.28), aiohttp or rich, nor sqlite3 until
    a history file is configured: each was a megabyte of RSS or more."""
    script = (f"import sys\nfor m in {_RUN_IMPORTS!r}: __import__(m)\n"
              f"print(sorted(m for m in sys.modules if any(m == n or m.startswith(n + '.') for n in {_NEVER!r})))")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]", out.stdout


@pytest.mark.parametrize("name", ["failover.probe.duration", "http.client.request.duration", "a-b c:d", "é.x"])
def test_the_naming_rules_are_the_official_exporters(name: str) -> None:
    """The renderer's naming rules, loaded without the exporter's package, are its functions."""
    assert prometheus_text.sanitize_full_name(name) == official.sanitize_full_name(name)
    assert prometheus_text.sanitize_attribute(name) == official.sanitize_attribute(name)
    for unit in ("s", "By", "1", "{request}", "ms/s", ""):
        assert prometheus_text.map_unit(unit) == official.map_unit(unit)


def test_the_status_history_of_a_check_stays_under_3_kb() -> None:
    """A check's history, full (its rings are allocated whole; two hours at 15 s fill its bars
    and put 240 results in an hour's slot), holds under 3,100 bytes: 2,856 measured, against
    4,791 when counts were 4 bytes and labels pointers (6.7 MiB at 1,000 domains)."""
    checks, rounds, at = 50, 2 * 240, 1_699_999_200.0  # the start of an hour
    tracemalloc.start()
    try:
        history = History()
        for n in range(rounds):
            for k in range(checks):
                history.add(("pool", f"https://d{k}.example"), Sample(at + n * 15, n % 97 != 0, 0.001, "200"))
        per_check = tracemalloc.get_traced_memory()[0] / checks
    finally:
        tracemalloc.stop()
    assert len(history) == checks
    assert per_check < 3_100, per_check


#: Python bytes the runtime of 200 pools of two domains holds per domain before its first
#: probe (tracemalloc: 5.4 KB measured): its pools' library state, probers and checks. A
#: table of outcomes built per pool by the library made it 33 KB (30 MiB at 1,000 domains),
#: which the RSS benchmark caught and nothing here did.
RUNTIME_CEILING = 8_000


async def test_the_runtime_of_400_domains_holds_under_8_kb_a_domain() -> None:
    from failover_agent.config import parse_config
    from failover_agent.runner import Agent
    from failover_agent.runtime import Runtime

    pools = 200
    config = parse_config({"pools": [
        {"name": f"p{i}", "domains": [f"http://127.0.0.{2 + i}:9", f"http://127.0.1.{2 + i}:9"]}
        for i in range(pools)]})
    agent = Agent(config)
    tracemalloc.start()
    try:
        runtime = Runtime(agent, config)
        per_domain = tracemalloc.get_traced_memory()[0] / (2 * pools)
    finally:
        tracemalloc.stop()
    try:
        assert per_domain <= RUNTIME_CEILING, f"{per_domain:,.0f} bytes a domain (ceiling {RUNTIME_CEILING:,})"
    finally:
        await runtime.aclose()
        agent.telemetry.shutdown()
