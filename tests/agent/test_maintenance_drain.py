"""The drain, end to end: a real client with the control poller leaves a domain before its
maintenance window starts, and comes back once it ends (the agent and the fake domains real,
the window a few seconds long)."""

from __future__ import annotations

import asyncio
import math
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx
from agent_support import HMAC_KEY, config, eventually, fake_domains, pick, running, scrape

from pytest_failover import FailoverTransport, Pool
from pytest_failover.control import ControlKey, ControlPoller
from pytest_failover.simulator import FakeDomains

__all__ = ["fake_domains"]

PRIMARY = "https://api.example.com"
BACKUP = "https://api2.example.com"


async def test_a_client_drains_off_the_domain_before_the_window_and_returns_after(
    fake_domains: FakeDomains, tmp_path: Path
) -> None:
    """Window [start, start + 2 s) on the primary with drain = "2s": the client's requests move to
    the backup before start, the agent exports failover_maintenance_active during the window, and
    the requests come back to the primary after it ends."""
    fd = fake_domains
    fd.add("api.example.com", lambda _request: {"served_by": "primary"})
    fd.add("api2.example.com", lambda _request: {"served_by": "backup"})
    start = math.ceil(time.time()) + 4
    end = start + 2  # twenty of the client's polls (0.1 s) and ten control documents (0.2 s) long
    window = {"pool": "api", "domains": [PRIMARY], "drain": "2s", "reason": "drain test",
              "start": datetime.fromtimestamp(start, UTC), "end": datetime.fromtimestamp(end, UTC)}
    cfg = config(fd, tmp_path, [PRIMARY, BACKUP], policy={"sticky": False}, maintenance=[window])
    async with running(cfg) as agent:
        assert agent.address is not None
        url = f"http://{agent.address[0]}:{agent.address[1]}/control.json"
        transport = FailoverTransport([Pool("api", [PRIMARY, BACKUP])])
        poller = ControlPoller(url, transport, key=ControlKey.from_secret(HMAC_KEY), timeout=1.0)
        client = httpx.Client(transport=transport)

        def served_by() -> str:
            """Poll the control document once, then ask the pool which domain answers."""
            poller.poll_once()
            response = client.get(f"{PRIMARY}/whoami")
            answer: str = response.json()["served_by"]
            return answer

        async def until(wanted: str, limit: float) -> float:
            """When the pool's answer first came from ``wanted`` (polled every 0.1 s, at most ``limit`` s)."""
            deadline = time.monotonic() + limit
            while time.monotonic() < deadline:
                if await asyncio.to_thread(served_by) == wanted:
                    return time.time()
                await asyncio.sleep(0.1)
            raise AssertionError(f"the pool never answered from the {wanted} within {limit} s")

        try:
            with fd.intercept():
                assert await until("primary", 5) < start - 2  # before the drain: the primary
                drained = await until("backup", 6)
                assert start - 2 <= drained < start, (drained - start)  # left during the drain, before the window
                samples = await eventually(lambda: time.time() >= start and scrape(agent), timeout=5)
                assert pick(samples, "failover_maintenance_active", server_address="api.example.com") == [1.0]
                assert pick(samples, "failover_maintenance_active", server_address="api2.example.com") == []
                back = await until("primary", 8)
                assert back >= end, (back - end)  # back only once the window ended
        finally:
            await asyncio.to_thread(client.close)
            poller.stop()
