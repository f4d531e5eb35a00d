"""The quorum end to end: three agents, a real Prometheus, one publisher, faults per location.

Three ``failover-agent run`` processes (locations eu, us, ap) probe the same two domains
of pool ``api``; each location reaches its own fake server behind the shared names
(``located_agent.py``), so a fault is seen from one location only. Prometheus scrapes the
three every 0.5 s; ``failover-agent control quorum`` (``min_locations = 2``,
``for_seconds = 2``) decides. A 503 seen from eu alone never disables the domain; seen from
eu and us too, it does within ``for_seconds`` plus two scrape intervals (and the publisher's
and the probes' own intervals); healing re-enables it; an agent that stops reporting stops
voting at once; with Prometheus gone the last document stays, byte for byte, and
``failover_control_quorum_up`` is 0.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from dashboards._stack import free_port, listening, process, wait_for
from dashboards.conftest import require_binary
from failover_agent.quorum.promql import location_votes

from pytest_failover import faults
from pytest_failover.control import ControlDocument, ControlKey, generate_key, save_key
from pytest_failover.simulator import FakeDomains

AGENT_EXE = Path(sys.executable).with_name("failover-agent")
LOCATED_AGENT = Path(__file__).with_name("located_agent.py")
HOSTS = ("api.quorum.test", "api2.quorum.test")
PRIMARY = f"http://{HOSTS[0]}"
LOCATIONS = ("eu", "us", "ap")
SCRAPE = 0.5
FOR_SECONDS = 2
PROBE_INTERVAL = 0.2
PUBLISH_INTERVAL = 0.25
# the bound of the issue (for_seconds + two scrapes), plus one probe and one publisher round
DISABLE_WITHIN = FOR_SECONDS + 2 * SCRAPE + PROBE_INTERVAL + PUBLISH_INTERVAL


def _pool(probe: bool) -> list[str]:
    lines = ["[[pools]]", 'name = "api"', f"domains = [{', '.join(json.dumps('http://' + h) for h in HOSTS)}]"]
    if probe:
        lines += ["[pools.probe]", 'path = "/"', f"interval = {PROBE_INTERVAL}", f"timeout = {PROBE_INTERVAL}",
                  "[pools.readiness]", "enabled = false"]
    return lines


def agent_config(location: str, listen: str) -> str:
    return "\n".join([f'location = "{location}"', "[exporters.prometheus]", f'listen = "{listen}"', *_pool(True), ""])


def publisher_config(listen: str, key: Path, prometheus: str) -> str:
    return "\n".join([
        'location = "publisher"', "[exporters.prometheus]", f'listen = "{listen}"', *_pool(False),
        "[control]", f'signing_key_file = "{key}"', f"interval = {PUBLISH_INTERVAL}", "expires_in = 60",
        "[control.quorum]", f'prometheus_url = "http://{prometheus}"', "min_locations = 2",
        f"for_seconds = {FOR_SECONDS}", f"timeout = {PUBLISH_INTERVAL}", "",
    ])


@contextlib.contextmanager
def located_servers() -> Iterator[dict[str, FakeDomains]]:
    """One FakeDomains per location, each serving both names (never intercepting this process)."""
    sites = {location: FakeDomains() for location in LOCATIONS}
    try:
        for fd in sites.values():
            for host in HOSTS:
                fd.add(host, lambda request: {"status": "ok"})
        yield sites
    finally:
        for fd in sites.values():
            fd.close()


def start_prometheus(stack: contextlib.ExitStack, binary: str, folder: Path,
                     config: dict[str, Any]) -> tuple[str, subprocess.Popen[bytes], Path]:
    """A real Prometheus with ``config`` on a free port, stopped with ``stack``: its
    ``host:port``, process and log file."""
    address = f"127.0.0.1:{free_port()}"
    config_file = folder / "prometheus.yml"
    config_file.write_text(yaml.safe_dump(config))
    log = folder / "prometheus.log"
    proc = stack.enter_context(process([
        binary, f"--config.file={config_file}", f"--storage.tsdb.path={folder / 'tsdb'}",
        f"--web.listen-address={address}", "--log.level=warn",
    ], log))
    return address, proc, log


def _document(url: str, key: ControlKey) -> ControlDocument | None:
    response = httpx.get(url, timeout=2.0)
    if response.status_code == 503:
        return None
    response.raise_for_status()
    return ControlDocument.parse(response.content, key=key)


def _wait(what: str, check: Callable[[], bool], timeout: float) -> float:
    """Seconds until ``check()`` held; fails after ``timeout``."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if check():
            return time.monotonic() - start
        time.sleep(0.05)
    raise AssertionError(f"{what}: not within {timeout} s")


def _votes(prometheus: str) -> set[str]:
    body = httpx.get(f"http://{prometheus}/api/v1/query", params={"query": location_votes(FOR_SECONDS)}).json()
    assert body["status"] == "success", body
    return {s["metric"]["probe_location"] for s in body["data"]["result"] if s["metric"]["server_address"] == HOSTS[0]}


# Six processes timed against bounds of 2 s and 3.45 s: beside another test worker (and the
# helpers' runs) the disable once came late.
@pytest.mark.alone
def test_a_quorum_of_locations_disables_and_re_enables(tmp_path: Path) -> None:
    """One location's fault disables nothing; two disable within for_seconds + 2 scrapes; healing re-enables."""
    prometheus_bin = require_binary("prometheus")
    assert AGENT_EXE.exists(), f"{AGENT_EXE} missing: pip install -e '.[dev]'"
    key = generate_key("EdDSA", kid="quorum")
    key_file = save_key(tmp_path / "control.key", key, private=True)
    with located_servers() as sites, contextlib.ExitStack() as stack:
        started: dict[str, tuple[subprocess.Popen[bytes], Path]] = {}
        for location, fd in sites.items():
            config = tmp_path / f"agent-{location}.toml"
            config.write_text(agent_config(location, "127.0.0.1:0"))
            log = tmp_path / f"agent-{location}.log"
            resolve = json.dumps({h: fd.domain(h).http_port for h in HOSTS})
            proc = stack.enter_context(process(
                [sys.executable, str(LOCATED_AGENT), resolve, "run", str(config), "--plain", "--log-level", "INFO"],
                log))
            started[location] = (proc, log)
        agents = {location: (listening(proc, log), proc, log) for location, (proc, log) in started.items()}

        prometheus, prom, prom_log = start_prometheus(stack, prometheus_bin, tmp_path, {
            "global": {"scrape_interval": f"{int(SCRAPE * 1000)}ms", "scrape_timeout": f"{int(SCRAPE * 1000)}ms"},
            "scrape_configs": [{"job_name": "failover-agent",
                                "static_configs": [{"targets": [a[0] for a in agents.values()]}]}],
        })

        pub_config = tmp_path / "publisher.toml"
        pub_config.write_text(publisher_config("127.0.0.1:0", key_file, prometheus))
        pub_log = tmp_path / "publisher.log"
        pub = stack.enter_context(process(
            [str(AGENT_EXE), "control", "quorum", str(pub_config), "--log-level", "INFO"], pub_log))
        publisher = listening(pub, pub_log)

        for listen, proc, log in agents.values():
            wait_for(f"http://{listen}/healthz", proc, log, timeout=30)
        wait_for(f"http://{prometheus}/-/ready", prom, prom_log, timeout=30)
        wait_for(f"http://{publisher}/healthz", pub, pub_log, timeout=30)
        control = f"http://{publisher}/control.json"
        reader = key.public()

        def primary_disabled() -> bool | None:
            doc = _document(control, reader)
            return None if doc is None else doc.is_disabled("api", PRIMARY)

        _wait("a first document, nothing disabled", lambda: primary_disabled() is False, 15)

        # one location sees the primary fail: it votes, but alone it is no quorum
        sites["eu"].fail(HOSTS[0], faults.status(503))
        _wait("eu votes the primary down", lambda: _votes(prometheus) == {"eu"}, DISABLE_WITHIN + 5)
        end = time.monotonic() + DISABLE_WITHIN
        while time.monotonic() < end:
            assert primary_disabled() is False, "one location's fault disabled the primary"
            time.sleep(0.1)

        # a second location sees it too: disabled within for_seconds + two scrape intervals
        sites["us"].fail(HOSTS[0], faults.status(503))
        took = _wait("eu and us disable the primary", lambda: primary_disabled() is True, DISABLE_WITHIN + 10)
        doc = _document(control, reader)
        assert doc is not None and doc.quorum is not None
        assert dict(doc.quorum.agreed) == {"api": {PRIMARY: ("eu", "us")}}
        assert (doc.quorum.min_locations, doc.quorum.for_seconds) == (2, FOR_SECONDS)
        assert took <= DISABLE_WITHIN, f"disabled {took:.2f} s after the second fault (bound {DISABLE_WITHIN} s)"
        print(f"disabled {took:.2f} s after the second location saw the fault")

        # recovery at one of the two is enough: fewer than min_locations still see it down
        sites["us"].heal(HOSTS[0])
        healed = _wait("the primary is enabled again", lambda: primary_disabled() is False, 10)
        print(f"re-enabled {healed:.2f} s after us recovered")

        # an agent that stops reporting stops voting at once (its series go stale), not for_seconds later
        sites["us"].fail(HOSTS[0], faults.status(503))
        _wait("eu and us disable the primary again", lambda: primary_disabled() is True, DISABLE_WITHIN + 10)
        us = agents["us"][1]
        us.terminate()
        us.wait(timeout=10)
        gone = _wait("the primary is enabled without us", lambda: primary_disabled() is False, FOR_SECONDS + 10)
        assert gone < FOR_SECONDS, f"a stopped agent kept voting for {gone:.2f} s"
        print(f"re-enabled {gone:.2f} s after the us agent stopped")
        sites["eu"].heal(HOSTS[0])

        # Prometheus gone: the last document stays, byte for byte; the gauge says so
        prom.terminate()
        prom.wait(timeout=10)

        def source_down() -> bool:
            text = httpx.get(f"http://{publisher}/metrics").text
            return any(line.startswith("failover_control_quorum_up{") and float(line.rsplit(" ", 1)[1]) == 0
                       for line in text.splitlines())

        _wait("failover_control_quorum_up is 0", source_down, 10)
        scraped = httpx.get(f"http://{publisher}/metrics", headers={"Accept-Encoding": "gzip"})
        assert scraped.headers["content-encoding"] == "gzip"  # as an agent's: Prometheus asks for it
        # Read once the source is down: a round that answered while Prometheus was going
        # away signed a new document (every round does), and that one must stay.
        before = httpx.get(control).content
        time.sleep(3 * PUBLISH_INTERVAL)
        assert httpx.get(control).content == before
        log_text = pub_log.read_text()
        # said once per kind of failure, not at every poll: a stopping Prometheus may answer
        # 503 for a moment before it is unreachable
        said = [line for line in log_text.splitlines() if "no usable answer from Prometheus" in line]
        kinds = [line.split("Prometheus (", 1)[1].split(")", 1)[0] for line in said]
        assert 1 <= len(said) <= 2 and len(set(kinds)) == len(kinds), log_text[-2000:]
        assert kinds[-1] == "unreachable", kinds
        assert "stays in force" in log_text


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    """httpx here talks to loopback only."""
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
