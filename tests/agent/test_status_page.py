"""The status page in a real headless Chromium (Selenium): it loads from the agent alone, shows
the demo's outage as red bars within two probe intervals, and updates without reloading."""

from __future__ import annotations

import asyncio
import datetime
import re
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from failover_agent.demo import BACKUP, PRIMARY
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from benchmarks.status_page import DemoAgent, chrome, demo_agent, missing_browser

pytestmark = pytest.mark.skipif(missing_browser() is not None, reason=str(missing_browser()))

INTERVAL = 1.0  # the demo's probe interval
PRIMARY_ROW = f'[data-key=\'["api","https://{PRIMARY}"]\']'
POOL_ROW = '[data-key=\'["api",""]\']'
ATTEMPTS = re.compile(r"served by (?P<domain>\S+) after (1 attempt|([02-9]|1\d) attempts) in \d+ ms")


@pytest.fixture
async def demo() -> AsyncIterator[DemoAgent]:
    async with demo_agent() as running:
        yield running


@pytest.fixture(scope="module")
def chromium() -> Iterator[tuple[WebDriver, dict[str, int]]]:
    """One Chromium for the module's tests (starting one was most of a short test) and its
    window's size."""
    driver = chrome(1200, 900)
    try:
        yield driver, driver.get_window_size()
    finally:
        driver.quit()


@pytest.fixture
async def browser(chromium: tuple[WebDriver, dict[str, int]]) -> WebDriver:
    """The module's Chromium as new: its first size (a test may make it a phone's), a blank page
    (every test loads its own agent's page, on a port of its own: no cache or storage shared)."""
    driver, size = chromium
    await asyncio.to_thread(driver.set_window_size, size["width"], size["height"])
    await asyncio.to_thread(driver.get, "about:blank")
    return driver


async def js(driver: WebDriver, script: str) -> Any:
    return await asyncio.to_thread(driver.execute_script, script)


async def until(what: Callable[[], Any], timeout: float, step: float = 0.05) -> Any:
    """Poll ``what`` (a blocking browser query, run in a thread) until truthy; bounded."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = await asyncio.to_thread(what)
        if last:
            return last
        await asyncio.sleep(step)
    raise AssertionError(f"not seen within {timeout} s (last: {last!r})")


def _text(driver: WebDriver, css: str) -> str:
    found = driver.find_elements(By.CSS_SELECTOR, css)
    return found[0].text if found else ""


def _newest(driver: WebDriver, css: str) -> str:
    """The newest bar of the check at ``css``: its class and its tooltip."""
    found = driver.find_elements(By.CSS_SELECTOR, f"{css} .bars span:last-child")
    return f"{found[0].get_attribute('class')} {found[0].get_attribute('title')}" if found else ""


def _bars(driver: WebDriver, css: str) -> tuple[int, int]:
    """(green, red) bars of the check at ``css``."""
    ok = len(driver.find_elements(By.CSS_SELECTOR, f"{css} .bars span.ok"))
    fail = len(driver.find_elements(By.CSS_SELECTOR, f"{css} .bars span.fail"))
    return ok, fail


async def test_outage_turns_bars_red_without_a_reload(demo: DemoAgent, browser: WebDriver) -> None:
    """Green bars first; the primary's DNS fails; red bars within two probe intervals, same page."""
    await asyncio.to_thread(browser.get, demo.url)
    assert await until(lambda: _bars(browser, PRIMARY_ROW)[0] >= 2, timeout=8)
    await until(lambda: "UP" in _text(browser, f"{PRIMARY_ROW} .badge"), timeout=4 * INTERVAL)
    # "1 attempt", "2 attempts" (on a loaded machine a probe may time out and fail over)
    await until(lambda: ATTEMPTS.search(_text(browser, POOL_ROW)), timeout=4 * INTERVAL)
    await js(browser, "window.__statusMarker = 42")
    updates = int(await js(browser, "return document.body.dataset.updates"))

    demo.primary_dns_fails()
    faulted = time.monotonic()
    # the newest bar red, for the DNS failure (a loaded machine may have timed out before)
    await until(lambda: (bar := _newest(browser, PRIMARY_ROW)).startswith("fail") and "dns_error" in bar,
                timeout=4 * INTERVAL, step=0.02)
    took = time.monotonic() - faulted
    print(f"the outage showed {took:.2f} s after the fault")  # seen with pytest -s
    assert took <= 2 * INTERVAL, f"the outage took {took:.2f} s to show"
    await until(lambda: "DOWN" in _text(browser, f"{PRIMARY_ROW} .badge"), timeout=2 * INTERVAL)
    assert "down since" in _text(browser, PRIMARY_ROW)
    assert "dns_error" in _text(browser, PRIMARY_ROW)
    await until(lambda: (m := ATTEMPTS.search(_text(browser, POOL_ROW))) and m["domain"] != PRIMARY,
                timeout=4 * INTERVAL)  # the pool is served by a backup
    await until(lambda: f"skip {PRIMARY}" in _text(browser, "#control"), timeout=8)  # the demo disables it

    assert await js(browser, "return window.__statusMarker") == 42  # the same document: no reload
    assert await js(browser, "return performance.getEntriesByType('navigation').length") == 1
    assert int(await js(browser, "return document.body.dataset.updates")) > updates


async def test_page_is_self_contained_and_fits_a_phone(demo: DemoAgent, browser: WebDriver) -> None:
    """Every resource comes from the agent (works offline); a 390 px wide screen needs no side scroll."""
    await asyncio.to_thread(browser.set_window_size, 390, 844)
    await asyncio.to_thread(browser.get, demo.url)
    await until(lambda: _bars(browser, POOL_ROW)[0] >= 1, timeout=8)
    origin = demo.url.rstrip("/")
    resources = await js(browser, "return performance.getEntriesByType('resource').map(e => e.name)")
    assert resources and all(str(r).startswith(origin) for r in resources), resources
    assert "width=device-width" in str(await js(
        browser, "return document.querySelector('meta[name=viewport]').content"))
    inner = await js(browser, "return window.innerWidth")
    assert inner <= 400
    assert await js(browser, "return document.documentElement.scrollWidth") <= inner
    uptime = _text(browser, f"{POOL_ROW} .uptime")
    assert "1 h" in uptime and "7 d" in uptime


UPTIME = re.compile(r"^\d{1,3}\.\d %\nover (\d+) s\n1 h\n—\n24 h\n—\n7 d$")
CLOCK = r"\d\d:\d\d:\d\d UTC"


async def test_figures_say_what_they_cover_in_utc(demo: DemoAgent, browser: WebDriver) -> None:
    """A few seconds into the demo: the 1 h uptime is shown over the seconds its results cover
    (one precision), 24 h and 7 d have no figure yet, times are 24-hour UTC, and the control
    document's version reads as the time it was made."""
    await asyncio.to_thread(browser.get, demo.url)
    await until(lambda: _bars(browser, POOL_ROW)[0] >= 3, timeout=8)
    await until(lambda: "Version" in _text(browser, "#control"), timeout=8)
    status = (await asyncio.to_thread(httpx.get, demo.url + "status.json", timeout=10)).json()
    uptime = UPTIME.match(_text(browser, f"{POOL_ROW} .uptime"))
    assert uptime is not None, _text(browser, f"{POOL_ROW} .uptime")
    assert 1 <= int(uptime[1]) <= status["now"] - status["started_at"] + 2
    assert re.search(rf"last checked {CLOCK} \(", _text(browser, POOL_ROW)), _text(browser, POOL_ROW)
    assert re.search(rf"^Updated {CLOCK}, every", _text(browser, "#updated"))
    control = _text(browser, "#control")
    made = re.match(r"^Version of (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}) UTC \((\d+)\), signed ", control)
    assert made is not None, control
    shown = datetime.datetime.strptime(made[1], "%Y-%m-%d %H:%M:%S.%f").replace(tzinfo=datetime.UTC)
    assert shown.timestamp() == pytest.approx(int(made[2]) / 1000)


async def test_status_json_documents_the_history(demo: DemoAgent) -> None:
    """``/status.json`` carries each check's results, uptime and streak, and the refresh hint;
    only the bundled assets are served."""
    async with httpx.AsyncClient(trust_env=False) as client:
        for _ in range(100):
            doc = (await client.get(demo.url + "status.json")).json()
            pool = doc["pools"]["api"]
            primary = pool["domains"][f"https://{PRIMARY}"]["history"]  # None until its first check
            if pool["history"] and primary is not None and len(primary["results"]) >= 2:
                break
            await asyncio.sleep(0.1)
        script = await client.get(demo.url + "assets/status.js")
        missing = [(await client.get(demo.url + f"assets/{name}")).status_code
                   for name in ("nope.js", "index.html", "..%2fpage.py")]
    assert script.headers["content-type"] == "text/javascript; charset=utf-8" and "status.json" in script.text
    assert missing == [404, 404, 404]
    assert doc["refresh"] == INTERVAL / 2 and doc["history"]["backend"] == "memory"
    primary = pool["domains"][f"https://{PRIMARY}"]["history"]
    at, ok, latency, label = primary["results"][-1]
    assert ok == 1 and label == "200" and 0 < latency < 1 and at <= doc["now"]
    assert primary["up"] is True and primary["down_since"] is None and primary["since"] <= at
    assert primary["uptime"]["1h"] == 1.0
    assert pool["history"]["results"][-1][3] == f"https://{PRIMARY}"


async def test_a_maintenance_window_shows_a_banner_and_is_not_downtime(browser: WebDriver, tmp_path: Path) -> None:
    """A window on the primary starts 3 s into the run: the banner announces it, then says it is under
    way; the primary fails its probes in it, yet its badge reads MAINTENANCE, its newest bars are
    maintenance bars (none red) and its 1 h uptime stays 100.0 %; a screenshot of it is taken."""
    start = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=3)
    window = {"pool": "api", "domains": [f"https://{PRIMARY}"], "reason": "database upgrade",
              "start": start, "end": start + datetime.timedelta(minutes=30)}
    async with demo_agent(maintenance=[window]) as demo:
        await asyncio.to_thread(browser.get, demo.url)
        planned = await until(lambda: _text(browser, "#maintenance"), timeout=8)
        assert re.fullmatch(rf"Planned maintenance on {re.escape(PRIMARY)} \(pool api\) from {CLOCK} to {CLOCK}: "
                            r"database upgrade\.", planned), planned
        await until(lambda: _bars(browser, PRIMARY_ROW)[0] >= 1, timeout=8)  # counted results before it
        under_way = await until(lambda: (t := _text(browser, "#maintenance")).startswith("Maintenance") and t,
                                timeout=8)
        assert re.fullmatch(rf"Maintenance under way on {re.escape(PRIMARY)} \(pool api\) until {CLOCK}: "
                            r"database upgrade\. Its results do not count as downtime\.", under_way), under_way
        demo.primary_dns_fails()
        await until(lambda: (bar := _newest(browser, PRIMARY_ROW)).startswith("maint") and "dns_error" in bar,
                    timeout=4 * INTERVAL, step=0.02)
        await until(lambda: len(browser.find_elements(By.CSS_SELECTOR, f"{PRIMARY_ROW} .bars span.maint")) >= 3,
                    timeout=6 * INTERVAL)
        assert _text(browser, f"{PRIMARY_ROW} .badge") == "MAINTENANCE"
        assert _bars(browser, PRIMARY_ROW)[1] == 0  # no red bar: nothing counted as down
        assert _text(browser, f"{PRIMARY_ROW} .uptime").startswith("100.0 %")
        status = (await asyncio.to_thread(httpx.get, demo.url + "status.json", timeout=10)).json()
        primary = status["pools"]["api"]["domains"][f"https://{PRIMARY}"]
        assert primary["maintenance"] is True and primary["history"]["uptime"]["1h"] == 1.0
        assert primary["history"]["results"][-1][3] == "maintenance dns_error"
        assert status["maintenance"]["active"][0]["reason"] == "database upgrade"
        shot = await asyncio.to_thread(browser.get_screenshot_as_png)
        (tmp_path / "maintenance.png").write_bytes(shot)
        assert shot.startswith(b"\x89PNG")


async def test_the_history_and_its_maintenance_bars_survive_a_restart(browser: WebDriver, tmp_path: Path) -> None:
    """With a history file, a 4 s window on the primary (which fails in it) ends; the agent restarts
    with no window configured: the page shows the earlier results, the window's as maintenance bars
    (none red), and the 1 h uptime still leaves them out (100.0 %); a screenshot of it is taken."""
    history = tmp_path / "history.sqlite"
    # a second ahead: the agent probes first (a window under way at its start would do too)
    start = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=1)
    end = start + datetime.timedelta(seconds=4)
    window = {"pool": "api", "domains": [f"https://{PRIMARY}"], "reason": "database upgrade", "start": start,
              "end": end}
    async with (demo_agent(status={"history_path": history}, maintenance=[window]) as demo,
                httpx.AsyncClient(trust_env=False, timeout=10) as client):

        async def labels() -> list[str]:
            doc = (await client.get(demo.url + "status.json")).json()
            kept = doc["pools"]["api"]["domains"][f"https://{PRIMARY}"]["history"]  # None: no result yet
            return [] if kept is None else [r[3] for r in kept["results"]]

        deadline = time.monotonic() + 20
        while not any(label.startswith("maintenance") for label in await labels()):
            assert time.monotonic() < deadline, "no maintenance result within 20 s"
            await asyncio.sleep(0.05)
        demo.primary_dns_fails()
        await asyncio.sleep(max(0.0, end.timestamp() - 1.0 - time.time()))
        demo.domains.heal(PRIMARY)  # a second before the end: every failure lies in the window
        while (seen := await labels())[-1].startswith("maintenance") or seen.count("200") < 2:
            assert time.monotonic() < deadline, f"no result after the window within 20 s: {seen}"
            await asyncio.sleep(0.05)
    before = [label for label in seen if label.startswith("maintenance")]
    assert "maintenance dns_error" in before, seen

    async with demo_agent(status={"history_path": history}) as demo:
        await asyncio.to_thread(browser.get, demo.url)
        await until(lambda: len(browser.find_elements(By.CSS_SELECTOR, f"{PRIMARY_ROW} .bars span.maint"))
                    >= len(before), timeout=8)
        assert _bars(browser, PRIMARY_ROW)[1] == 0  # no red bar: the window's failures are not downtime
        assert _text(browser, f"{PRIMARY_ROW} .uptime").startswith("100.0 %")
        status = (await asyncio.to_thread(httpx.get, demo.url + "status.json", timeout=10)).json()
        assert status["history"]["backend"] == "sqlite" and status["maintenance"]["active"] == []
        primary = status["pools"]["api"]["domains"][f"https://{PRIMARY}"]["history"]
        assert [r[3] for r in primary["results"]][:len(seen)] == seen  # the results of before the restart
        assert primary["uptime"]["1h"] == 1.0
        shot = await asyncio.to_thread(browser.get_screenshot_as_png)
        (tmp_path / "after-restart.png").write_bytes(shot)
        assert shot.startswith(b"\x89PNG")


async def test_a_dns_mismatch_shows_a_badge_and_its_addresses(browser: WebDriver, tmp_path: Path) -> None:
    """With ``[pools.resolver]``, no badge while the system and the resolver agree; once the
    primary's system DNS is poisoned (``failover_dns_mismatch`` 1), a DNS MISMATCH badge and a
    line naming both answers, in place; a screenshot of it is taken."""
    async with demo_agent(resolver=True) as demo:
        await asyncio.to_thread(browser.get, demo.url)
        real = demo.domains.domain(PRIMARY).address
        await until(lambda: _bars(browser, PRIMARY_ROW)[0] >= 2, timeout=8)
        status = (await asyncio.to_thread(httpx.get, demo.url + "status.json", timeout=10)).json()
        dns = status["pools"]["api"]["domains"][f"https://{PRIMARY}"]["dns"]
        assert dns["mismatch"] is False and dns["resolver"] == [real]  # the control: they agree
        assert "DNS MISMATCH" not in _text(browser, PRIMARY_ROW)

        demo.primary_dns_poisoned()
        badge = f"{PRIMARY_ROW} .badge.dns"
        await until(lambda: _text(browser, badge) == "DNS MISMATCH", timeout=6 * INTERVAL)
        line = _text(browser, PRIMARY_ROW)
        match = re.search(r"DNS mismatch: the system resolves (\S+), the resolver (\S+) ", line)
        assert match is not None, line
        assert match[1] != real and match[2] == real
        status = (await asyncio.to_thread(httpx.get, demo.url + "status.json", timeout=10)).json()
        assert status["pools"]["api"]["domains"][f"https://{PRIMARY}"]["dns"]["mismatch"] is True
        other = f'[data-key=\'["api","https://{BACKUP}"]\']'
        assert not _text(browser, f"{other} .badge.dns")  # only the poisoned domain
        shot = await asyncio.to_thread(browser.get_screenshot_as_png)
        (tmp_path / "dns-mismatch.png").write_bytes(shot)
