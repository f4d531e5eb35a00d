"""The status page in a real headless browser: the agent on the demo's domains, Chromium driven
by Selenium. The browser test (tests/agent/test_status_page.py) uses it, and so does the
screenshot in the docs::

    python -m benchmarks.status_page docs/img/status-page.png

which runs the demo's domains healthy for 50 s, then its outage for 20 s (the primary's DNS fails, the backup's
certificate is about to expire) and takes the picture. Needs ``chromium`` and
``chromedriver`` on PATH (Debian: ``apt-get install chromium chromium-driver``).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import datetime
import shutil
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from failover_agent.config import AgentConfig
from failover_agent.demo import BACKUP, PRIMARY, REGIONAL, demo_config
from failover_agent.runner import Agent
from failover_agent.telemetry import Telemetry
from selenium import webdriver
from selenium.webdriver.chrome.service import Service

from pytest_failover import faults
from pytest_failover.control import generate_key, save_key
from pytest_failover.simulator import DoHServer, FakeDomains, Response

__all__ = ["DemoAgent", "chrome", "demo_agent", "missing_browser"]


def missing_browser() -> str | None:
    """Why the browser cannot run here, or None."""
    gone = [name for name in ("chromium", "chromedriver") if shutil.which(name) is None]
    return f"{' and '.join(gone)} not on PATH (Debian: chromium, chromium-driver)" if gone else None


def chrome(width: int = 1200, height: int = 900) -> webdriver.Chrome:
    """A headless Chromium of ``width`` x ``height`` CSS pixels (the caller quits it)."""
    options = webdriver.ChromeOptions()
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--disable-extensions", "--no-first-run", "--hide-scrollbars", "--force-device-scale-factor=1",
                f"--window-size={width},{height}"):
        options.add_argument(arg)
    chromium = shutil.which("chromium")
    if chromium is not None:
        options.binary_location = chromium
    return webdriver.Chrome(options=options, service=Service(shutil.which("chromedriver")))


def _handler(request: Any) -> Any:
    """The demo's fake API: a JSON health answer and a CORS preflight answer."""
    if request.method == "OPTIONS":
        return Response(status=204, headers={
            "Access-Control-Allow-Origin": "https://app.example.com",
            "Access-Control-Allow-Methods": "GET, POST",
            "Access-Control-Allow-Headers": "content-type",
        })
    return {"status": "ok", "domain": request.host}


@dataclass
class DemoAgent:
    """A running agent on the demo's three fake domains, and the means to fault them."""

    agent: Agent
    domains: FakeDomains
    url: str  # the status page

    def primary_dns_fails(self) -> None:
        """The demo timeline's +8 s step, now."""
        self.domains.fail(PRIMARY, faults.dns_nxdomain())

    def primary_dns_poisoned(self) -> None:
        """The system's lookup of the primary answers a wrong address (with ``resolver=True``,
        the DoH server still answers the right one: ``failover_dns_mismatch`` 1)."""
        self.domains.fail(PRIMARY, faults.dns_poisoned())

    def backup_cert_expires_soon(self) -> None:
        """The demo timeline's +20 s step, now."""
        soon = datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=5)
        self.domains.add(BACKUP, _handler, cert_not_after=soon)


@asynccontextmanager
async def demo_agent(status: dict[str, Any] | None = None,
                     maintenance: list[dict[str, Any]] | None = None,
                     resolver: bool = False) -> AsyncIterator[DemoAgent]:
    """The demo's configuration (probes every second) on loopback, listening on a free port;
    ``status`` changes its ``[status]``, ``maintenance`` adds ``[[maintenance]]`` tables,
    ``resolver`` a fake DoH server answering each domain's own address as the pool's
    ``[pools.resolver]`` (the DNS comparison)."""
    with tempfile.TemporaryDirectory(prefix="status-page-") as tmp, FakeDomains() as fd:
        for host in (PRIMARY, BACKUP, REGIONAL):
            fd.add(host, _handler)
        key = save_key(Path(tmp) / "control.key", generate_key("HS256", kid="demo"), private=True)
        config = demo_config(key, "127.0.0.1:0", fd.ca_bundle)
        if status is not None:
            config = config.model_copy(update={"status": config.status.model_copy(update=status)})
        if maintenance is not None:
            config = AgentConfig.model_validate({**config.model_dump(), "maintenance": maintenance})
        if resolver:
            doh = DoHServer()
            doh_domain = fd.add("doh.test", doh)
            for host in (PRIMARY, BACKUP, REGIONAL):
                doh.answer(host, [fd.domain(host).address], ttl=60)
            data = config.model_dump()
            data["pools"][0]["resolver"] = {"doh": "https://doh.test/dns-query", "bootstrap": [doh_domain.address]}
            config = AgentConfig.model_validate(data)
        agent = Agent(config, telemetry=Telemetry(location=config.location))
        await agent.start()
        try:
            assert agent.address is not None
            host, port = agent.address
            yield DemoAgent(agent, fd, f"http://{host}:{port}/")
        finally:
            await agent.stop(flush_timeout=1.0)


async def screenshot(out: Path, width: int, height: int) -> None:
    async with demo_agent() as demo:
        driver = await asyncio.to_thread(chrome, width, height)
        try:
            await asyncio.to_thread(driver.get, demo.url)  # open all along: it updates in place
            await asyncio.sleep(50)  # green bars first
            demo.primary_dns_fails()
            await asyncio.sleep(10)
            demo.backup_cert_expires_soon()
            await asyncio.sleep(8)
            full = await asyncio.to_thread(driver.execute_script, "return document.documentElement.scrollHeight")
            shot = await asyncio.to_thread(driver.execute_cdp_cmd, "Page.captureScreenshot", {
                "format": "png", "captureBeyondViewport": True,
                "clip": {"x": 0, "y": 0, "width": width, "height": int(full), "scale": 1}})
            await asyncio.to_thread(out.parent.mkdir, parents=True, exist_ok=True)
            await asyncio.to_thread(out.write_bytes, base64.b64decode(shot["data"]))
        finally:
            await asyncio.to_thread(driver.quit)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.status_page", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path, help="where the PNG goes")
    parser.add_argument("--width", type=int, default=1100)
    parser.add_argument("--height", type=int, default=800)
    args = parser.parse_args(argv)
    why = missing_browser()
    if why is not None:
        parser.error(why)
    asyncio.run(screenshot(args.out, args.width, args.height))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
