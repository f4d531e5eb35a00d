"""A maintenance drain through the quorum publisher, on a real Prometheus: the control document
is decided by the locations' votes, and ``failover-agent maintenance start`` (run against the
publisher's configuration, in this process: no interpreter start-up to wait for before the
window) still drains the domain. A real client with the control poller leaves
the domain before the window starts and comes back after it ends; no location voted it down."""

from __future__ import annotations

import contextlib
import math
import time
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner
from dashboards._stack import listening, process, wait_for
from dashboards.conftest import require_binary
from failover_agent.cli import main

from pytest_failover import FailoverTransport, Pool
from pytest_failover.control import ControlDocument, ControlPoller, generate_key, save_key
from pytest_failover.simulator import FakeDomains

from .test_quorum_e2e import AGENT_EXE, start_prometheus

PRIMARY, BACKUP = "https://api.drain.test", "https://api2.drain.test"
PUBLISH_INTERVAL = 0.25


def publisher_config(key: Path, prometheus: str, maintenance_file: Path) -> str:
    return "\n".join([
        'location = "publisher"', "[exporters.prometheus]", 'listen = "127.0.0.1:0"',
        "[[pools]]", 'name = "api"', f'domains = ["{PRIMARY}", "{BACKUP}"]',
        "[control]", f'signing_key_file = "{key}"', f"interval = {PUBLISH_INTERVAL}", "expires_in = 60",
        f'maintenance_file = "{maintenance_file}"',
        "[control.quorum]", f'prometheus_url = "http://{prometheus}"', "min_locations = 2", "for_seconds = 2",
        f"timeout = {PUBLISH_INTERVAL}", "",
    ])


def test_a_run_time_window_drains_through_the_quorum_publisher(tmp_path: Path) -> None:
    """Window [start, start + 2 s) on the primary with --drain 2s, started with the CLI while the
    publisher runs on a real Prometheus: the client moves to the backup in [start - 2 s, start),
    the document then disables the primary with an empty quorum.agreed, and the client is back
    on the primary once the window ended."""
    prometheus_bin = require_binary("prometheus")
    assert AGENT_EXE.exists(), f"{AGENT_EXE} missing: pip install -e '.[dev]'"
    key = generate_key("EdDSA", kid="quorum")
    key_file = save_key(tmp_path / "control.key", key, private=True)
    with FakeDomains() as fd, contextlib.ExitStack() as stack:
        fd.add("api.drain.test", lambda _request: {"served_by": "primary"})
        fd.add("api2.drain.test", lambda _request: {"served_by": "backup"})
        # no agent reports: the votes are an empty vector, only the drain disables anything
        prometheus, prom, prom_log = start_prometheus(stack, prometheus_bin, tmp_path,
                                                      {"global": {"scrape_interval": "1s"}, "scrape_configs": []})
        pub_config = tmp_path / "publisher.toml"
        pub_config.write_text(publisher_config(key_file, prometheus, tmp_path / "maintenance.jws"))
        pub_log = tmp_path / "publisher.log"
        pub = stack.enter_context(process(
            [str(AGENT_EXE), "control", "quorum", str(pub_config), "--log-level", "INFO"], pub_log))
        publisher = listening(pub, pub_log)
        wait_for(f"http://{prometheus}/-/ready", prom, prom_log, timeout=30)
        wait_for(f"http://{publisher}/healthz", pub, pub_log, timeout=30)
        control = f"http://{publisher}/control.json"

        transport = FailoverTransport([Pool("api", [PRIMARY, BACKUP])])
        poller = ControlPoller(control, transport, key=key.public(), timeout=1.0)
        client = stack.enter_context(httpx.Client(transport=transport))
        stack.callback(poller.stop)

        def served_by() -> str:
            """Poll the control document once, then ask the pool which domain answers."""
            poller.poll_once()
            answer: str = client.get(f"{PRIMARY}/whoami").json()["served_by"]
            return answer

        def until(wanted: str, limit: float) -> float:
            """When the pool's answer first came from ``wanted`` (every 0.1 s, at most ``limit`` s)."""
            deadline = time.monotonic() + limit
            while time.monotonic() < deadline:
                if served_by() == wanted:
                    return time.time()
                time.sleep(0.1)
            raise AssertionError(f"the pool never answered from the {wanted} within {limit} s:\n"
                                 + pub_log.read_text(errors="replace")[-3000:])

        with fd.intercept():
            assert until("primary", 10) > 0  # a first document: nothing disabled
            start = math.ceil(time.time()) + 4  # the drain 2 s before, a whole second to spare for the command
            end = start + 2  # twenty of the client's polls (0.1 s) and eight documents (0.25 s) long
            started = CliRunner().invoke(main, [
                "maintenance", "start", str(pub_config), "--pool", "api", "--domain", PRIMARY,
                "--at", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(start)), "--for", "2s", "--drain", "2s",
                "--reason", "quorum drain"])
            assert started.exit_code == 0, (started.stderr, started.exception)
            assert time.time() < start - 2, "the command took too long: the drain began before the test could watch"
            assert until("primary", 1) < start - 2  # before the drain: still the primary
            drained = until("backup", 10)
            assert start - 2 <= drained < start, drained - start  # left during the drain, before the window
            doc = ControlDocument.parse(httpx.get(control).content, key=key.public())
            assert doc.is_disabled("api", PRIMARY) and doc.quorum is not None and dict(doc.quorum.agreed) == {}
            back = until("primary", 8)
            assert back >= end, back - end  # back only once the window ended
        assert "maintenance file" in pub_log.read_text()


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    """httpx here talks to loopback only."""
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
